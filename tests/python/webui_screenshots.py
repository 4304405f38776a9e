"""Screenshots of the web UI at 1280x800 for the docs: the chat page after two streamed replies
and the status page under a small load, both from the real `coserve serve --demo` (the demo
model has random weights: its replies are not language).

Usage: COSERVE_BIN=build/bin/coserve .venv/bin/python tests/python/webui_screenshots.py [OUT_DIR]
(default OUT_DIR: docs/images)."""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from conftest import Server, wait_for  # noqa: E402
from test_webui import by_id, make_driver, send, set_field, wait_idle  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/images"
    os.makedirs(out, exist_ok=True)
    srv = Server()
    d = make_driver(tempfile.mkdtemp(prefix="coserve-shots-"))
    try:
        d.get(srv.url + "/")
        assert wait_for(lambda: d.execute_script("return document.getElementById('model').value") == srv.model, 10)
        by_id(d, "settings-toggle").click()
        set_field(d, "max-tokens", 60)
        set_field(d, "system-prompt", "You are a concise assistant.")
        by_id(d, "settings-toggle").click()
        for q in ("What does a paged KV cache buy a serving engine?", "And prefix caching?"):
            send(d, q)
            wait_idle(d)
        d.save_screenshot(os.path.join(out, "webui-chat.png"))

        stop = threading.Event()

        def load():
            client = srv.client()
            i = 0
            while not stop.is_set():
                prefix = "Shared system prompt for the load. " * 4
                client.completions.create(model=srv.model, prompt=prefix + str(i), max_tokens=64,
                                          extra_body={"ignore_eos": True})
                i += 1

        threads = [threading.Thread(target=load, daemon=True) for _ in range(6)]
        for t in threads:
            t.start()
        d.get(srv.url + "/status")
        time.sleep(20)
        d.save_screenshot(os.path.join(out, "webui-status.png"))
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        d.quit()
        srv.stop()
    print("wrote", os.path.join(out, "webui-chat.png"), "and", os.path.join(out, "webui-status.png"))


if __name__ == "__main__":
    main()
