# RocketMQ 5's gRPC MessagingService served by pybroker's own gRPC workers.
"""apache.rocketmq.v2.MessagingService, as the Java proxy serves it (docs/architecture/grpc.md).

``status`` maps refusals to the proxy's status codes and messages; ``request_context`` reads
the client's metadata; ``settings`` keeps client settings (Telemetry); ``route``,
``producer``, ``client`` and ``consumer`` are the proxy's activities; ``service`` is the
servicer the gRPC worker (pybroker/proc/grpc_worker.py) registers.
"""
