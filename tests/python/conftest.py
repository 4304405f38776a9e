"""Fixtures: the real `coserve serve --demo` binary on a free port (COSERVE_BIN).

A missing binary, or a demo model that cannot be made because ../shared/testdata is absent, skips
the tests that need the server; under CI (environment variable CI set and not "false") both fail
them instead. COSERVE_TEST_SERVE_ARGS adds flags to every test server (e.g. "--device cuda")."""
import os
import re
import shlex
import signal
import subprocess
import threading
import time

import httpx
import openai
import pytest


def skip_or_fail_in_ci(reason):
    """Skips the current test, or fails it under CI, where everything it needs must be present."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(reason + " (CI: not skipped)", pytrace=False)
    pytest.skip(reason)


def coserve_binary():
    """The coserve binary (COSERVE_BIN, default build/bin/coserve); skips (fails under CI) when absent."""
    binary = os.environ.get("COSERVE_BIN", "build/bin/coserve")
    if not os.access(binary, os.X_OK):
        skip_or_fail_in_ci(f"coserve binary not found at {binary} (set COSERVE_BIN)")
    return binary


@pytest.fixture(scope="session")
def coserve_bin():
    """Path of the coserve binary, for tests that run its subcommands directly."""
    return coserve_binary()


class Server:
    """`coserve serve --demo` (or `serve MODEL` when model is given) on a free port."""

    def __init__(self, *extra_args, model=None, launcher=(), env=None):
        """launcher: a command the server runs under (e.g. mpirun ... ); env: extra variables."""
        binary = coserve_binary()
        source = [str(model)] if model is not None else ["--demo"]
        # COSERVE_TEST_SERVE_ARGS: flags every test server gets (e.g. "--device cuda" to run the
        # suite against the CUDA executor).
        common = shlex.split(os.environ.get("COSERVE_TEST_SERVE_ARGS", ""))
        self.proc = subprocess.Popen(
            [*launcher, binary, "serve", *source, "--port", "0", *common, *extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=None if env is None else {**os.environ, **env})
        self.log = []
        self.port = None
        ready = threading.Event()

        def drain():  # keeps the pipe empty for the server's whole life
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(600) or self.port is None:
            self.proc.kill()
            if any("default tokenizer not found" in line for line in self.log):
                skip_or_fail_in_ci("the demo model needs ../shared/testdata/tokenizers/gpt2:\n" + "".join(self.log))
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"
        # The listener opens before the model loads: /health answers 503 until the engine is ready.
        end = time.monotonic() + 600
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > end:
                self.proc.kill()
                raise RuntimeError("server did not become ready:\n" + "".join(self.log))
            time.sleep(0.02)
        headers = {}
        if "--api-key" in extra_args:
            headers["Authorization"] = "Bearer " + extra_args[list(extra_args).index("--api-key") + 1]
        self.model = httpx.get(self.url + "/v1/models", headers=headers).json()["data"][0]["id"]

    def client(self, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0, **kw)

    def async_client(self):
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


def metric_value(text, name, labels=None):
    """One sample's value from Prometheus text, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and (labels is None or all(s.labels.get(k) == v for k, v in labels.items())):
                return s.value
    return None


def wait_for(pred, timeout=1.0, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()
