"""Autoscaling on coserve's own queue depth: each replica reports its coserve's running and waiting
requests (vLLM's gauges on /metrics, CoserveReplica.record_autoscaling_stats), and the policy asks
for as many replicas as that total needs at `target_ongoing_requests` each. Ray applies the
deployment's min/max replicas, scaling factors and up/down delays around it."""


def queue_depth_policy(ctx):
    metrics = ctx.aggregated_metrics or {}
    running = metrics.get("coserve_requests_running") or {}
    waiting = metrics.get("coserve_requests_waiting") or {}
    if not running and not waiting:  # no report yet: Ray's count of ongoing requests
        total = ctx.total_num_requests
    else:
        total = sum(running.values()) + sum(waiting.values())
    target = ctx.config.get_target_ongoing_requests()
    return total / target, {}
