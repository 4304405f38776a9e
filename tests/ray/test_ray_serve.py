"""coserve replicas on a local multi-node Ray cluster (ray.cluster_utils.Cluster: a head and two
worker nodes in this machine), the demo model, the official openai client through Ray Serve's HTTP
proxy. Run by scripts/ray-check (it installs Ray and integrations/ray into their own venv).

- requests spread over the replicas; requests sharing a prefix land on one replica (its prefix-cache
  hits rise, the other's do not);
- one replica's coserve killed with SIGKILL mid-load: the streams it held end with an error event,
  none hangs, the other replica's streams finish untouched, Ray restarts the replica, later
  requests succeed;
- autoscaling on coserve's queue depth scales up under load and back down after, and no stream is
  cut by the scale-down;
- other routes pass through as coserve answers them, SSE is not buffered, and
  integrations/ray/serve-config.yaml deploys.
"""
import concurrent.futures as cf
import os
import re
import signal
import socket
import subprocess
import time

import httpx
import openai
import pytest
import ray
from ray import serve
from ray.cluster_utils import Cluster

from coserve_ray import build_app

BIN = os.path.abspath(os.environ.get("COSERVE_BIN", "build/bin/coserve"))
SHARED_PREFIX = ("You are a careful assistant for a shipping company. Answer in two sentences, cite "
                 "the policy section, never invent tracking numbers. " * 6)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def coserve_servers():
    """{pid: url} of the coserve processes listening on loopback (read from `ss`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.search(r"127\.0\.0\.1:(\d+)\s.*\"coserve\",pid=(\d+)", line)
        if m:
            found[int(m.group(2))] = f"http://127.0.0.1:{m.group(1)}"
    return found


def counter(url, name):
    """The sum of a family's samples on a coserve's /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M))


def requests_served(url):
    return counter(url, "coserve_request_success_total")


def wait_until(pred, timeout, step=0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def replicas_running(app="coserve", deployment="coserve"):
    st = serve.status().applications.get(app)
    if st is None or deployment not in st.deployments:
        return 0
    return st.deployments[deployment].replica_states.get("RUNNING", 0)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        c.add_node(num_cpus=2)
    ray.init(address=c.address)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
    c.shutdown()


def deploy(url, **args):
    args = {"coserve_args": "--demo --max-model-len 1024", "coserve_binary": BIN, "num_cpus": 1,
            "shutdown_timeout_s": 20, **args}
    serve.run(build_app(args), name="coserve", route_prefix="/")
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    return client, client.models.list().data[0].id


def test_spread_and_prefix_affinity(cluster):
    client, model = deploy(cluster, min_replicas=2, max_replicas=2)
    servers = coserve_servers()
    assert len(servers) == 2, servers
    before = {pid: requests_served(u) for pid, u in servers.items()}
    for i in range(12):  # distinct prompts: no prefix to follow, the least loaded takes each
        client.completions.create(model=model, prompt=f"{i} distinct opening number {i} " * 40,
                                  max_tokens=2)
    served = {pid: requests_served(u) - before[pid] for pid, u in servers.items()}
    assert all(n > 0 for n in served.values()), served

    hits = {pid: counter(u, "coserve_prefix_cache_hits_total") for pid, u in servers.items()}
    served = {pid: requests_served(u) for pid, u in servers.items()}
    for i in range(8):  # one long shared prefix, different questions
        client.chat.completions.create(model=model, max_tokens=2, messages=[
            {"role": "system", "content": SHARED_PREFIX},
            {"role": "user", "content": f"Where is parcel {i}?"}])
    took = {pid: requests_served(u) - served[pid] for pid, u in servers.items()}
    gained = {pid: counter(u, "coserve_prefix_cache_hits_total") - hits[pid] for pid, u in servers.items()}
    owner = max(took, key=took.get)
    assert took[owner] == 8, took
    assert gained[owner] > 0, gained
    assert all(gained[pid] == 0 for pid in gained if pid != owner), gained


def test_sigkill_of_one_coserve_mid_load(cluster):
    client, model = deploy(cluster, min_replicas=2, max_replicas=2)
    servers = coserve_servers()
    assert len(servers) == 2
    victim = sorted(servers)[0]

    def stream(i):
        n, finish, error = 0, None, None
        try:
            s = client.completions.create(model=model, prompt=f"stream {i} " * 20 + str(i) * 40,
                                          max_tokens=400, stream=True, stream_options={"include_usage": True},
                                          extra_body={"ignore_eos": True})
            for chunk in s:
                if chunk.choices:
                    finish = chunk.choices[0].finish_reason or finish
                if chunk.usage:
                    n = chunk.usage.completion_tokens
        except Exception as e:  # an error event in the stream, or a dropped connection
            error = f"{type(e).__name__}: {e}"
        return n, finish, error

    with cf.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(stream, i) for i in range(8)]
        time.sleep(3)  # the streams are running
        os.kill(victim, signal.SIGKILL)
        results = [f.result(timeout=180) for f in futures]  # none hangs
    errors = [e for _, _, e in results if e]
    finished = [(n, f) for n, f, e in results if not e]
    assert errors, "the killed replica's streams must end with an error"
    assert finished, "the other replica's streams must finish"
    # Undisturbed: every stream that did not fail ran to its full length.
    assert all(f == "length" and n == 400 for n, f in finished), finished
    # And every failure is the replica's, said so in the error event.
    assert all("exited" in e or "failed" in e for e in errors), errors
    # Ray restarts the replica: a new coserve appears and the deployment is whole again.
    assert wait_until(lambda: len(set(coserve_servers()) - {victim}) == 2, timeout=180), coserve_servers()
    assert wait_until(lambda: replicas_running() == 2, timeout=120)
    for i in range(4):
        r = client.completions.create(model=model, prompt=f"after the restart {i}", max_tokens=4)
        assert r.choices[0].text is not None


def test_autoscaling_on_queue_depth_up_and_down_without_cutting_streams(cluster):
    client, model = deploy(cluster, min_replicas=1, max_replicas=3, target_ongoing_requests=2,
                           upscale_delay_s=1, downscale_delay_s=4, look_back_period_s=2,
                           metrics_interval_s=0.5)
    assert wait_until(lambda: replicas_running() == 1, timeout=120)
    peak = 1
    stop = time.monotonic() + 60

    def stream(i):
        n, finish = 0, None
        s = client.completions.create(model=model, prompt=f"load {i} " * 30, max_tokens=300,
                                      stream=True, extra_body={"ignore_eos": True})
        for chunk in s:
            if chunk.choices:
                n += 1
                finish = chunk.choices[0].finish_reason or finish
        return n, finish

    results = []
    with cf.ThreadPoolExecutor(10) as pool:
        futures = [pool.submit(stream, i) for i in range(10)]
        while time.monotonic() < stop and not all(f.done() for f in futures):
            peak = max(peak, replicas_running())
            time.sleep(0.5)
        # A second wave while scaled up, so that scale-down happens with streams in flight.
        futures += [pool.submit(stream, 100 + i) for i in range(6)]
        results = [f.result(timeout=300) for f in futures]
    assert peak > 1, "no scale-up under load"
    assert all(finish == "length" for _, finish in results), results  # none cut short
    assert wait_until(lambda: replicas_running() == 1, timeout=120), "no scale-down after the load"
    r = client.completions.create(model=model, prompt="after scaling down", max_tokens=4)
    assert r.choices


def test_every_route_proxied_and_streams_not_buffered(cluster):
    client, model = deploy(cluster, min_replicas=1, max_replicas=1)
    # Routes besides completions: answered by coserve as they are without Ray.
    assert httpx.get(cluster + "/health", timeout=30).status_code == 200
    tok = httpx.post(cluster + "/tokenize", json={"prompt": "hello there"}, timeout=30)
    assert tok.status_code == 200 and tok.json()["tokens"]
    assert "vllm:num_requests_running" in httpx.get(cluster + "/metrics", timeout=30).text
    bad = httpx.post(cluster + "/v1/completions", json={"model": model, "prompt": "x", "max_tokens": -1}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"
    assert httpx.get(cluster + "/v1/not-a-route", timeout=30).status_code == 404
    chat = client.chat.completions.create(model=model, max_tokens=4,
                                          messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message is not None
    # SSE arrives as it is generated: the first token long before the last.
    t0 = time.monotonic()
    times = []
    for chunk in client.completions.create(model=model, prompt="stream timing", max_tokens=400, stream=True,
                                           extra_body={"ignore_eos": True}):
        if chunk.choices and chunk.choices[0].text:
            times.append(time.monotonic() - t0)
    assert len(times) > 100
    assert times[0] < 0.5 * times[-1], (times[0], times[-1])


def test_the_serve_run_config_file_deploys(cluster):
    from ray.serve.schema import ServeDeploySchema
    path = os.path.join(os.path.dirname(__file__), "..", "..", "integrations", "ray", "serve-config.yaml")
    with open(path) as f:
        config = ServeDeploySchema.model_validate(__import__("yaml").safe_load(f))
    (app,) = config.applications
    assert app.import_path == "coserve_ray.app:build_app"
    args = {**app.args, "coserve_binary": BIN, "num_cpus": 1}  # this cluster's nodes have 2 CPUs
    serve.run(build_app(args), name=app.name, route_prefix=app.route_prefix)
    r = httpx.post(cluster + "/v1/completions", json={"prompt": "config file", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text
