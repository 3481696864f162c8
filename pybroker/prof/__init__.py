# pybroker.prof: the flush and page-cache profiler (`pybroker prof record|report|compare|top`).
"""Profile a running broker's flushes, group commits and page cache (docs/profiling.md).

``sampler`` reads the broker's instruments (the shared-memory region, the control block),
page-cache residency of its store files and the kernel's figures once a second;
``recording`` writes and reads the recording (JSON lines); ``report`` turns one into a page of
charts, ``compare`` two; ``top`` shows the samples live.
"""
