"""One `coserve serve` process, supervised: started on a free loopback port, waited for until
/health answers 200, checked, and stopped with SIGTERM (coserve drains:
in-flight requests run up to its --shutdown-timeout, new ones are refused)."""
import os
import re
import signal
import subprocess
import threading
import time
from collections import deque

import httpx


class CoserveProcess:
    def __init__(self, binary, args, env=None, startup_timeout_s=600.0):
        self.binary = binary
        self.log = deque(maxlen=200)  # the newest lines of its stderr, for errors
        self.port = None
        found = threading.Event()
        self.proc = subprocess.Popen(
            [binary, "serve", *args, "--host", "127.0.0.1", "--port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})

        def drain():  # keeps the pipe empty for the process's whole life
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True, name="coserve-stderr").start()
        if not found.wait(startup_timeout_s) or self.port is None:
            self.kill()
            raise RuntimeError("coserve did not start listening:\n" + self.tail())
        self.url = f"http://127.0.0.1:{self.port}"
        # The listener opens before the model loads: /health answers 503 until the engine is up.
        end = time.monotonic() + startup_timeout_s
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.kill()
                raise RuntimeError("coserve did not become healthy:\n" + self.tail())
            time.sleep(0.05)

    @property
    def pid(self):
        return self.proc.pid

    def tail(self, n=40):
        return "\n".join(list(self.log)[-n:])

    def alive(self):
        return self.proc.poll() is None

    def healthy(self, timeout=5.0):
        if not self.alive():
            return False
        try:
            return httpx.get(self.url + "/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, timeout_s):
        """SIGTERM (coserve drains), then SIGKILL after `timeout_s`."""
        if not self.alive():
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()
