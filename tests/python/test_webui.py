"""The web UI in a real browser: Debian's headless Chromium driven by selenium against the real
`coserve serve --demo` process. The chat page streams a reply, stops one (the server frees its
KV blocks), keeps conversations across a reload, regenerates and edits, shows errors as sentences,
never renders the model's HTML, exports and imports; the status page's numbers move under load and
its trace downloads; the API key gates the data, not the pages; --no-webui turns it all off.

Without chromium and chromedriver (Debian: chromium, chromium-driver) or selenium the tests skip,
and fail under CI."""
import json
import os
import shutil
import tempfile
import threading
import time

import httpx
import pytest

from conftest import Server, skip_or_fail_in_ci, wait_for

CHROMIUM = os.environ.get("COSERVE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("COSERVE_CHROMEDRIVER", "/usr/bin/chromedriver")


def make_driver(download_dir):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip_or_fail_in_ci("selenium is not installed (tests/python/requirements.txt)")
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        skip_or_fail_in_ci(f"no browser: {CHROMIUM} and {CHROMEDRIVER} are needed (Debian: chromium chromium-driver)")
    o = Options()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    d.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": download_dir})
    d.implicitly_wait(0)
    return d


@pytest.fixture(scope="module")
def downloads():
    d = tempfile.mkdtemp(prefix="coserve-webui-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(downloads):
    d = make_driver(downloads)
    yield d
    d.quit()


@pytest.fixture
def page(browser, server):
    """The chat page with an empty localStorage."""
    browser.get(server.url + "/")
    browser.execute_script("localStorage.clear()")
    browser.get(server.url + "/")
    assert wait_for(lambda: browser.execute_script("return document.getElementById('model').value") == server.model, 10)
    browser.get_log("browser")  # start each test with an empty console
    return browser


def by_id(d, i):
    from selenium.webdriver.common.by import By
    return d.find_element(By.ID, i)


def css(d, sel):
    from selenium.webdriver.common.by import By
    return d.find_elements(By.CSS_SELECTOR, sel)


def set_field(d, field_id, value):
    d.execute_script("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                     "e.dispatchEvent(new Event('input'));", field_id, str(value))


def send(d, text):
    box = by_id(d, "input")
    box.clear()
    box.send_keys(text)
    by_id(d, "send").click()


def assistant_text(d):
    return d.execute_script("const b = document.querySelectorAll('.msg.assistant .body');"
                            "return b.length ? b[b.length - 1].textContent : null")


def wait_idle(d, timeout=60):
    assert wait_for(lambda: by_id(d, "stop").get_attribute("hidden") is not None, timeout), "the reply never ended"


def api_status(server, headers=None):
    r = httpx.get(server.url + "/api/status", headers=headers or {}, timeout=10)
    assert r.status_code == 200
    return r.json()


def no_console_errors(d):
    bad = [e for e in d.get_log("browser") if e["level"] == "SEVERE" or e.get("source") == "security"]
    assert not bad, bad


def test_reply_streams_in_then_stop_frees_the_kv_and_reload_keeps_the_conversation(page, server):
    by_id(page, "settings-toggle").click()
    set_field(page, "max-tokens", 1900)
    set_field(page, "system-prompt", "You are terse.")
    send(page, "Tell me a very long story about caches.")
    # The text grows over several looks while the reply is still streaming.
    lengths = []
    end = time.monotonic() + 30
    while time.monotonic() < end and len(set(lengths)) < 4:
        n = len(assistant_text(page) or "")
        if n and (not lengths or n != lengths[-1]):
            lengths.append(n)
        time.sleep(0.05)
    assert len(set(lengths)) >= 4 and lengths == sorted(lengths), lengths
    assert css(page, ".msg.assistant.streaming"), "stopped before it could be stopped"
    assert api_status(server)["running"] >= 1
    by_id(page, "stop").click()
    wait_idle(page, 10)
    assert "Stopped." in css(page, ".msg.assistant .note")[-1].text
    shown = assistant_text(page)
    assert shown
    # The server ends the request and gives its KV blocks back.
    assert wait_for(lambda: (lambda s: s["running"] == 0 and s["kv_blocks"]["used"] == 0
                             and not s["requests"])(api_status(server)), 10)
    assert api_status(server)["totals"]["finished_abort"] >= 1
    # A reload finds the conversation, its title, system prompt and both messages.
    page.refresh()
    assert wait_for(lambda: len(css(page, "#conversations li")) == 1, 5)
    assert css(page, "#conversations li .title")[0].text.startswith("Tell me a very long story")
    assert [m.get_attribute("data-role") for m in css(page, ".msg")] == ["user", "assistant"]
    assert assistant_text(page) == shown
    assert page.execute_script("return document.getElementById('system-prompt').value") == "You are terse."
    no_console_errors(page)


def test_regenerate_and_edit(page, server):
    by_id(page, "settings-toggle").click()
    set_field(page, "max-tokens", 12)
    send(page, "first question")
    wait_idle(page)
    first = assistant_text(page)
    assert first
    assert "tokens generated" in css(page, ".msg.assistant .note")[-1].text
    by_id(page, "messages").find_element("css selector", ".msg.assistant .regenerate").click()
    wait_idle(page)
    assert [m.get_attribute("data-role") for m in css(page, ".msg")] == ["user", "assistant"]
    assert assistant_text(page)
    # Edit the question: the reply after it is replaced by a new one.
    css(page, ".msg.user .edit")[0].click()
    area = css(page, ".msg.user textarea.edit")[0]
    area.clear()
    area.send_keys("second question")
    css(page, ".msg.user .save-edit")[0].click()
    wait_idle(page)
    msgs = css(page, ".msg")
    assert [m.get_attribute("data-role") for m in msgs] == ["user", "assistant"]
    assert msgs[0].find_element("css selector", ".body").text == "second question"
    assert css(page, "#conversations li .title")[0].text == "second question"
    # What was sent is what the page shows: the conversation in localStorage has the edit.
    stored = page.execute_script("return JSON.parse(localStorage.getItem('coserve.conversations.v1'))")
    assert stored[0]["messages"][0]["content"] == "second question"
    assert len(stored[0]["messages"]) == 2
    no_console_errors(page)


def test_errors_are_sentences(page, server):
    by_id(page, "settings-toggle").click()
    set_field(page, "max-tokens", 10 ** 7)
    send(page, "hello")
    wait_idle(page)
    err = css(page, ".msg.assistant .error")[-1].text
    assert err.startswith("The request was refused (400):")
    assert "max_tokens" in err or "context" in err


def test_overload_and_unavailable_read_as_sentences(page):
    """429 and 503 are hard to cause on cue against the real server; the page's own error
    formatter gets the server's error bodies for them (as the API writes them) instead."""
    texts = page.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const body = (m, t) => JSON.stringify({error: {message: m, type: t, param: null, code: null}});
        Promise.all([
          coserve.errorText(new Response(body("server overloaded, retry later", "RateLimitError"), {status: 429})),
          coserve.errorText(new Response(body("the model is still loading; retry later", "ServiceUnavailableError"), {status: 503})),
          coserve.errorText(new Response("<html>bad gateway</html>", {status: 502})),
        ]).then(done);""")
    assert texts[0] == "The server is busy; try again in a moment (429): server overloaded, retry later"
    assert texts[1].startswith("The server is unavailable") and texts[1].endswith("(503): the model is still loading; retry later")
    assert texts[2] == "The server answered (502)."


def test_model_output_is_never_rendered_as_html_and_import_export_round_trip(page, server, downloads):
    evil = ("**bold** and `code`\n\n<img src=x onerror=\"window.__pwned=1\">"
            "<script>window.__pwned=2</script>\n\n[click](javascript:window.__pwned=3)\n\n"
            "```\n<b>not bold</b>\n```")
    doc = {"format": "coserve.conversations", "version": 1, "conversations": [
        {"id": "imported1", "title": "imported", "system": "",
         "messages": [{"role": "user", "content": "<i>user html</i>"}, {"role": "assistant", "content": evil}]}]}
    path = os.path.join(downloads, "import.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    by_id(page, "import-file").send_keys(path)
    assert wait_for(lambda: len(css(page, ".msg")) == 2, 5)
    assert "Imported 1 conversation" in by_id(page, "sidebar-msg").text
    body = css(page, ".msg.assistant .body")[0]
    assert body.find_elements("css selector", "strong")[0].text == "bold"
    assert body.find_elements("css selector", "code")
    assert not css(page, ".msg img, .msg script, .msg i, .msg b")
    assert "<img src=x" in body.text  # shown as text
    assert "<b>not bold</b>" in body.text
    for a in body.find_elements("css selector", "a"):
        assert not (a.get_attribute("href") or "").startswith("javascript:")
    assert css(page, ".msg.user .body")[0].text == "<i>user html</i>"
    time.sleep(0.2)
    assert page.execute_script("return window.__pwned === undefined")
    # Export writes the same conversation back out.
    target = os.path.join(downloads, "coserve-conversations.json")
    if os.path.exists(target):
        os.remove(target)
    by_id(page, "export").click()
    assert wait_for(lambda: os.path.exists(target) and os.path.getsize(target) > 0, 10)
    out = json.load(open(target))
    assert out["format"] == "coserve.conversations"
    assert out["conversations"][0]["messages"][1]["content"] == evil
    # A file that is not a conversation list is refused with a sentence, nothing lost.
    bad = os.path.join(downloads, "bad.json")
    with open(bad, "w") as f:
        f.write('{"conversations": [{"title": "no messages"}]}')
    by_id(page, "import-file").send_keys(bad)
    assert wait_for(lambda: "Cannot import bad.json" in by_id(page, "sidebar-msg").text, 5)
    assert len(css(page, "#conversations li")) == 1
    no_console_errors(page)


def test_status_numbers_move_under_load_and_the_trace_downloads(browser, server, downloads):
    browser.get(server.url + "/status")
    assert wait_for(lambda: by_id(browser, "stat-generated-total").text not in ("", "–"), 10)
    before = int(by_id(browser, "stat-generated-total").text.replace(",", ""))
    stop = threading.Event()

    def load():
        client = server.client()
        while not stop.is_set():
            client.completions.create(model=server.model, prompt="load", max_tokens=48, temperature=0,
                                      extra_body={"ignore_eos": True})

    threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    seen_running = seen_rows = seen_tps = False
    end = time.monotonic() + 20
    try:
        while time.monotonic() < end and not (seen_running and seen_rows and seen_tps):
            seen_running |= by_id(browser, "stat-running").text not in ("0", "–")
            seen_rows |= browser.execute_script("return document.querySelectorAll('#requests tbody tr.running').length") > 0
            seen_tps |= by_id(browser, "stat-gen-tps").text not in ("0.0", "–")
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert seen_running and seen_rows and seen_tps
    after = int(by_id(browser, "stat-generated-total").text.replace(",", ""))
    assert after > before
    assert wait_for(lambda: len(css(browser, ".timeline")) > 0, 5)
    # The page redraws every second: read the tables in one script, not element by element.
    lanes = browser.execute_script(
        "return [...document.querySelectorAll('.timeline .lane .name')].map(e => e.textContent)")
    assert {"intake", "scheduler", "executor", "streamer"} <= set(lanes)
    busy = dict(browser.execute_script(
        "return [...document.querySelectorAll('#actors tbody tr')].map(r => [r.cells[0].textContent, r.cells[2].textContent])"))
    assert busy["executor"] not in ("0%", "0.0%")
    # The Chrome trace opens as JSON with an event per handled message.
    target = os.path.join(downloads, "coserve-trace.json")
    if os.path.exists(target):
        os.remove(target)
    by_id(browser, "download-trace").click()
    assert wait_for(lambda: os.path.exists(target) and os.path.getsize(target) > 0, 20)
    trace = json.load(open(target))
    assert any(e.get("name") == "execute_step" for e in trace["traceEvents"])
    no_console_errors(browser)


def test_api_key_gates_the_data_not_the_pages(downloads):
    srv = Server("--api-key", "k-123")
    d = make_driver(downloads)
    try:
        d.get(srv.url + "/")
        assert wait_for(lambda: by_id(d, "key-bar").get_attribute("hidden") is None, 10)
        send(d, "hi")
        wait_idle(d)
        assert css(d, ".msg.assistant .error")[-1].text.startswith("The API key is missing or wrong (401)")
        key = by_id(d, "api-key")
        key.clear()
        key.send_keys("k-123")
        by_id(d, "api-key-save").click()
        assert wait_for(lambda: d.execute_script("return document.getElementById('model').value") == srv.model, 10)
        by_id(d, "settings-toggle").click()
        set_field(d, "max-tokens", 8)
        send(d, "hi again")
        wait_idle(d)
        assert not css(d, ".msg.assistant:last-child .error")
        assert assistant_text(d)
        # The status page uses the same key.
        d.get(srv.url + "/status")
        assert wait_for(lambda: by_id(d, "health").text == "healthy", 10)
        assert httpx.get(srv.url + "/api/status").status_code == 401
        assert httpx.get(srv.url + "/status").status_code == 200
    finally:
        d.quit()
        srv.stop()


def test_no_webui_turns_pages_and_data_off():
    srv = Server("--no-webui")
    try:
        for p in ("/", "/status", "/webui/chat.js", "/api/status", "/api/trace"):
            r = httpx.get(srv.url + p)
            assert r.status_code == 404, p
            assert r.json()["error"]["message"]
        assert httpx.get(srv.url + "/v1/models").status_code == 200
    finally:
        srv.stop()
