"""The CUDA executor as a module: the coserve binary does not link the CUDA libraries (a CPU-only
host runs it without them), and --device cuda loads libcoserve_cuda.so from beside the binary.
On a host without a GPU the module loads and reports that there is no device; a module path that
does not exist is a clear error. Both end the server with a non-zero exit status and the reason."""
import os
import pathlib
import shutil
import subprocess

import pytest

from conftest import coserve_binary


def module_path(binary):
    return pathlib.Path(binary).resolve().parent / "libcoserve_cuda.so"


def needed_libraries(path):
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def test_binary_does_not_link_cuda_libraries():
    if shutil.which("readelf") is None:
        pytest.skip("readelf not installed")
    binary = coserve_binary()
    needed = needed_libraries(binary)
    assert not [n for n in needed if "cuda" in n or "cublas" in n], needed
    if module_path(binary).exists():
        mod = needed_libraries(module_path(binary))
        assert any("cublasLt" in n for n in mod) and any("cudart" in n for n in mod), mod


def run_serve(binary, env, extra=()):
    return subprocess.run([binary, "serve", "--demo", "--device", "cuda", "--port", "0", *extra],
                          capture_output=True, text=True, timeout=120, env=env)


def test_device_cuda_loads_the_module():
    binary = coserve_binary()
    if not module_path(binary).exists():
        pytest.skip("this build has no CUDA executor module")
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU is present: the GPU tests run the module")
    r = run_serve(binary, dict(os.environ))
    assert r.returncode != 0, r.stderr
    assert "no CUDA device" in r.stderr, r.stderr
    assert "did not load" not in r.stderr


def test_missing_module_is_a_clear_error():
    binary = coserve_binary()
    if not module_path(binary).exists():
        pytest.skip("this build has no CUDA executor module")
    env = dict(os.environ, COSERVE_CUDA_MODULE="/nonexistent/libcoserve_cuda.so")
    r = run_serve(binary, env)
    assert r.returncode != 0, r.stderr
    assert "the CUDA executor module did not load" in r.stderr and "/nonexistent/libcoserve_cuda.so" in r.stderr, r.stderr


def test_module_from_other_sources_is_refused(tmp_path):
    """The executor options cross the dlopen boundary: a module whose layout differs from the
    binary's (here a stand-in reporting another size) is refused with the reason, and its
    executor entry point is never called (the stand-in's would crash the process)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in module")
    binary = coserve_binary()
    if not module_path(binary).exists():
        pytest.skip("this build has no CUDA executor module")
    src = tmp_path / "other.c"
    src.write_text(
        "#include <stdint.h>\n#include <stdlib.h>\n"
        "uint64_t coserve_cuda_module_layout_v1(void) { return (uint64_t)8 << 32 | 8; }\n"
        "void coserve_make_gpu_executor_v1(const void* o, void* out) { abort(); }\n")
    lib = tmp_path / "libother.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    r = run_serve(binary, dict(os.environ, COSERVE_CUDA_MODULE=str(lib)))
    assert r.returncode != 0, r.stderr
    assert "built from other sources than this binary" in r.stderr and "rebuild both" in r.stderr, r.stderr


def test_cuda_kv_cache_dtypes():
    """--device cuda keeps bf16 or fp8 (E4M3 / E5M2) caches: fp16 and fp32 are refused at startup
    naming the ones it keeps; fp8 passes that check (and then needs a device)."""
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU is present: the GPU tests run the fp8 cache")
    binary = coserve_binary()
    for kv in ("fp16", "fp32"):
        r = run_serve(binary, dict(os.environ), ("--kv-cache-dtype", kv))
        assert r.returncode != 0, r.stderr
        assert f"kv cache dtype '{kv}'" in r.stderr and "fp8_e5m2" in r.stderr, r.stderr
    for kv in ("fp8", "fp8_e5m2"):
        r = run_serve(binary, dict(os.environ), ("--kv-cache-dtype", kv))
        assert r.returncode != 0, r.stderr
        assert "kv cache dtype" not in r.stderr, r.stderr
        assert "no CUDA device" in r.stderr or "no CUDA executor" in r.stderr, r.stderr


def test_attention_backend_flag():
    """--attention-backend takes auto, native or flashinfer (a CUDA executor choice): another value ends
    the command with status 2 naming the choices; flashinfer with --device cpu is a startup error
    naming the flag; with --device cuda it passes the flag checks (and then needs a device)."""
    binary = coserve_binary()
    r = subprocess.run([binary, "serve", "--demo", "--port", "0", "--attention-backend", "flash"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "--attention-backend must be auto, native or flashinfer" in r.stderr, r.stderr
    r = subprocess.run([binary, "serve", "--demo", "--port", "0", "--device", "cpu", "--attention-backend",
                        "flashinfer"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stderr
    assert "--attention-backend flashinfer needs --device cuda" in r.stderr, r.stderr
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "--attention-backend auto|native|flashinfer" in help_text
    if not module_path(binary).exists():
        return
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        return  # a GPU is present: the GPU tests run the backend
    r = run_serve(binary, dict(os.environ), ("--attention-backend", "FlashInfer"))
    assert r.returncode != 0, r.stderr
    assert "attention-backend" not in r.stderr, r.stderr
    assert "no CUDA device" in r.stderr, r.stderr
