# Runtime statistics: the shared-memory instrument region, its sampler and Java's views of it.
"""Statistics kept where the work happens (docs/statistics.md).

* :mod:`pybroker.stats.region` — the region file, writer slots, snapshots decoded with numpy.
* :mod:`pybroker.stats.windows` — Java's sampled windows (StoreStatsService, StatsItem).
* :mod:`pybroker.stats.service` — the supervisor's sampler and the figures admin requests
  and the metrics endpoint answer with.
"""
