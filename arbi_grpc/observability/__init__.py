"""What the server tells its operators: Prometheus metrics (engine, RPCs, memory, process, GPU), their HTTP
exporter on a port of its own, and structured logs with request ids.

Import the submodules directly; `settings`, `engine_observer` and `nvml` import neither torch nor prometheus_client.
"""
