"""build_app: the Ray Serve application for `serve run` (integrations/ray/serve-config.yaml) or
`serve.run(build_app({...}))`. Arguments (all optional):

  coserve_args        flags for `coserve serve`, one string (default "--demo")
  coserve_binary      the binary (default: $COSERVE_BIN, else `coserve` on PATH)
  num_cpus, num_gpus  each replica's Ray resources (default 1 CPU, 0 GPUs); without GPUs coserve
                      runs --device cpu with --cpu-threads num_cpus, with them --device cuda on
                      the GPUs Ray assigned
  min_replicas, max_replicas, initial_replicas, target_ongoing_requests
                      autoscaling on coserve's queue depth (coserve_ray.autoscaling); equal min
                      and max (default 1 and 1) keep a fixed count
  upscale_delay_s, downscale_delay_s
  max_ongoing_requests   requests one replica takes at once (default 64)
  shutdown_timeout_s  how long a replica being removed lets its requests finish, and then how long
                      coserve drains (default 30)
  ingress_replicas    proxies in front (default 1)
  router              "prefix" (coserve_ray.router.PrefixAffinityRouter, default) or "pow2"
                      (Ray's power-of-two choices)
  chunk_chars, imbalance_threshold   the prefix router's parameters
"""
import shlex

from ray import serve
from ray.serve.config import AutoscalingConfig, RequestRouterConfig

from coserve_ray.deployment import CoserveIngress, CoserveReplica


def build_app(args=None):
    a = dict(args or {})
    model_args = shlex.split(a.get("coserve_args", "--demo"))
    shutdown_timeout_s = float(a.get("shutdown_timeout_s", 30))
    min_r, max_r = int(a.get("min_replicas", 1)), int(a.get("max_replicas", 1))
    options = dict(
        name="coserve",
        ray_actor_options={"num_cpus": float(a.get("num_cpus", 1)), "num_gpus": float(a.get("num_gpus", 0))},
        max_ongoing_requests=int(a.get("max_ongoing_requests", 64)),
        health_check_period_s=float(a.get("health_check_period_s", 2)),
        health_check_timeout_s=float(a.get("health_check_timeout_s", 30)),
        graceful_shutdown_wait_loop_s=1.0,
        graceful_shutdown_timeout_s=shutdown_timeout_s,
    )
    if min_r == max_r:
        options["num_replicas"] = min_r
    else:
        options["autoscaling_config"] = AutoscalingConfig(
            min_replicas=min_r, max_replicas=max_r,
            initial_replicas=int(a.get("initial_replicas", min_r)),
            target_ongoing_requests=float(a.get("target_ongoing_requests", 4)),
            metrics_interval_s=float(a.get("metrics_interval_s", 1)),
            look_back_period_s=float(a.get("look_back_period_s", 5)),
            upscale_delay_s=float(a.get("upscale_delay_s", 5)),
            downscale_delay_s=float(a.get("downscale_delay_s", 30)),
            policy={"policy_function": "coserve_ray.autoscaling:queue_depth_policy"})
    if a.get("router", "prefix") == "prefix":
        options["request_router_config"] = RequestRouterConfig(
            request_router_class="coserve_ray.router:PrefixAffinityRouter",
            request_router_kwargs={"chunk_chars": int(a.get("chunk_chars", 128)),
                                   "imbalance_threshold": int(a.get("imbalance_threshold", 8))})
    replica = serve.deployment(CoserveReplica, **options)
    ingress = serve.deployment(CoserveIngress, name="ingress",
                               num_replicas=int(a.get("ingress_replicas", 1)),
                               max_ongoing_requests=int(a.get("ingress_max_ongoing_requests", 1000)))
    return ingress.bind(replica.bind(model_args, binary=a.get("coserve_binary"),
                                     shutdown_timeout_s=shutdown_timeout_s))
