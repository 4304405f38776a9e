// Shared by the chat page and the status view: the API key (kept in localStorage), fetch with it,
// and errors turned into sentences.
"use strict";

const coserve = (() => {
  const KEY = "coserve.apiKey";
  const listeners = [];

  function apiKey() { return localStorage.getItem(KEY) || ""; }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const k = apiKey();
    if (k) h["Authorization"] = "Bearer " + k;
    return h;
  }

  // fetch() with the API key; a 401 shows the key bar.
  async function api(path, opts) {
    const o = Object.assign({}, opts || {});
    o.headers = headers(o.headers);
    const r = await fetch(path, o);
    if (r.status === 401) showKeyBar("The server needs an API key.");
    return r;
  }

  // A readable sentence for a failed response (OpenAI-style error bodies and Anthropic's).
  async function errorText(r) {
    let msg = "";
    try {
      const body = await r.json();
      const e = body && body.error;
      msg = (e && (e.message || (typeof e === "string" ? e : ""))) || body.message || "";
    } catch (_) { /* not JSON */ }
    const known = {
      400: "The request was refused",
      401: "The API key is missing or wrong",
      404: "Not found",
      413: "The request is too large",
      429: "The server is busy; try again in a moment",
      503: "The server is unavailable (loading, shutting down or failed); try again shortly",
    }[r.status];
    const what = (known || "The server answered") + " (" + r.status + ")";
    return msg ? what + ": " + msg : what + ".";
  }

  function showKeyBar(message) {
    const bar = document.getElementById("key-bar");
    if (!bar) return;
    bar.hidden = false;
    const input = document.getElementById("api-key");
    if (input && !input.value) input.value = apiKey();
    const m = document.getElementById("key-msg");
    if (m) m.textContent = message || "";
  }

  function onKeyChange(fn) { listeners.push(fn); }

  function bindKeyBar() {
    const save = document.getElementById("api-key-save");
    const input = document.getElementById("api-key");
    if (!save || !input) return;
    const apply = () => {
      localStorage.setItem(KEY, input.value.trim());
      const m = document.getElementById("key-msg");
      if (m) m.textContent = "Key saved in this browser.";
      listeners.forEach((fn) => fn());
    };
    save.addEventListener("click", apply);
    input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") apply(); });
    if (apiKey()) { input.value = apiKey(); }
  }

  function downloadBlob(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  document.addEventListener("DOMContentLoaded", bindKeyBar);
  return { api, apiKey, errorText, showKeyBar, onKeyChange, downloadBlob };
})();
