// The chat page: conversations in localStorage, replies streamed from /v1/chat/completions (SSE),
// stop / regenerate / edit, Markdown rendered by marked and sanitized by DOMPurify (or shown as
// escaped text when the server was built without them). Model output never reaches the page as
// raw HTML: marked's raw-HTML tokens are escaped and its output goes through DOMPurify.
"use strict";

(() => {
  const STORE = "coserve.conversations.v1";
  const CURRENT = "coserve.current.v1";
  const SETTINGS = "coserve.settings.v1";
  const $ = (id) => document.getElementById(id);

  let convs = loadConversations();
  let current = localStorage.getItem(CURRENT) || "";
  let settings = loadSettings();
  let inflight = null;  // {controller, conv, msg, node}

  // ---- storage ----
  function validMessage(m) {
    return m && typeof m === "object" && ["user", "assistant", "system"].includes(m.role) && typeof m.content === "string";
  }
  function cleanConversation(c) {
    if (!c || typeof c !== "object" || !Array.isArray(c.messages)) return null;
    return {
      id: typeof c.id === "string" && c.id ? c.id : newId(),
      title: typeof c.title === "string" ? c.title.slice(0, 200) : "",
      system: typeof c.system === "string" ? c.system : "",
      messages: c.messages.filter(validMessage).map((m) => {
        const out = { role: m.role, content: m.content };
        for (const k of ["reasoning", "error", "note"]) if (typeof m[k] === "string" && m[k]) out[k] = m[k];
        return out;
      }),
      created: Number(c.created) || Date.now(),
      updated: Number(c.updated) || Date.now(),
    };
  }
  function loadConversations() {
    try {
      const v = JSON.parse(localStorage.getItem(STORE) || "[]");
      return Array.isArray(v) ? v.map(cleanConversation).filter(Boolean) : [];
    } catch (_) {
      return [];
    }
  }
  function save() {
    try {
      localStorage.setItem(STORE, JSON.stringify(convs));
      localStorage.setItem(CURRENT, current);
    } catch (e) {
      sidebarMsg("Cannot save the conversations in this browser: " + e.message);
    }
  }
  function loadSettings() {
    const d = { model: "", temperature: 0.7, top_p: 1, max_tokens: "" };
    try { return Object.assign(d, JSON.parse(localStorage.getItem(SETTINGS) || "{}")); } catch (_) { return d; }
  }
  function saveSettings() { localStorage.setItem(SETTINGS, JSON.stringify(settings)); }
  function newId() { return Date.now().toString(36) + Math.random().toString(36).slice(2, 8); }
  function conv() { return convs.find((c) => c.id === current) || null; }
  function sidebarMsg(t) { $("sidebar-msg").textContent = t; }

  // ---- Markdown ----
  function escapeHtml(s) {
    return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  const markdown = (() => {
    if (!(window.marked && window.DOMPurify)) return null;
    window.marked.setOptions({ headerIds: false, mangle: false, gfm: true, breaks: true });
    window.marked.use({
      renderer: {
        // Raw HTML in the model's output is shown as text, never parsed as markup.
        html(token) { return escapeHtml(typeof token === "string" ? token : (token.raw || token.text || "")); },
      },
    });
    window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer");
      }
    });
    return (text) => window.DOMPurify.sanitize(window.marked.parse(text), {
      FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "img", "svg", "math"],
      FORBID_ATTR: ["style", "id", "name"],
    });
  })();
  function renderText(el, text) {
    if (markdown) {
      el.classList.remove("plain");
      el.innerHTML = markdown(text);
    } else {
      el.classList.add("plain");
      el.textContent = text;
    }
  }

  // ---- rendering ----
  function renderSidebar() {
    const ul = $("conversations");
    ul.replaceChildren();
    for (const c of [...convs].sort((a, b) => b.updated - a.updated)) {
      const li = document.createElement("li");
      li.className = c.id === current ? "active" : "";
      li.dataset.id = c.id;
      const t = document.createElement("span");
      t.className = "title";
      t.textContent = c.title || "New chat";
      t.title = c.title;
      t.addEventListener("click", () => { current = c.id; save(); renderAll(); });
      const del = document.createElement("button");
      del.type = "button";
      del.className = "link delete";
      del.textContent = "×";
      del.title = "Delete this conversation";
      del.addEventListener("click", () => {
        if (inflight && inflight.conv === c) inflight.controller.abort();
        convs = convs.filter((x) => x !== c);
        if (current === c.id) current = convs.length ? convs[0].id : "";
        save();
        renderAll();
      });
      li.append(t, del);
      ul.append(li);
    }
  }

  function messageNode(c, m, i) {
    const div = document.createElement("div");
    div.className = "msg " + m.role;
    div.dataset.role = m.role;
    div.dataset.index = String(i);
    const head = document.createElement("div");
    head.className = "role";
    head.textContent = m.role === "user" ? "You" : m.role === "assistant" ? "Assistant" : "System";
    const actions = document.createElement("span");
    actions.className = "actions";
    const busy = inflight !== null;
    if (m.role === "user" && !busy) actions.append(button("Edit", "edit", () => startEdit(c, i, div)));
    if (m.role === "assistant" && i === c.messages.length - 1 && !busy)
      actions.append(button("Regenerate", "regenerate", () => regenerate(c)));
    head.append(actions);
    div.append(head);
    if (m.reasoning) div.append(textDiv("reasoning", m.reasoning));
    const body = document.createElement("div");
    body.className = "body";
    if (m.role === "user") {
      body.classList.add("plain");
      body.textContent = m.content;
    } else {
      renderText(body, m.content);
    }
    div.append(body);
    if (m.error) div.append(textDiv("error", m.error));
    if (m.note) div.append(textDiv("note", m.note));
    return div;
  }

  function textDiv(cls, text) {
    const d = document.createElement("div");
    d.className = cls;
    d.textContent = text;
    return d;
  }

  function button(label, cls, fn) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "link " + cls;
    b.textContent = label;
    b.addEventListener("click", fn);
    return b;
  }

  function renderMessages() {
    const box = $("messages");
    const c = conv();
    box.replaceChildren();
    if (!c || c.messages.length === 0) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = "Start a conversation with " + ($("model").value || "the model") + ".";
      box.append(p);
    } else {
      c.messages.forEach((m, i) => {
        const node = messageNode(c, m, i);
        if (inflight && inflight.msg === m) {
          node.classList.add("streaming");
          inflight.node = node;
        }
        box.append(node);
      });
    }
    box.scrollTop = box.scrollHeight;
    $("system-prompt").value = c ? c.system : "";
  }

  function renderAll() { renderSidebar(); renderMessages(); }

  let pending = false;
  function renderStreaming() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (!inflight || !inflight.node || !inflight.node.isConnected) return;
      const box = $("messages");
      const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
      const fresh = messageNode(inflight.conv, inflight.msg, inflight.conv.messages.indexOf(inflight.msg));
      fresh.classList.add("streaming");
      inflight.node.replaceWith(fresh);
      inflight.node = fresh;
      if (atBottom) box.scrollTop = box.scrollHeight;
    });
  }

  function setBusy(b) {
    $("send").hidden = b;
    $("stop").hidden = !b;
  }

  // ---- generation ----
  function requestMessages(c, upTo) {
    const out = [];
    if (c.system.trim()) out.push({ role: "system", content: c.system });
    for (const m of c.messages.slice(0, upTo)) {
      if (m.role === "assistant" && !m.content) continue;  // failed or stopped before any output
      out.push({ role: m.role, content: m.content });
    }
    return out;
  }

  async function generate(c) {
    const msg = { role: "assistant", content: "" };
    c.messages.push(msg);
    c.updated = Date.now();
    const body = {
      model: $("model").value || undefined,
      messages: requestMessages(c, c.messages.length - 1),
      stream: true,
      stream_options: { include_usage: true },
    };
    const temperature = parseFloat(settings.temperature);
    const topP = parseFloat(settings.top_p);
    const maxTokens = parseInt(settings.max_tokens, 10);
    if (!Number.isNaN(temperature)) body.temperature = temperature;
    if (!Number.isNaN(topP)) body.top_p = topP;
    if (!Number.isNaN(maxTokens)) body.max_tokens = maxTokens;
    const controller = new AbortController();
    inflight = { controller, conv: c, msg, node: null };
    setBusy(true);
    save();
    renderAll();
    try {
      const r = await coserve.api("/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!r.ok) msg.error = await coserve.errorText(r);
      else await readStream(r, msg);
    } catch (e) {
      if (e.name === "AbortError") msg.note = "Stopped.";
      else msg.error = "The connection failed: " + e.message;
    } finally {
      inflight = null;
      setBusy(false);
      c.updated = Date.now();
      save();
      renderAll();
    }
  }

  async function readStream(r, msg) {
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    let saved = Date.now();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          let obj;
          try { obj = JSON.parse(data); } catch (_) { continue; }
          applyChunk(obj, msg);
        }
      }
      renderStreaming();
      if (Date.now() - saved > 1000) {  // a reload mid-reply keeps what has arrived
        save();
        saved = Date.now();
      }
    }
  }

  function applyChunk(obj, msg) {
    if (obj.error) {
      msg.error = "The reply failed: " + (obj.error.message || JSON.stringify(obj.error));
      return;
    }
    const ch = obj.choices && obj.choices[0];
    if (ch && ch.delta) {
      if (typeof ch.delta.content === "string") msg.content += ch.delta.content;
      if (typeof ch.delta.reasoning_content === "string") msg.reasoning = (msg.reasoning || "") + ch.delta.reasoning_content;
    }
    if (ch && ch.finish_reason === "length") msg.note = "Stopped at the token limit.";
    if (obj.usage) {
      const u = obj.usage;
      msg.note = (msg.note ? msg.note + " " : "") + u.completion_tokens + " tokens generated, prompt " + u.prompt_tokens + ".";
    }
  }

  function ensureConversation() {
    let c = conv();
    if (!c) {
      c = { id: newId(), title: "", system: $("system-prompt").value, messages: [], created: Date.now(), updated: Date.now() };
      convs.push(c);
      current = c.id;
    }
    return c;
  }

  function send(text) {
    if (inflight || !text.trim()) return;
    const c = ensureConversation();
    c.messages.push({ role: "user", content: text });
    if (!c.title) c.title = text.trim().replace(/\s+/g, " ").slice(0, 60);
    generate(c);
  }

  function regenerate(c) {
    if (inflight) return;
    const last = c.messages.length - 1;
    if (last >= 0 && c.messages[last].role === "assistant") c.messages.splice(last, 1);
    generate(c);
  }

  function startEdit(c, i, node) {
    const body = node.querySelector(".body");
    const area = document.createElement("textarea");
    area.className = "edit";
    area.value = c.messages[i].content;
    const ok = button("Save and send", "save-edit", () => {
      if (inflight || !area.value.trim()) return;
      c.messages[i].content = area.value;
      c.messages.splice(i + 1);
      if (i === 0) c.title = area.value.trim().replace(/\s+/g, " ").slice(0, 60);
      generate(c);
    });
    const cancel = button("Cancel", "cancel-edit", renderMessages);
    const row = document.createElement("div");
    row.append(ok, cancel);
    body.replaceWith(area);
    area.after(row);
    area.focus();
  }

  // ---- models ----
  async function loadModels() {
    const sel = $("model");
    try {
      const r = await coserve.api("/v1/models");
      if (!r.ok) {
        sidebarMsg(await coserve.errorText(r));
        return;
      }
      const data = (await r.json()).data || [];
      sel.replaceChildren();
      for (const m of data) {
        const o = document.createElement("option");
        o.value = o.textContent = m.id;
        sel.append(o);
      }
      if (settings.model && data.some((m) => m.id === settings.model)) sel.value = settings.model;
      sidebarMsg("");
      renderMessages();
    } catch (e) {
      sidebarMsg("Cannot reach the server: " + e.message);
    }
  }

  // ---- export / import ----
  function exportConversations() {
    const doc = { format: "coserve.conversations", version: 1, exported: new Date().toISOString(), conversations: convs };
    coserve.downloadBlob(new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" }), "coserve-conversations.json");
  }
  async function importConversations(file) {
    try {
      const doc = JSON.parse(await file.text());
      const list = Array.isArray(doc) ? doc : doc && Array.isArray(doc.conversations) ? doc.conversations : null;
      if (!list) throw new Error("expected a list of conversations or {\"conversations\": [...]}");
      const cleaned = list.map(cleanConversation);
      if (cleaned.some((c) => c === null)) throw new Error("every conversation needs a \"messages\" list");
      const ids = new Set(convs.map((c) => c.id));
      for (const c of cleaned) {
        if (ids.has(c.id)) c.id = newId();
        ids.add(c.id);
        convs.push(c);
      }
      if (cleaned.length) current = cleaned[0].id;
      save();
      renderAll();
      sidebarMsg("Imported " + cleaned.length + " conversation" + (cleaned.length === 1 ? "" : "s") + ".");
    } catch (e) {
      sidebarMsg("Cannot import " + file.name + ": " + e.message);
    }
  }

  // ---- wiring ----
  document.addEventListener("DOMContentLoaded", () => {
    $("temperature").value = settings.temperature;
    $("top-p").value = settings.top_p;
    $("max-tokens").value = settings.max_tokens;
    for (const [id, key] of [["temperature", "temperature"], ["top-p", "top_p"], ["max-tokens", "max_tokens"]])
      $(id).addEventListener("input", () => { settings[key] = $(id).value; saveSettings(); });
    $("model").addEventListener("change", () => { settings.model = $("model").value; saveSettings(); });
    $("system-prompt").addEventListener("input", () => {
      const c = conv();
      if (c) { c.system = $("system-prompt").value; save(); }
    });
    $("settings-toggle").addEventListener("click", () => {
      const s = $("settings");
      s.hidden = !s.hidden;
      $("settings-toggle").setAttribute("aria-expanded", String(!s.hidden));
    });
    $("new-chat").addEventListener("click", () => {
      current = "";
      save();
      renderAll();
      $("input").focus();
    });
    $("composer").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("input").value;
      if (!text.trim() || inflight) return;
      $("input").value = "";
      send(text);
    });
    $("input").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        $("composer").requestSubmit();
      }
    });
    $("stop").addEventListener("click", () => { if (inflight) inflight.controller.abort(); });
    $("export").addEventListener("click", exportConversations);
    $("import-file").addEventListener("change", (ev) => {
      const f = ev.target.files && ev.target.files[0];
      if (f) importConversations(f);
      ev.target.value = "";
    });
    coserve.onKeyChange(loadModels);
    if (coserve.apiKey()) coserve.showKeyBar("");
    renderAll();
    loadModels();
  });
})();
