// The live view: polls /api/status once a second and draws the scheduler's requests, the KV
// cache and throughput over the last minutes, each actor's mailbox and busy time, and the last
// requests' spans through the actors (from the trace). "Download trace" saves /api/trace, the
// Chrome trace JSON that Perfetto (ui.perfetto.dev) opens.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  let paused = false;
  let timer = null;
  let last = null;

  const fmt = {
    int: (n) => (n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US")),
    rate: (n) => (n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1)),
    pct: (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(x >= 0.995 || x === 0 ? 0 : 1) + "%"),
    age: (s) => (s < 60 ? s.toFixed(1) + " s" : s < 3600 ? Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s"
                                                : Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m"),
    ms: (x) => (x < 1 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : Math.round(x).toString()) + " ms",
  };

  function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

  function sizeCanvas(c) {
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight || 160;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx, w, h };
  }

  function axis(ctx, w, h, max, label) {
    ctx.fillStyle = cssVar("--muted");
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText(fmt.int(max) + (label ? " " + label : ""), 4, 11);
    ctx.strokeStyle = cssVar("--line");
    ctx.beginPath();
    ctx.moveTo(0, h - 0.5);
    ctx.lineTo(w, h - 0.5);
    ctx.stroke();
  }

  // Stacked areas: blocks in use (bottom) and free blocks still holding cached prefixes, scaled to
  // their peak so a large pool's small use stays visible; the axis names the pool's size.
  function drawKv(h) {
    const { ctx, w, h: H } = sizeCanvas($("kv-chart"));
    const n = h.t.length;
    if (n < 2) return;
    const top = h.kv_used.map((u, i) => u + h.kv_cached[i]);
    const total = h.kv_used[n - 1] + h.kv_cached[n - 1] + h.kv_free[n - 1];
    const max = Math.min(Math.max(16, Math.ceil(1.25 * Math.max(...top))), Math.max(total, 16));
    const x = (i) => (i / (n - 1)) * w;
    const y = (v) => H - (Math.min(v, max) / max) * (H - 14);
    const layer = (lo, hi, color) => {
      ctx.beginPath();
      for (let i = 0; i < n; i++) ctx.lineTo(x(i), y(hi[i]));
      for (let i = n - 1; i >= 0; i--) ctx.lineTo(x(i), y(lo[i]));
      ctx.closePath();
      ctx.fillStyle = color;
      ctx.fill();
    };
    layer(h.kv_used, top, cssVar("--cached"));
    layer(h.t.map(() => 0), h.kv_used, cssVar("--used"));
    axis(ctx, w, H, max, "blocks (of " + fmt.int(total) + ")");
  }

  function drawTps(h) {
    const { ctx, w, h: H } = sizeCanvas($("tps-chart"));
    const n = h.t.length;
    if (n < 2) return;
    const maxT = Math.max(1, ...h.generation_tokens_per_second, ...h.prompt_tokens_per_second);
    const maxR = Math.max(1, ...h.running, ...h.waiting);
    const x = (i) => (i / (n - 1)) * w;
    const line = (vals, max, color, width) => {
      ctx.beginPath();
      vals.forEach((v, i) => ctx.lineTo(x(i), H - (v / max) * (H - 14)));
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.stroke();
      ctx.lineWidth = 1;
    };
    line(h.prompt_tokens_per_second, maxT, cssVar("--prompt"), 1.5);
    line(h.generation_tokens_per_second, maxT, cssVar("--gen"), 2);
    ctx.setLineDash([4, 3]);
    line(h.waiting, maxR, cssVar("--waiting"), 1);
    line(h.running, maxR, cssVar("--running"), 1);
    ctx.setLineDash([]);
    axis(ctx, w, H, maxT, "tok/s");
    ctx.fillStyle = cssVar("--muted");
    const t = fmt.int(maxR) + " requests";
    ctx.fillText(t, w - ctx.measureText(t).width - 4, 11);
  }

  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function renderRequests(list) {
    const tb = $("requests").querySelector("tbody");
    tb.replaceChildren();
    for (const r of list) {
      const tr = document.createElement("tr");
      tr.className = r.state;
      tr.append(cell(String(r.id)), cell(r.state), cell(fmt.age(r.age_seconds), "num"), cell(fmt.int(r.prompt_tokens), "num"),
                cell(fmt.int(r.cached_prompt_tokens), "num"), cell(fmt.int(r.generated_tokens), "num"),
                cell(fmt.int(r.max_tokens), "num"), cell(String(r.samples), "num"));
      tb.append(tr);
    }
    if (!list.length) {
      const tr = document.createElement("tr");
      const td = cell("No requests in the scheduler.", "muted");
      td.colSpan = 8;
      tr.append(td);
      tb.append(tr);
    }
    $("requests-count").textContent = list.length ? "(" + list.length + ")" : "";
  }

  function renderActors(list, window) {
    const tb = $("actors").querySelector("tbody");
    tb.replaceChildren();
    for (const a of list) {
      const tr = document.createElement("tr");
      const bar = document.createElement("div");
      bar.className = "bar";
      const fill = document.createElement("div");
      fill.style.width = Math.min(100, 100 * a.busy_fraction).toFixed(1) + "%";
      bar.append(fill);
      const td = document.createElement("td");
      td.append(bar);
      tr.append(cell(a.name + (a.actors > 1 ? " ×" + a.actors : "")), cell(fmt.int(a.mailbox_depth), "num"),
                cell(fmt.pct(a.busy_fraction), "num"), td);
      tb.append(tr);
    }
    $("actor-window").textContent = "(busy over the last " + window + " s)";
  }

  function renderTimelines(list) {
    const box = $("timelines");
    box.replaceChildren();
    if (!list.length) {
      const p = document.createElement("p");
      p.className = "muted";
      p.textContent = "No request in the trace's recent window yet.";
      box.append(p);
      return;
    }
    for (const t of list) {
      const div = document.createElement("div");
      div.className = "timeline";
      div.dataset.request = String(t.request_id);
      const head = document.createElement("div");
      head.className = "head";
      head.textContent = "request " + t.request_id + " · " + fmt.ms(t.duration_ms) + " · " + t.spans.length + " spans" +
                         (t.omitted_spans ? " (" + t.omitted_spans + " more not shown)" : "") +
                         (t.active ? " · running" : "") + " · " + fmt.age(t.age_seconds) + " ago";
      div.append(head);
      const actors = [];
      for (const s of t.spans) if (!actors.includes(s.actor)) actors.push(s.actor);
      const span = Math.max(t.duration_ms, 0.001);
      actors.forEach((name, k) => {
        const lane = document.createElement("div");
        lane.className = "lane";
        const label = document.createElement("span");
        label.className = "name";
        label.textContent = name;
        const track = document.createElement("div");
        track.className = "track";
        for (const s of t.spans) {
          if (s.actor !== name) continue;
          const b = document.createElement("div");
          b.className = "span a" + (k % 8);
          b.style.left = (100 * s.start_ms / span).toFixed(3) + "%";
          b.style.width = (100 * s.duration_ms / span).toFixed(3) + "%";
          b.title = s.message + ": " + fmt.ms(s.duration_ms) + " at +" + fmt.ms(s.start_ms) +
                    (s.queued_ms > 0.001 ? " (queued " + fmt.ms(s.queued_ms) + ")" : "");
          track.append(b);
        }
        lane.append(label, track);
        div.append(lane);
      });
      box.append(div);
    }
  }

  function render(s) {
    $("model-name").textContent = s.model;
    const health = $("health");
    health.textContent = s.healthy ? "healthy" : "unhealthy: " + (s.unhealthy_reason || "");
    health.className = "pill " + (s.healthy ? "ok" : "bad");
    $("stat-running").textContent = fmt.int(s.running);
    $("stat-waiting").textContent = fmt.int(s.waiting);
    $("stat-gen-tps").textContent = fmt.rate(s.throughput.generation_tokens_per_second);
    $("stat-prompt-tps").textContent = fmt.rate(s.throughput.prompt_tokens_per_second);
    $("stat-prefix").textContent = fmt.pct(s.prefix_cache.hit_rate_last_minute) + " / " + fmt.pct(s.prefix_cache.hit_rate);
    $("stat-kv").textContent = fmt.int(s.kv_blocks.used) + " / " + fmt.int(s.kv_blocks.cached) + " / " + fmt.int(s.kv_blocks.free);
    $("stat-generated-total").textContent = fmt.int(s.totals.generation_tokens);
    $("stat-uptime").textContent = fmt.age(s.uptime_seconds);
    const h = s.history;
    $("history-span").textContent = h.t.length > 1 ? fmt.age(h.t[h.t.length - 1] - h.t[0]) : "0 s";
    drawKv(h);
    drawTps(h);
    renderRequests(s.requests);
    renderActors(s.actors, s.actor_window_seconds);
    renderTimelines(s.timelines);
  }

  async function poll() {
    timer = null;
    if (paused) return;
    try {
      const r = await coserve.api("/api/status", { cache: "no-store" });
      if (!r.ok) throw new Error(await coserve.errorText(r));
      last = await r.json();
      render(last);
      $("status-error").hidden = true;
    } catch (e) {
      $("status-error").textContent = e.message.startsWith("The ") ? e.message : "Cannot reach the server: " + e.message;
      $("status-error").hidden = false;
    }
    if (!paused) timer = setTimeout(poll, 1000);
  }

  async function downloadTrace() {
    try {
      const r = await coserve.api("/api/trace");
      if (!r.ok) throw new Error(await coserve.errorText(r));
      coserve.downloadBlob(await r.blob(), "coserve-trace.json");
    } catch (e) {
      $("status-error").textContent = e.message;
      $("status-error").hidden = false;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("pause").addEventListener("click", () => {
      paused = !paused;
      $("pause").textContent = paused ? "Resume" : "Pause";
      if (!paused && !timer) poll();
    });
    $("download-trace").addEventListener("click", downloadTrace);
    window.addEventListener("resize", () => { if (last) render(last); });
    coserve.onKeyChange(() => { if (!timer) poll(); });
    poll();
  });
})();
