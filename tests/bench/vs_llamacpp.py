#!/usr/bin/env python3
# One file on purpose (~750 lines): fetching and building llama.cpp, converting and quantizing the
# models, the kinds of runs and the report share one context object and one row format; split,
# each part would import all of the others.
"""coserve's CPU executor next to llama.cpp: same weights, same precision, same thread count.

Builds llama.cpp's llama-bench, llama-batched-bench and llama-server (CPU only) from the llama.cpp
tree vendored in the llama-cpp-python sdist, writes the model folders with `coserve
make-demo-model`, converts them to GGUF with llama.cpp's convert_hf_to_gguf.py, runs both sides and
prints one JSON object per row plus a markdown table of ratios (above 1 = coserve faster).

Everything downloaded or built lives in ${COSERVE_CACHE:-~/.cache/coserve}/llamacpp/ (or --cache):
  llama_cpp_python-V.tar.gz, llama_cpp_python-V/   the sdist and its unpacked tree
  build-V/bin/                                     llama-bench, llama-batched-bench, llama-server,
                                                   llama-quantize
  build-V-avx2/bin/                                the same tools without AVX-512 (--isa avx2)
  venv-V/                                          the converter's Python packages
  models/NAME-DTYPE/, models/NAME-DTYPE.gguf       the model folders and their GGUF files
  models/NAME-QUANT.gguf                           --quant files (llama-quantize of NAME-f32.gguf)
A second run reuses them: the build when its stamp (configure flags) matches, a GGUF when the
model folder's files hash to what they hashed to when it was converted.

Rows, for each (model, dtype), both sides at --threads T:
  prefill P (128, 512)   coserve `generate --bench --batch 1 --prompt-len P --max-tokens 1`
                         prefill_tokens_per_s vs `llama-bench -p P -n 0` tokens/s
  decode B (1, 8, 32)    coserve `generate --bench --batch B --prompt-len 128 --max-tokens 64`
                         decode_tokens_per_s vs `llama-batched-bench -npp 128 -ntg 64 -npl 1,8,32`
                         S_TG t/s
  serve C (1, 8, 32)     C streaming clients (tests/bench/bench_serve.py), prompts of 128 random
                         token ids, max_tokens 64, ignore_eos, temperature 0, against `coserve serve`
                         and `llama-server -np C --cont-batching`: streamed tokens/s, TTFT, ITL
  greedy (f32 file)      16 greedy token ids from the same prompt ids: coserve `generate --json`
                         vs llama-server /completion (return_tokens), match or first differing index
With --quant, the same rows for each GGUF type, both sides running the same file (coserve
`generate`/`serve FILE.gguf`), then for f16 the greedy row and for the quantized types:
  logprobs               16 greedy steps from the same prompt ids, KV cache f16 on both sides: at each
                         step (while both greedy paths agree) the largest |coserve - llama.cpp|
                         log-probability over llama.cpp's top 10 (llama-server n_probs); and vLLM's
                         check_logprobs_close: where the ids first differ, each side's token is in
                         the other's top 10
Each number is the median of --reps runs after one discarded warm-up run (llama-bench: its own
warm-up, --reps repetitions). Ratios: throughput coserve / llama.cpp, latency llama.cpp / coserve.

coserve runs every part of a step on one pool of T threads (--threads / --cpu-threads T), like
llama.cpp's -t T.
"""
import argparse
import hashlib
import json
import math
import os
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# CPU-only build of the three tools. LLAMA_CURL is gone from newer trees (a deprecation warning
# there) and kept for older ones; the server's web UI is neither built nor downloaded.
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=OFF", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DBUILD_SHARED_LIBS=OFF",
]
# --isa avx2: both engines on AVX2 + FMA + F16C alone, whatever the CPU has beyond (llama.cpp built
# without GGML_NATIVE and without its AVX-512 paths; coserve run with --cpu-isa AVX2).
AVX2_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
              "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF",
              "-DGGML_AVX512_BF16=OFF", "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
              "-DGGML_AMX_BF16=OFF"]
# Extra arguments of every coserve generate / serve command (--isa avx2: --cpu-isa AVX2).
COSERVE_ISA_ARGS = []
TARGETS = ["llama-bench", "llama-batched-bench", "llama-server", "llama-quantize"]
# --quant types: GGUF files made from the f32 GGUF by llama-quantize; both sides run the same file.
QUANTS = {"f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k_m": "Q4_K_M", "q5_k_m": "Q5_K_M", "q6_k": "Q6_K",
          "q4_1": "Q4_1", "q5_0": "Q5_0", "q5_1": "Q5_1", "q3_k_m": "Q3_K_M", "q2_k": "Q2_K", "iq4_nl": "IQ4_NL",
          "iq4_xs": "IQ4_XS"}
LOGPROB_TOP = 10

MODELS = {
    "demo": [],
    "150m": ["--hidden-size", "768", "--intermediate-size", "2048", "--num-layers", "12",
             "--num-heads", "12", "--num-kv-heads", "4"],
    # Rows of 640 values, no whole number of 256-value K blocks (as SmolLM2's 576 and Qwen2.5-0.5B's
    # 896): llama-quantize's K types fall back to Q5_0 / Q5_1 / Q8_0 / Q4_0 for them, as in the
    # published files of such models. llama.cpp 0.3.36 built natively on an AMX machine crashes in
    # its AMX matmul on this model's Q8_0 and Q4_0 files (and at hidden 576): compare with --isa avx2
    # there (that build has no AMX).
    "smol": ["--hidden-size", "640", "--intermediate-size", "1536", "--num-layers", "8",
             "--num-heads", "10", "--num-kv-heads", "2"],
    # Mixtures of experts: Mixtral's layout (8 experts of width 1024, top 2) and Qwen3-MoE's (32
    # experts of width 256, top 4, renormalized as llama.cpp always does for qwen3moe).
    "mixtral": ["--architecture", "mixtral", "--hidden-size", "512", "--intermediate-size", "1024",
                "--num-layers", "8", "--num-heads", "8", "--num-kv-heads", "2", "--num-experts", "8",
                "--num-experts-per-tok", "2"],
    "qwen3moe": ["--architecture", "qwen3_moe", "--hidden-size", "512", "--intermediate-size", "1024",
                 "--moe-intermediate-size", "256", "--num-layers", "8", "--num-heads", "8", "--num-kv-heads", "2",
                 "--head-dim", "64", "--num-experts", "32", "--num-experts-per-tok", "4", "--norm-topk-prob"],
}
VOCAB = 50257  # the GPT-2 tokenizer's, which make-demo-model copies

SERVE_PROMPT = 128
SERVE_MAX_TOKENS = 64
DECODE_PROMPT = 128
DECODE_STEPS = 64
GREEDY_PROMPT = 32
GREEDY_TOKENS = 16


def log(msg):
    print(f"[vs-llamacpp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None, cwd=None, capture=True, check=True):
    """Runs cmd, logging it; returns (stdout, stderr) when capture."""
    log("$ " + shlex.join(str(c) for c in cmd))
    p = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, text=True,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None)
    if check and p.returncode != 0:
        if capture:
            sys.stderr.write((p.stdout or "")[-4000:] + (p.stderr or "")[-4000:])
        sys.exit(f"command failed ({p.returncode}): {shlex.join(str(c) for c in cmd)}")
    return p.stdout, p.stderr


# ---------------------------------------------------------------- machine

def physical_cores():
    out = subprocess.run(["lscpu", "-p=CORE,SOCKET"], text=True, capture_output=True).stdout
    cores = {line for line in out.splitlines() if line and not line.startswith("#")}
    return len(cores) or os.cpu_count() or 1


def machine_info():
    info = {"cpu": None, "flags": {}, "physical_cores": physical_cores(), "logical_cpus": os.cpu_count()}
    out = subprocess.run(["lscpu"], text=True, capture_output=True).stdout
    flags = set()
    for line in out.splitlines():
        k, _, v = line.partition(":")
        if k.strip() == "Model name":
            info["cpu"] = v.strip()
        elif k.strip() == "Flags":
            flags = set(v.split())
    info["flags"] = {f: f in flags for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")}
    info["load_avg_start"] = os.getloadavg()[0]
    return info


# ---------------------------------------------------------------- llama.cpp

def cache_dir(arg):
    if arg:
        return Path(arg).resolve()
    base = os.environ.get("COSERVE_CACHE") or str(Path.home() / ".cache" / "coserve")
    return Path(base) / "llamacpp"


def fetch_sdist(cache, version):
    """Downloads and unpacks the llama-cpp-python sdist; returns its vendored llama.cpp tree."""
    name = f"llama_cpp_python-{version}"
    src = cache / name
    llama = src / "vendor" / "llama.cpp"
    if (llama / "CMakeLists.txt").exists():
        return llama
    tarball = cache / f"{name}.tar.gz"
    if not tarball.exists():
        log(f"downloading the llama-cpp-python {version} sdist")
        run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
             "--no-binary", ":all:", f"llama-cpp-python=={version}", "-d", cache], capture=False)
    log(f"unpacking {tarball}")
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".unpack-"))
    with tarfile.open(tarball) as tf:
        tf.extractall(tmp, filter="data")
    if src.exists():
        shutil.rmtree(src)
    (tmp / name).rename(src)
    shutil.rmtree(tmp)
    if not (llama / "CMakeLists.txt").exists():
        sys.exit(f"{tarball} has no vendor/llama.cpp")
    return llama


def build_llamacpp(cache, version, llama, jobs, isa="native"):
    """Configures and builds the three tools unless the build's stamp matches; returns
    (bin dir, build seconds or None when cached)."""
    flags = CMAKE_FLAGS if isa == "native" else [f for f in CMAKE_FLAGS if f != "-DGGML_NATIVE=ON"] + AVX2_FLAGS
    build = cache / (f"build-{version}" if isa == "native" else f"build-{version}-{isa}")
    bindir = build / "bin"
    stamp = build / "coserve-bench.stamp"
    want = json.dumps({"flags": flags, "targets": TARGETS})
    if stamp.exists() and stamp.read_text() == want and all((bindir / t).exists() for t in TARGETS):
        log(f"llama.cpp tools cached in {bindir}")
        return bindir, None
    log(f"building {', '.join(TARGETS)} in {build} (-j{jobs}; minutes on a few cores)")
    t0 = time.monotonic()
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    run(["cmake", "-S", llama, "-B", build, *gen, *flags], capture=False)
    run(["cmake", "--build", build, "-j", str(jobs), "--target", *TARGETS], capture=False)
    secs = time.monotonic() - t0
    stamp.write_text(want)
    log(f"llama.cpp built in {secs:.0f} s")
    return bindir, secs


def reachable(url, timeout=5):
    host = url.split("/")[2]
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def converter_venv(cache, version, llama):
    """The venv with convert_hf_to_gguf.py's requirements (llama.cpp's requirements file). torch
    comes from the PyTorch CPU index; where that index cannot be reached, from PyPI (the default
    Linux wheel: larger, with CUDA libraries, and it runs on the CPU all the same)."""
    venv = cache / f"venv-{version}"
    py = venv / "bin" / "python"
    reqdir = llama / "requirements"
    req = reqdir / "requirements-convert_hf_to_gguf.txt"
    stamp = venv / "coserve-bench.stamp"
    want = hashlib.sha256(req.read_bytes()).hexdigest()
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    if not py.exists():
        log(f"creating {venv}")
        run([sys.executable, "-m", "venv", venv], capture=False)
    lines = req.read_text().splitlines()
    if not reachable(TORCH_CPU_INDEX):
        log(f"{TORCH_CPU_INDEX} unreachable: torch comes from PyPI")
        lines = [ln for ln in lines if not ln.strip().startswith("--extra-index-url")]
    # -r paths in the file are relative to its folder; the copy lies elsewhere.
    lines = [f"-r {reqdir / ln.split(None, 1)[1]}" if ln.startswith("-r ") else ln for ln in lines]
    copy = venv / "requirements-convert.txt"
    copy.write_text("\n".join(lines) + "\n")
    log("installing the converter's Python packages (torch is large)")
    run([py, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", copy], capture=False)
    stamp.write_text(want)
    return py


# ---------------------------------------------------------------- models

def file_hash(paths):
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


def make_model(coserve, cache, name, dtype, conv_py, llama):
    """Writes the model folder (deterministic: same flags, same files) and its GGUF file; the
    conversion is skipped when the folder's files hash as they did at the last conversion."""
    models = cache / "models"
    models.mkdir(parents=True, exist_ok=True)
    folder = models / f"{name}-{dtype}"
    gguf = models / f"{name}-{dtype}.gguf"
    run([coserve, "make-demo-model", folder, *MODELS[name], "--dtype", dtype])
    files = sorted(p for p in folder.iterdir() if p.is_file())
    digest = file_hash(files)
    stamp = Path(str(gguf) + ".src-sha256")
    if gguf.exists() and stamp.exists() and stamp.read_text() == digest:
        log(f"{gguf.name} up to date")
        return folder, gguf
    log(f"converting {folder.name} to GGUF ({dtype})")
    # The converter identifies a BPE pre-tokenizer by hashing the token ids of a fixed text;
    # make-demo-model copies GPT-2's tokenizer files, whose hash it lists as "gpt-2".
    tmp = Path(str(gguf) + ".tmp")
    run([conv_py, llama / "convert_hf_to_gguf.py", folder, "--outfile", tmp, "--outtype", dtype])
    tmp.rename(gguf)
    stamp.write_text(digest)
    return folder, gguf


def make_quant(cache, bindir, name, f32_gguf, quant):
    """The f32 GGUF quantized by llama-quantize (redone when the f32 file was reconverted)."""
    out = cache / "models" / f"{name}-{quant}.gguf"
    stamp = Path(str(out) + ".src-sha256")
    src = Path(str(f32_gguf) + ".src-sha256").read_text()
    if out.exists() and stamp.exists() and stamp.read_text() == src:
        log(f"{out.name} up to date")
        return out
    tmp = Path(str(out) + ".tmp")
    run([bindir / "llama-quantize", f32_gguf, tmp, QUANTS[quant], os.cpu_count() or 1])
    tmp.rename(out)
    stamp.write_text(src)
    return out


# ---------------------------------------------------------------- runs

def coserve_env(threads):
    del threads  # coserve takes the thread count as a flag
    return dict(os.environ)


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in: {text[-2000:]}")


def coserve_bench(coserve, folder, threads, batch, prompt, steps):
    cmd = [coserve, "generate", folder, *COSERVE_ISA_ARGS, "--bench", "--batch", batch, "--prompt-len", prompt,
           "--max-tokens", steps, "--threads", threads]
    out, err = run(cmd, env=coserve_env(threads))
    return last_json(out + "\n" + err), cmd


def median(xs):
    return statistics.median(xs) if xs else None


def prefill_rows(ctx, lengths):
    rows = []
    for p in lengths:
        cs, cmd = [], None
        for _ in range(ctx.reps):
            r, cmd = coserve_bench(ctx.coserve, ctx.folder, ctx.threads, 1, p, 1)
            cs.append(r["prefill_tokens_per_s"])
        lcmd = [ctx.bin / "llama-bench", "-m", ctx.gguf, "-p", p, "-n", 0, "-t", ctx.threads,
                "-r", ctx.reps, "-o", "json"]
        out, _ = run(lcmd)
        res = [x for x in json.loads(out) if x.get("n_prompt") == p and x.get("n_gen") == 0][0]
        ls = res.get("samples_ts") or [res["avg_ts"]]
        ctx.llama_build = {k: res.get(k) for k in ("build_commit", "build_number", "cpu_info")}
        rows.append(ctx.row("prefill", f"prefill {p} tokens, batch 1", "tokens_per_s", median(cs),
                            median(ls), cs, ls, cmd, lcmd, prompt_len=p,
                            llamacpp_flash_attn=res.get("flash_attn"),
                            llamacpp_kv_types=[res.get("type_k"), res.get("type_v")]))
    return rows


def decode_rows(ctx, batches):
    coserve_runs = {b: [] for b in batches}
    cmds = {}
    for b in batches:
        for _ in range(ctx.reps):
            r, cmds[b] = coserve_bench(ctx.coserve, ctx.folder, ctx.threads, b, DECODE_PROMPT, DECODE_STEPS)
            coserve_runs[b].append(r["decode_tokens_per_s"])
    lcmd = [ctx.bin / "llama-batched-bench", "-m", ctx.gguf, "-c", 16384, "-b", 2048, "-ub", 512,
            "-npp", DECODE_PROMPT, "-ntg", DECODE_STEPS, "-npl", ",".join(map(str, batches)),
            "-t", ctx.threads, "--output-format", "jsonl"]
    llama_runs = {b: [] for b in batches}
    info = {}
    for _ in range(ctx.reps):
        out, err = run(lcmd)
        for line in (out + "\n" + err).splitlines():
            line = line.strip()
            if line.startswith("{") and "speed_tg" in line:
                r = json.loads(line)
                if r["pl"] in llama_runs:
                    llama_runs[r["pl"]].append(r["speed_tg"])
                    info = r
    rows = []
    for b in batches:
        rows.append(ctx.row("decode", f"decode batch {b} (prompt {DECODE_PROMPT}, {DECODE_STEPS} steps)",
                            "tokens_per_s", median(coserve_runs[b]), median(llama_runs[b]),
                            coserve_runs[b], llama_runs[b], cmds[b], lcmd, batch=b,
                            llamacpp_flash_attn=info.get("flash_attn")))
    return rows


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_health(url, proc, what):
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited ({proc.returncode}) before becoming ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=10) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"{what} did not become ready")


class Server:
    """A server process on a free loopback port, ready once /health answers 200; its output
    goes to a log file in the cache."""

    def __init__(self, cmd, what, logfile, env=None):
        self.port = free_port()
        self.cmd = [str(c) for c in cmd] + ["--port", str(self.port)]
        self.url = f"http://127.0.0.1:{self.port}"
        self.what = what
        self.logfile = logfile
        self.env = env

    def __enter__(self):
        log("$ " + shlex.join(self.cmd) + f"  (log: {self.logfile})")
        self.log = open(self.logfile, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        wait_health(self.url, self.proc, self.what)
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def serve_one(url, clients, rounds, seed):
    import bench_serve
    log(f"  {clients} streaming clients x {rounds} requests against {url}")
    return bench_serve.bench(url, clients, rounds, SERVE_MAX_TOKENS, prompt_tokens=SERVE_PROMPT,
                             vocab_size=VOCAB, seed=seed, warmup=1)


def serve_rows(ctx, client_counts, rounds):
    logs = ctx.cache / "logs"
    logs.mkdir(exist_ok=True)
    tag = f"{ctx.model}-{ctx.dtype}"
    cres = {}
    ccmd = [ctx.coserve, "serve", ctx.folder, *COSERVE_ISA_ARGS, "--host", "127.0.0.1", "--cpu-threads", ctx.threads]
    with Server(ccmd, "coserve serve", logs / f"coserve-serve-{tag}.log", coserve_env(ctx.threads)) as s:
        for c in client_counts:
            cres[c] = serve_one(s.url, c, rounds, seed=c)
        ccmd = s.cmd
    lres, lcmds = {}, {}
    for c in client_counts:
        ctx_len = -(-c * (SERVE_PROMPT + SERVE_MAX_TOKENS) // 256) * 256
        lcmd = [ctx.bin / "llama-server", "-m", ctx.gguf, "-t", ctx.threads, "-np", c, "-c", ctx_len,
                "--cont-batching", "--host", "127.0.0.1"]
        with Server(lcmd, "llama-server", logs / f"llama-server-{tag}-np{c}.log") as s:
            lres[c] = serve_one(s.url, c, rounds, seed=c)
            lcmds[c] = s.cmd
    rows = []
    for c in client_counts:
        cr, lr = cres[c], lres[c]
        plural = "s" if c > 1 else ""
        extra = dict(clients=c, requests=cr["requests"], prompt_tokens=SERVE_PROMPT,
                     max_tokens=SERVE_MAX_TOKENS, coserve_detail=cr, llamacpp_detail=lr)
        if cr["completed"] != cr["requests"] or lr["completed"] != lr["requests"]:
            log(f"  warning: completed coserve {cr['completed']}/{cr['requests']}, "
                f"llama.cpp {lr['completed']}/{lr['requests']}")
        rows.append(ctx.row("serve", f"serve {c} client{plural}: streamed tok/s", "tokens_per_s",
                            cr["streamed_tokens_per_s"], lr["streamed_tokens_per_s"], None, None,
                            ccmd, lcmds[c], **extra))
        rows.append(ctx.row("serve", f"serve {c} client{plural}: TTFT p50", "ttft_p50_ms",
                            cr["ttft_ms"]["p50"], lr["ttft_ms"]["p50"], None, None, ccmd, lcmds[c],
                            clients=c, lower_is_better=True))
        rows.append(ctx.row("serve", f"serve {c} client{plural}: ITL p50", "itl_p50_ms",
                            cr["itl_ms"]["p50"], lr["itl_ms"]["p50"], None, None, ccmd, lcmds[c],
                            clients=c, lower_is_better=True))
    return rows


def greedy_row(ctx, folder, gguf):
    rng = random.Random(1234)
    ids = [rng.randrange(256, VOCAB - 1) for _ in range(GREEDY_PROMPT)]
    ccmd = [ctx.coserve, "generate", folder, *COSERVE_ISA_ARGS, "--prompt-ids", ",".join(map(str, ids)),
            "--max-tokens", GREEDY_TOKENS, "--ignore-eos", "--json", "--threads", ctx.threads,
            "--kv-cache-dtype", "fp32"]
    out, err = run(ccmd, env=coserve_env(ctx.threads))
    cids = last_json(out)["output_ids"]
    # f32 KV cache on the llama.cpp side too (its default is f16), so both compute in f32.
    lcmd = [ctx.bin / "llama-server", "-m", gguf, "-t", ctx.threads, "-np", 1, "-c", 256,
            "-ctk", "f32", "-ctv", "f32", "--host", "127.0.0.1"]
    logs = ctx.cache / "logs"
    logs.mkdir(exist_ok=True)
    with Server(lcmd, "llama-server", logs / f"llama-server-greedy-{ctx.model}.log") as s:
        body = {"prompt": ids, "n_predict": GREEDY_TOKENS, "temperature": 0, "ignore_eos": True,
                "return_tokens": True, "cache_prompt": False}
        req = urllib.request.Request(s.url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            res = json.loads(r.read())
        lcmd = s.cmd
    lids = res.get("tokens") or []
    first_diff = next((i for i, (a, b) in enumerate(zip(cids, lids)) if a != b), None)
    if first_diff is None and len(cids) != len(lids):
        first_diff = min(len(cids), len(lids))
    match = first_diff is None
    log(f"  greedy ids {'match' if match else f'differ at index {first_diff}'}: "
        f"coserve {cids} llama.cpp {lids}")
    return {"model": ctx.model, "dtype": ctx.dtype, "threads": ctx.threads, "bench": "greedy",
            "name": f"greedy ids, {GREEDY_PROMPT}-token prompt, {GREEDY_TOKENS} tokens",
            "match": match, "first_diff": first_diff, "prompt_ids": ids, "coserve_ids": cids,
            "llamacpp_ids": lids, "llamacpp_prompt_tokens_evaluated": res.get("tokens_evaluated"),
            "coserve_cmd": shlex.join(map(str, ccmd)), "llamacpp_cmd": shlex.join(map(str, lcmd)),
            "llamacpp_request": {k: v for k, v in body.items() if k != "prompt"}}


def logprob_row(ctx, gguf):
    """Next-token log-probabilities of the same quantized file on both sides: LOGPROB_TOP of
    llama.cpp's top tokens at each of GREEDY_TOKENS greedy steps (while the two greedy paths
    agree), max |coserve - llama.cpp|. Both sides keep the KV cache in f16."""
    rng = random.Random(4321)
    ids = [rng.randrange(256, VOCAB - 1) for _ in range(GREEDY_PROMPT)]
    ccmd = [ctx.coserve, "generate", gguf, *COSERVE_ISA_ARGS, "--prompt-ids", ",".join(map(str, ids)),
            "--max-tokens", GREEDY_TOKENS, "--ignore-eos", "--json", "--threads", ctx.threads,
            "--kv-cache-dtype", "fp16", "--logits", "all"]
    out, _ = run(ccmd, env=coserve_env(ctx.threads))
    cres = last_json(out)
    lcmd = [ctx.bin / "llama-server", "-m", gguf, "-t", ctx.threads, "-np", 1, "-c", 256,
            "--host", "127.0.0.1"]
    logs = ctx.cache / "logs"
    logs.mkdir(exist_ok=True)
    with Server(lcmd, "llama-server", logs / f"llama-server-logprob-{ctx.model}-{ctx.dtype}.log") as s:
        body = {"prompt": ids, "n_predict": GREEDY_TOKENS, "temperature": 0, "ignore_eos": True,
                "return_tokens": True, "cache_prompt": False, "n_probs": LOGPROB_TOP}
        req = urllib.request.Request(s.url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            res = json.loads(r.read())
        lcmd = s.cmd
    diffs = []
    close = True  # vLLM's check_logprobs_close: where the greedy ids first differ, each side's
    # token is among the other side's top LOGPROB_TOP; the comparison stops there.
    for step, (logits, probs) in enumerate(zip(cres["logits"], res["completion_probabilities"])):
        m = max(logits)
        lse = m + math.log(sum(math.exp(x - m) for x in logits))
        diffs.append(max(abs((logits[t["id"]] - lse) - t["logprob"]) for t in probs["top_logprobs"]))
        cid, lid = cres["output_ids"][step], res["tokens"][step]
        if cid != lid:
            ctop = sorted(range(len(logits)), key=lambda i: -logits[i])[:LOGPROB_TOP]
            close = cid in [t["id"] for t in probs["top_logprobs"]] and lid in ctop
            break  # later steps condition on different tokens
    worst = max(diffs) if diffs else None
    log(f"  {ctx.dtype} logprobs: max |diff| over llama.cpp's top {LOGPROB_TOP} at {len(diffs)} steps: {worst}; "
        f"logprobs close (vLLM's criterion): {close}")
    return {"model": ctx.model, "dtype": ctx.dtype, "threads": ctx.threads, "bench": "logprobs",
            "name": f"next-token logprobs, top {LOGPROB_TOP}, {len(diffs)} steps", "max_abs_diff": worst,
            "logprobs_close": close,
            "per_step_max_abs_diff": diffs, "coserve_ids": cres["output_ids"], "llamacpp_ids": res["tokens"],
            "coserve_cmd": shlex.join(map(str, ccmd)), "llamacpp_cmd": shlex.join(map(str, lcmd))}


class Ctx:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def row(self, bench, name, metric, c, l, cruns, lruns, ccmd, lcmd, lower_is_better=False, **extra):
        ratio = None
        if c and l:
            ratio = (l / c) if lower_is_better else (c / l)
        r = {"model": self.model, "dtype": self.dtype, "threads": self.threads, "bench": bench,
             "name": name, "metric": metric, "coserve": c, "llamacpp": l,
             "ratio": round(ratio, 3) if ratio else None,
             "ratio_is": "llamacpp / coserve" if lower_is_better else "coserve / llamacpp",
             "load_avg": round(os.getloadavg()[0], 2)}
        if cruns is not None:
            r["coserve_runs"] = cruns
            r["llamacpp_runs"] = lruns
        r.update(extra)
        r["coserve_cmd"] = shlex.join(map(str, ccmd)) if ccmd else None
        r["llamacpp_cmd"] = shlex.join(map(str, lcmd)) if lcmd else None
        log(f"  {self.model} {self.dtype} {name}: coserve {c} llama.cpp {l} ratio {r['ratio']}")
        return r


# ---------------------------------------------------------------- output

def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"
    return str(x)


def markdown(meta, rows):
    m = meta["machine"]
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in m["flags"].items())
    lines = [
        f"Machine: {m['cpu']}, {m['physical_cores']} physical cores ({m['logical_cpus']} logical), "
        f"{flags}; load average {m['load_avg_start']:.2f} at the start, {m['load_avg_end']:.2f} at the end.",
        f"llama.cpp: vendored in llama-cpp-python {meta['llama_cpp_python']} "
        f"(build {meta.get('llama_cpp_build', {}).get('build_number')}, "
        f"commit {meta.get('llama_cpp_build', {}).get('build_commit')}), "
        f"CPU backend, {meta['threads']} threads on both sides.",
        f"Command: `{meta['command']}`",
        "",
        "| model | dtype | benchmark | coserve | llama.cpp | ratio (>1: coserve faster) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        if r["bench"] == "greedy":
            verdict = "identical" if r["match"] else f"differ from index {r['first_diff']}"
            lines.append(f"| {r['model']} | {r['dtype']} | {r['name']} | {verdict} | | |")
            continue
        if r["bench"] == "logprobs":
            close = {True: "yes", False: "no"}.get(r.get("logprobs_close"), "?")
            lines.append(f"| {r['model']} | {r['dtype']} | {r['name']}: max abs difference; "
                         f"close by vLLM's check_logprobs_close | {fmt(r['max_abs_diff'])}; {close} | | |")
            continue
        unit = "ms" if r["metric"].endswith("_ms") else "tok/s"
        lines.append(f"| {r['model']} | {r['dtype']} | {r['name']} ({unit}) | {fmt(r['coserve'])} | "
                     f"{fmt(r['llamacpp'])} | {fmt(r['ratio'])} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(
        prog="scripts/bench-vs-llamacpp", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["demo", "150m", "smol", "mixtral", "qwen3moe", "both"],
                    help="demo: make-demo-model's defaults (4 layers, hidden 256); 150m: hidden 768, "
                         "intermediate 2048, 12 layers, 12 heads, 4 KV heads; smol: hidden 640, "
                         "intermediate 1536, 8 layers, 10 heads, 2 KV heads (K-quant files of it hold "
                         "llama-quantize's fallback types); mixtral: 8 layers of 8 experts (width 1024, "
                         "top 2), hidden 512; qwen3moe: 8 layers of 32 experts (width 256, top 4), hidden "
                         "512; both: demo and 150m (default: both; "
                         "--quick: demo)")
    ap.add_argument("--dtype", choices=["bf16", "f32", "both"],
                    help="weight precision of the model folder and of the GGUF file (default: both; "
                         "--quick: f32)")
    ap.add_argument("--threads", type=int, default=physical_cores(),
                    help="threads on both sides (default: the number of physical cores, here %(default)s)")
    ap.add_argument("--reps", type=int,
                    help="measured runs per prefill/decode row, median reported (default 3; --quick: 1)")
    ap.add_argument("--serve-rounds", type=int,
                    help="requests each serving client sends one after another (default 3; --quick: 1)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: demo model only, f32 unless --dtype is given, prefill 128, "
                         "decode batch 1 and 8, serve 1 and 8 clients, 1 rep, the greedy row")
    ap.add_argument("--quant", default="",
                    help="comma-separated GGUF types to compare as well (f16, q8_0, q4_0, q4_k_m, "
                         "q5_k_m, q6_k, q4_1, q5_0, q5_1, q3_k_m, q2_k, iq4_nl, iq4_xs, or 'all'): llama-quantize makes them from the f32 GGUF and both sides run the same "
                         "file; f16 adds a greedy-ids row, the others a logprob row (default: none)")
    ap.add_argument("--no-serve", action="store_true", help="skip the HTTP serving rows")
    ap.add_argument("--no-greedy", action="store_true",
                    help="skip the greedy-ids row (which otherwise makes the f32 model even when "
                         "only bf16 is benchmarked)")
    ap.add_argument("--out", help="write the JSON rows to this file instead of stdout")
    ap.add_argument("--md", help="also write the markdown table to this file")
    ap.add_argument("--bin", default=os.environ.get("COSERVE_BIN", str(REPO / "build" / "bin" / "coserve")),
                    help="the coserve binary (default: build/bin/coserve, or $COSERVE_BIN)")
    ap.add_argument("--cache", help="cache folder (default: ${COSERVE_CACHE:-~/.cache/coserve}/llamacpp)")
    ap.add_argument("--llama-cpp-python", default=LLAMA_CPP_PYTHON_VERSION, metavar="VERSION",
                    help="llama-cpp-python sdist whose vendored llama.cpp is built (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(),
                    help="parallel compile jobs for llama.cpp (default: nproc, %(default)s)")
    ap.add_argument("--isa", choices=["native", "avx2"], default="native",
                    help="native: llama.cpp's GGML_NATIVE build and coserve's own pick (default); avx2: "
                         "both on AVX2 + FMA + F16C only (llama.cpp built without its AVX-512 paths in "
                         "a separate folder, coserve with --cpu-isa AVX2), to time the AVX2 paths on a "
                         "CPU that has more")
    ap.add_argument("--build-only", action="store_true",
                    help="fetch and build llama.cpp and the converter venv, then stop")
    a = ap.parse_args()
    for key, full, quick in (("model", "both", "demo"), ("dtype", "both", "f32"), ("reps", 3, 1),
                             ("serve_rounds", 3, 1)):
        if getattr(a, key) is None:
            setattr(a, key, quick if a.quick else full)
    command = shlex.join(["scripts/bench-vs-llamacpp", *sys.argv[1:]])

    coserve = Path(a.bin).resolve()
    if not coserve.exists():
        sys.exit(f"{coserve} not found: build it (ninja -C build coserve) or pass --bin")
    cache = cache_dir(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    meta = {"machine": machine_info(), "command": command, "threads": a.threads,
            "llama_cpp_python": a.llama_cpp_python, "coserve_bin": str(coserve)}

    if meta["machine"]["load_avg_start"] > 0.5:
        log(f"warning: load average {meta['machine']['load_avg_start']:.2f}: other processes are "
            "running, and both sides lose to them (llama.cpp above all: its threads spin at barriers "
            "and stall when one is descheduled); each row records the load average")
    llama = fetch_sdist(cache, a.llama_cpp_python)
    if a.isa == "avx2":
        COSERVE_ISA_ARGS[:] = ["--cpu-isa", "AVX2"]
    meta["isa"] = a.isa
    bindir, build_s = build_llamacpp(cache, a.llama_cpp_python, llama, a.jobs, a.isa)
    meta["llama_cpp_build_s"] = round(build_s, 1) if build_s is not None else "cached"
    conv_py = converter_venv(cache, a.llama_cpp_python, llama)
    if a.build_only:
        log(f"tools in {bindir}, converter python {conv_py}")
        return

    models = ["demo", "150m"] if a.model == "both" else [a.model]
    dtypes = ["bf16", "f32"] if a.dtype == "both" else [a.dtype]
    quants = list(QUANTS) if a.quant == "all" else [q for q in a.quant.split(",") if q]
    for q in quants:
        if q not in QUANTS:
            sys.exit(f"--quant: unknown type {q} (known: {', '.join(QUANTS)})")
    prefill = [128] if a.quick else [128, 512]
    batches = [1, 8] if a.quick else [1, 8, 32]
    clients = [1, 8] if a.quick else [1, 8, 32]

    made = {}

    def model(name, dtype):
        if (name, dtype) not in made:
            made[name, dtype] = make_model(coserve, cache, name, dtype, conv_py, llama)
        return made[name, dtype]

    rows = []
    for name in models:
        for dtype in dtypes:
            folder, gguf = model(name, dtype)
            ctx = Ctx(model=name, dtype=dtype, threads=a.threads, reps=a.reps, coserve=coserve,
                      folder=folder, gguf=gguf, bin=bindir, cache=cache, llama_build={})
            log(f"== {name} {dtype}: warm-up run (discarded)")
            coserve_bench(coserve, folder, a.threads, 1, 128, 1)
            rows += prefill_rows(ctx, prefill)
            meta["llama_cpp_build"] = ctx.llama_build
            rows += decode_rows(ctx, batches)
            if not a.no_serve:
                rows += serve_rows(ctx, clients, a.serve_rounds)
        if not a.no_greedy:
            folder, gguf = model(name, "f32")
            ctx = Ctx(model=name, dtype="f32", threads=a.threads, coserve=coserve, bin=bindir, cache=cache)
            rows.append(greedy_row(ctx, folder, gguf))
        for quant in quants:
            _, f32_gguf = model(name, "f32")
            qfile = make_quant(cache, bindir, name, f32_gguf, quant)
            ctx = Ctx(model=name, dtype=quant, threads=a.threads, reps=a.reps, coserve=coserve,
                      folder=qfile, gguf=qfile, bin=bindir, cache=cache, llama_build={})
            log(f"== {name} {quant} (GGUF on both sides): warm-up run (discarded)")
            coserve_bench(coserve, qfile, a.threads, 1, 128, 1)
            rows += prefill_rows(ctx, prefill)
            rows += decode_rows(ctx, batches)
            if not a.no_serve:
                rows += serve_rows(ctx, clients, a.serve_rounds)
            rows.append(greedy_row(ctx, qfile, qfile) if quant == "f16" else logprob_row(ctx, qfile))
    meta["machine"]["load_avg_end"] = os.getloadavg()[0]

    lines = [json.dumps({"meta": meta})] + [json.dumps(r) for r in rows]
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
        log(f"wrote {a.out}")
    else:
        print("\n".join(lines), flush=True)
    md = markdown(meta, rows)
    if a.md:
        Path(a.md).write_text(md)
        log(f"wrote {a.md}")
    sys.stderr.write("\n" + md)


if __name__ == "__main__":
    main()
