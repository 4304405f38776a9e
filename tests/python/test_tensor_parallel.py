"""Tensor parallelism through the real binary and the official openai client: ranks as threads of one
server, `mpirun -np 2` on this machine, and two hosts made of network namespaces joined by a veth
pair (mpirun over TCP between them); each against TP=1 on the same requests (greedy text and
per-token logprobs). Also: a rank killed mid-stream (the job exits non-zero naming it, the client's
stream ends, nothing keeps running) and sizes that do not fit.

fp32 activations and KV cache on every side: the sharded sums then differ from TP=1's only by
float rounding, far below the gap between the top two logits of these prompts."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from conftest import Server, coserve_binary, metric_value, skip_or_fail_in_ci, wait_for

EXACT = ("--dtype", "float32", "--kv-cache-dtype", "fp32", "--cpu-threads", "2")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "1, 2, 3, 5, 8,"]


def mpirun():
    path = shutil.which("mpirun")
    if path is None:
        skip_or_fail_in_ci("mpirun not found (scripts/deps installs openmpi-bin)")
    return path


def completions(url, model):
    """Greedy completions of PROMPTS (text and per-token logprobs) and one chat reply."""
    out = []
    with httpx.Client(base_url=url, timeout=120) as c:
        for p in PROMPTS:
            r = c.post("/v1/completions", json={"model": model, "prompt": p, "max_tokens": 24, "temperature": 0,
                                                "logprobs": 1, "ignore_eos": True})
            assert r.status_code == 200, r.text
            ch = r.json()["choices"][0]
            out.append((ch["text"], ch["logprobs"]["token_logprobs"]))
        r = c.post("/v1/chat/completions", json={"model": model, "max_tokens": 16, "temperature": 0,
                                                 "messages": [{"role": "user", "content": "Hello there"}]})
        assert r.status_code == 200, r.text
        out.append((r.json()["choices"][0]["message"]["content"], []))
    return out


def assert_same(got, want):
    for (text, lps), (want_text, want_lps) in zip(got, want):
        assert text == want_text
        assert len(lps) == len(want_lps)
        for a, b in zip(lps, want_lps):
            assert abs(a - b) < 1e-3, (a, b)


@pytest.fixture(scope="module")
def tp1():
    s = Server(*EXACT)
    try:
        yield completions(s.url, s.model)
    finally:
        s.stop()


def test_threads_tp2_and_tp4_match_tp1(tp1):
    for tp in (2, 4):
        s = Server(*EXACT, "--tensor-parallel-size", str(tp))
        try:
            assert any(f"tensor parallel {tp} ranks over threads" in line for line in s.log), "".join(s.log)
            assert_same(completions(s.url, s.model), tp1)
        finally:
            assert s.stop() == 0


def mpi_launcher(n):
    return [mpirun(), "-np", str(n), "--bind-to", "none"]


def test_mpirun_two_ranks_serve_the_openai_api_like_tp1(tp1):
    s = Server(*EXACT, "--tensor-parallel-size", "2", launcher=mpi_launcher(2), env=MPI_ENV)
    try:
        log = "".join(s.log)
        assert "tensor parallel 2 ranks over MPI" in log, log
        assert re.search(r"coserve rank 0/2: 4 query heads, 1 KV heads, MLP 344, vocabulary rows \[0, 25128\)", log)
        # Rank 1's own line (another process: it may come a little later).
        assert wait_for(lambda: "coserve rank 1/2: 4 query heads, 1 KV heads, MLP 344, vocabulary rows [25128, 50257)"
                        in "".join(s.log), 10), "".join(s.log)
        assert_same(completions(s.url, s.model), tp1)
        # /metrics: per-rank series, rank 1's figures included (they travel with the logits gather).
        text = httpx.get(s.url + "/metrics").text
        assert metric_value(text, "coserve_tensor_parallel_size") == 2
        for rank in ("0", "1"):
            assert metric_value(text, "coserve_tp_rank_steps_total", {"rank": rank}) > 0, text
            assert metric_value(text, "coserve_tp_rank_collective_seconds_total", {"rank": rank}) > 0
        # The official client too.
        r = s.client().completions.create(model=s.model, prompt=PROMPTS[0], max_tokens=24, temperature=0,
                                          extra_body={"ignore_eos": True})
        assert r.choices[0].text == tp1[0][0]
        # A graceful stop signals rank 0: it drains, then its stop message ends rank 1, and the job
        # exits 0. (A signal to mpirun itself ends the job as aborted: non-zero.)
        os.kill(rank_pid(s.proc.pid, 0), signal.SIGTERM)
        code = s.proc.wait(60)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
    assert code == 0, "".join(s.log)
    assert "rank 0 stopped; bye" in "".join(s.log)


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def rank_pid(launcher, rank):
    """The pid of MPI rank `rank` among the descendants of process `launcher` (mpirun)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if b"OMPI_COMM_WORLD_RANK=%d" % rank not in env:
                continue
            p = int(pid)
            while p > 1:
                p = parent_of(p)
                if p == launcher:
                    return int(pid)
        except OSError:
            continue
    return None


@pytest.mark.parametrize("victim_rank", [1, 0])
def test_a_killed_rank_ends_the_job_with_an_error_and_the_stream_ends(victim_rank):
    s = Server(*EXACT, "--tensor-parallel-size", "2", launcher=mpi_launcher(2), env=MPI_ENV)
    try:
        victim = rank_pid(s.proc.pid, victim_rank)
        assert victim is not None
        chunks, ended_cleanly, failed = [], False, None
        t0 = None
        try:
            with httpx.Client(base_url=s.url, timeout=httpx.Timeout(30, read=20)) as c:
                with c.stream("POST", "/v1/completions", json={
                        "model": s.model, "prompt": "Once", "max_tokens": 1900, "temperature": 0,
                        "ignore_eos": True, "stream": True}) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            chunks.append(json.loads(line[6:]))
                            if len(chunks) == 5:
                                os.kill(victim, signal.SIGKILL)
                                t0 = time.monotonic()
                        if line == "data: [DONE]":
                            ended_cleanly = True
        except httpx.HTTPError as e:
            failed = e
        assert t0 is not None
        assert time.monotonic() - t0 < 20
        # Never a normal end: the stream broke off, or ended with an error event.
        finishes = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
        assert failed is not None or "length" not in finishes, finishes
        code = s.proc.wait(20)
        assert code != 0
        log = "".join(s.log)
        assert f"rank {victim_rank}" in log and ("exited on signal 9" in log or "tensor parallel" in log), log
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
    # Neither rank outlives the job.
    assert rank_pid(s.proc.pid, 0) is None and rank_pid(s.proc.pid, 1) is None


def test_sizes_that_do_not_fit_are_startup_errors():
    binary = coserve_binary()
    r = subprocess.run([binary, "serve", "--demo", "--port", "0", "--tensor-parallel-size", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "sizes that work for this model: 1, 2, 4, 8" in r.stderr, r.stderr
    r = subprocess.run([mpirun(), "-np", "2", "--bind-to", "none", binary, "serve", "--demo", "--port", "0",
                        "--tensor-parallel-size", "4"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **MPI_ENV})
    assert r.returncode != 0
    assert "started as 2 MPI ranks, and --tensor-parallel-size is 4" in r.stderr, r.stderr
    if os.path.exists("/dev/nvidia0"):
        return  # a GPU host: these sizes may run there (the device checks in docs/benchmarks/gpu.md)
    r = subprocess.run([binary, "serve", "--demo", "--port", "0", "--device", "cuda", "--tensor-parallel-size", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    # Tensor parallelism over GPUs needs that many devices in this process.
    assert "--tensor-parallel-size 2 needs 2 CUDA devices" in r.stderr, r.stderr
    # Under mpirun, one GPU per rank: a host without one ends the job at startup, no hang.
    r = subprocess.run([mpirun(), "-np", "2", "--bind-to", "none", binary, "serve", "--demo", "--port", "0",
                        "--device", "cuda", "--tensor-parallel-size", "2"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, **MPI_ENV})
    assert r.returncode != 0
    assert "this rank's GPU is cuda:0 (its local rank), and this host has 0 CUDA devices" in r.stderr, r.stderr


# Two hosts: network namespaces A and B, a veth pair between them (10.213.N.1 and .2), each with its
# own hostname (UTS namespace). mpirun runs in A; its rsh launcher agent starts B's daemon with
# `ip netns exec`. MPI messages go over TCP on the veth only (btl tcp,self).
RSH_AGENT = """#!/bin/sh
# mpirun's rsh agent: "AGENT HOST COMMAND..." runs COMMAND in HOST's namespaces.
host=$1; shift
case "$host" in
  {a_ip}) ns={a} ;;
  {b_ip}) ns={b} ;;
  *) echo "unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
"""


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def test_two_hosts_over_a_veth_pair_serve_like_tp1(tp1, tmp_path):
    # Privileges are the machine's, not something CI can install: without them the test is skipped.
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        skip_or_fail_in_ci("network namespaces need ip (iproute2) and unshare")
    mpirun()
    tag = str(os.getpid() % 200 + 20)
    a, b = f"csa{tag}", f"csb{tag}"
    a_ip, b_ip = f"10.213.{tag}.1", f"10.213.{tag}.2"
    agent = tmp_path / "netns-rsh"
    agent.write_text(RSH_AGENT.format(a=a, b=b, a_ip=a_ip, b_ip=b_ip))
    agent.chmod(0o755)
    try:
        try:
            sh("ip", "netns", "add", a)
            sh("ip", "netns", "add", b)
            sh("ip", "link", "add", f"v{a}", "type", "veth", "peer", "name", f"v{b}")
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot create network namespaces here (no CAP_NET_ADMIN?): {e.stderr}")
        for ns, ip in ((a, a_ip), (b, b_ip)):
            sh("ip", "link", "set", f"v{ns}", "netns", ns)
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", f"v{ns}")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"v{ns}", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        binary = os.path.abspath(coserve_binary())
        mpi = " ".join([
            mpirun(), "-np", "2", "--host", f"{a_ip},{b_ip}", "--bind-to", "none",
            "--mca", "plm_rsh_agent", str(agent), "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", f"10.213.{tag}.0/24", "--mca", "oob_tcp_if_include", f"10.213.{tag}.0/24",
            "-x", "HOME", "-x", "PATH",
            binary, "serve", "--demo", "--host", "127.0.0.1", "--port", "0", "--tensor-parallel-size", "2", *EXACT])
        proc = subprocess.Popen(["ip", "netns", "exec", a, "unshare", "--uts", "sh", "-c", f"hostname {a}; exec {mpi}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **MPI_ENV}, cwd=os.getcwd())
        log, port = [], None
        deadline = time.monotonic() + 300
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
        assert port is not None, "".join(log)
        # The client runs in A (where rank 0 listens): the openai client, then the same checks as above.
        client = textwrap.dedent(f"""
            import json, sys, time, httpx
            sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
            from test_tensor_parallel import completions
            url = "http://127.0.0.1:{port}"
            for _ in range(3000):
                try:
                    if httpx.get(url + "/health", timeout=5).status_code == 200: break
                except httpx.HTTPError: pass
                time.sleep(0.1)
            model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
            print(json.dumps(completions(url, model)))
        """)
        r = subprocess.run(["ip", "netns", "exec", a, sys.executable, "-c", client], capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr + "".join(log)
        got = [tuple(x) for x in json.loads(r.stdout.strip().splitlines()[-1])]
        assert_same(got, tp1)
        # Rank 1 ran in B: its log line names the shard; mpirun stops both on SIGINT.
        rank_pids = subprocess.run(["ip", "netns", "pids", b], capture_output=True, text=True).stdout.split()
        assert rank_pids, "nothing runs in namespace B"
        proc.send_signal(signal.SIGINT)
        try:
            rest = proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            rest = proc.communicate()[1]
        log.append(rest)
        assert "coserve rank 1/2: 4 query heads" in "".join(log), "".join(log)
    finally:
        for ns in (a, b):
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_bench_tp_smoke():
    # `coserve bench tp` (the communication of a TP step) runs on threads and under mpirun and prints
    # one JSON line per token count; the timed runs are in docs/benchmarks/distributed.md.
    binary = coserve_binary()
    args = ["bench", "tp", "--steps", "3", "--warmup", "1", "--hidden", "64", "--layers", "2", "--vocab", "1000",
            "--tokens", "1,4"]
    runs = {"local": [binary, *args, "--ranks", "3"],
            "mpi": [mpirun(), "-np", "2", "--bind-to", "none", binary, *args]}
    for backend, cmd in runs.items():
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **MPI_ENV})
        assert r.returncode == 0, r.stderr
        lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        assert [d["tokens"] for d in lines] == [1, 4], r.stdout
        for d in lines:
            assert d["backend"] == backend
            assert d["ranks"] == (3 if backend == "local" else 2)
            assert d["us_per_step"] > 0 and d["us_all_reduce"] > 0 and d["us_gather_logits"] > 0
