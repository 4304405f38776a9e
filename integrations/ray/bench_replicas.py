"""Two coserve replicas against one on Ray Serve, and what the Ray path adds to a request.

    scripts/ray-check --bench   (or: python integrations/ray/bench_replicas.py [flags])

A local Ray cluster (a head and two worker nodes, one logical CPU each for the replicas), the demo
model, replicas of one CPU thread each. For 1 and then 2 replicas: a warm-up, then `--requests`
completions of distinct prompts at `--concurrency`, `--max-tokens` each (ignore_eos); output
tokens/s and requests/s over the wall time (and, for one replica, the same load sent to its coserve
port directly, without Ray). Then, with one replica, `--latency-requests` one-token
requests one at a time, alternating between coserve's own port and Ray's HTTP proxy: each path's
p50/p99 and the difference of the two medians (the ingress hop, the handle call, the router and the
replica's proxying). Prints one JSON object.
"""
import argparse
import concurrent.futures as cf
import json
import os
import platform
import re
import socket
import subprocess
import time

import httpx
import ray
from ray import serve
from ray.cluster_utils import Cluster

from coserve_ray import build_app


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def coserve_urls():
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [f"http://127.0.0.1:{m.group(1)}" for m in
            re.finditer(r"127\.0\.0\.1:(\d+)\s.*\"coserve\",pid=\d+", out)]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_load(url, model, n, concurrency, max_tokens, tag):
    def one(i):
        r = httpx.post(url + "/v1/completions", timeout=600, json={
            "model": model, "prompt": f"{tag} request {i}: " + f"word{i} " * 48,
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0})
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, range(n)))
    wall = time.perf_counter() - t0
    return {"requests": n, "output_tokens": tokens, "wall_s": round(wall, 3),
            "output_tokens_per_s": round(tokens / wall, 1), "requests_per_s": round(n / wall, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.environ.get("COSERVE_BIN", "build/bin/coserve"))
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--latency-requests", type=int, default=200)
    ap.add_argument("--coserve-args", default="--demo", help="the model and flags of each replica")
    a = ap.parse_args()

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    proxy = f"http://127.0.0.1:{port}"
    out = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "replica": a.coserve_args + " --cpu-threads 1 (num_cpus 1)", "max_tokens": a.max_tokens,
           "concurrency": a.concurrency, "throughput": {}}
    try:
        for n in (1, 2):
            serve.run(build_app({"coserve_args": a.coserve_args, "coserve_binary": os.path.abspath(a.binary),
                                 "num_cpus": 1, "min_replicas": n, "max_replicas": n, "router": "prefix"}),
                      name="coserve", route_prefix="/")
            model = httpx.get(proxy + "/v1/models", timeout=60).json()["data"][0]["id"]
            run_load(proxy, model, 2 * a.concurrency, a.concurrency, 8, f"warmup{n}")
            out["throughput"][f"{n}_replica{'s' if n > 1 else ''}"] = run_load(
                proxy, model, a.requests, a.concurrency, a.max_tokens, f"run{n}")
            if n == 1:  # the same load on the replica's coserve port, without Ray in the path
                out["throughput"]["1_replica_direct"] = run_load(
                    coserve_urls()[0], model, a.requests, a.concurrency, a.max_tokens, "direct")
        one, two = out["throughput"]["1_replica"], out["throughput"]["2_replicas"]
        out["throughput"]["ratio_2_over_1"] = round(two["output_tokens_per_s"] / one["output_tokens_per_s"], 2)

        serve.run(build_app({"coserve_args": a.coserve_args, "coserve_binary": os.path.abspath(a.binary),
                             "num_cpus": 1, "min_replicas": 1, "max_replicas": 1}),
                  name="coserve", route_prefix="/")
        direct = coserve_urls()[0]
        body = {"model": model, "prompt": "latency probe", "max_tokens": 1, "temperature": 0}
        lat = {"direct": [], "ray": []}
        with httpx.Client(timeout=60) as c:
            for i in range(20):  # warm-up of both paths
                c.post(direct + "/v1/completions", json=body)
                c.post(proxy + "/v1/completions", json=body)
            for i in range(a.latency_requests):
                for name, url in (("direct", direct), ("ray", proxy)):
                    t0 = time.perf_counter()
                    c.post(url + "/v1/completions", json=body).raise_for_status()
                    lat[name].append((time.perf_counter() - t0) * 1000)
        out["latency_ms"] = {name: {"p50": round(pct(v, 50), 2), "p99": round(pct(v, 99), 2)}
                             for name, v in lat.items()}
        out["latency_ms"]["added_p50"] = round(pct(lat["ray"], 50) - pct(lat["direct"], 50), 2)
        out["latency_ms"]["added_p99"] = round(pct(lat["ray"], 99) - pct(lat["direct"], 99), 2)
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
