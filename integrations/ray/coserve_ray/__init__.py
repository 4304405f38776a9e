"""coserve replicas on Ray Serve (docs/scaling.md)."""
from coserve_ray.app import build_app
from coserve_ray.deployment import CoserveIngress, CoserveReplica, ProxiedRequest
from coserve_ray.router import PrefixAffinityRouter

__all__ = ["build_app", "CoserveIngress", "CoserveReplica", "PrefixAffinityRouter", "ProxiedRequest"]
