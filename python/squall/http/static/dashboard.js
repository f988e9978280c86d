// squall's dashboard (docs/dashboard.md#pages): polls /dashboard/data.json and redraws.
// The scheduler sends aggregates only (per prefix, per worker) and the task stream's new
// records since the last poll, so a poll costs the same at ten tasks or a million.
"use strict";

const POLL_MS = 500;          // two updates a second
const STALE_MS = 3000;        // "stale" in the header past this without an update
const STREAM_WINDOW_S = 20;   // the task stream shows this many seconds
const STREAM_MAX_RECTS = 30000;
const HISTORY = 120;           // points kept for the system page's charts
const DRAW_MS = 200;          // the task stream scrolls at 5 frames a second: cheap

// The task states' colours. The scheduler sends the states (`states`); the bars stack
// them in this order, one not listed here last, in the released colour.
const STATE_COLOR = {
  memory: "var(--memory)", released: "var(--released)", forgotten: "var(--released)",
  erred: "var(--erred)", processing: "var(--processing)", queued: "var(--queued)",
  "no-worker": "var(--queued)", waiting: "var(--waiting)",
};
// States whose tasks are done, as the bars' "done / total" counts them.
const DONE_STATES = ["memory", "released", "forgotten"];

const state = {
  cursor: 0,          // the task stream's cursor: records after it come next
  rects: [],          // [row key, start, stop, prefix, key, status]
  rows: new Map(),    // "worker thread" -> row index
  lastUpdate: 0,      // Date.now() of the last answer
  skew: 0,            // scheduler clock - this browser's clock, seconds
  updates: 0,
  history: {},        // health figure -> recent values
  latencies: [],      // ms from asking for an update to having drawn it (recent ones)
  longestGap: 0,      // ms, the longest time between two updates
  states: [],         // the scheduler's task states, in the bars' order
};

// The scheduler's task states in the order the bars stack them (STATE_COLOR's).
function stackOrder(states) {
  const order = Object.keys(STATE_COLOR);
  const rank = s => (order.includes(s) ? order.indexOf(s) : order.length);
  return states.slice().sort((a, b) => rank(a) - rank(b));
}

const sumOf = (counts, states) => states.reduce((n, s) => n + (counts[s] || 0), 0);

function fmtBytes(n) {
  if (!isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0) : n.toFixed(0)) + " " + units[i];
}

function fmtCount(n) {
  return n >= 1e6 ? (n / 1e6).toFixed(2) + "M" : n >= 1e4 ? (n / 1e3).toFixed(1) + "k"
       : String(Math.round(n));
}

function fmtFigure(name, v) {
  if (typeof v !== "number") return String(v);
  if (/seconds_per_second|fraction|busy/.test(name)) return (100 * v).toFixed(1) + " %";
  if (/bytes|memory/.test(name)) return fmtBytes(v);
  if (/seconds|latency|duration/.test(name) && !/per_second/.test(name)) {
    return v < 1e-3 ? (v * 1e6).toFixed(0) + " µs" : v < 1 ? (v * 1e3).toFixed(1) + " ms"
         : v.toFixed(2) + " s";
  }
  return Math.abs(v) >= 100 ? fmtCount(v) : v.toFixed(v % 1 ? 2 : 0);
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
                                              '"': "&quot;", "'": "&#39;"}[c]));
}

// A colour per task prefix: a categorical palette in order of first appearance, so the
// first twenty prefixes a page sees are told apart at a glance.
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
                 "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"];
const colors = new Map();
function prefixColor(prefix) {
  let c = colors.get(prefix);
  if (c === undefined) {
    c = PALETTE[colors.size % PALETTE.length];
    colors.set(prefix, c);
  }
  return c;
}

function bar(parts, total) {
  if (!total) return '<div class="bar"></div>';
  return '<div class="bar">' + parts.filter(([v]) => v > 0).map(([v, color, title]) =>
    `<span style="width:${(100 * v / total).toFixed(3)}%;background:${color}" ` +
    `title="${esc(title)}"></span>`).join("") + "</div>";
}

function legend(items) {
  return '<div class="legend">' + items.map(([name, color]) =>
    `<span><i style="background:${color}"></i>${esc(name)}</span>`).join("") + "</div>";
}

// ----- status page ------------------------------------------------------------------

function renderCounts(d) {
  const el = document.getElementById("counts");
  if (!el) return;
  const c = d.counts || {};
  const figures = [["workers", d.scheduler.workers], ["threads", d.scheduler.threads],
                   ...Object.entries(c)];
  el.innerHTML = figures.map(([k, v]) =>
    `<div data-count="${esc(k)}"><b>${fmtCount(v)}</b>${esc(k)}</div>`).join("");
}

// One row of tasks by state (`cls`, `attrs`: the label's class and attributes): a label
// with its prefix's colour, the bar over `total`, and
// done / total (counts: {state: n}; released and forgotten tasks are done).
function stateRow(cls, attrs, label, prefix, counts, total, extra = "") {
  const done = sumOf(counts, DONE_STATES);
  const parts = state.states.map(k => [counts[k] || 0, STATE_COLOR[k] || "var(--released)",
                                       `${k}: ${counts[k] || 0}`]);
  return `<div class="name ${cls}" ${attrs}><i style="display:inline-block;width:8px;height:8px;` +
         `border-radius:2px;background:${prefixColor(prefix)};margin-right:6px"></i>` +
         `${esc(label)}</div>` + bar(parts, Math.max(total, 1)) +
         `<div class="figure">${fmtCount(done)} / ${fmtCount(total)}${extra}</div>`;
}

function renderProgress(d) {
  const el = document.getElementById("progress");
  if (!el) return;
  const prefixes = (d.prefixes || []).slice();
  // Tasks still to run: neither done nor erred.
  const live = p => sumOf(p, state.states) - sumOf(p, DONE_STATES) - (p.erred || 0);
  prefixes.sort((a, b) => live(b) - live(a) || (b.total || 0) - (a.total || 0));
  if (!prefixes.length) {
    el.innerHTML = '<div class="empty">no tasks yet</div>';
    return;
  }
  el.innerHTML = '<div class="bars">' + prefixes.slice(0, 40).map(p => {
    const total = sumOf(p, state.states);
    const erred = p.erred
      ? ` · <span style="color:var(--erred)">${fmtCount(p.erred)} erred</span>` : "";
    return stateRow("progress-row", `data-prefix="${esc(p.name)}"`, p.name, p.name, p, total, erred);
  }).join("") + "</div>" + legend([["in memory", "var(--memory)"],
    ["released / forgotten", "var(--released)"], ["erred", "var(--erred)"],
    ["processing", "var(--processing)"], ["queued / no worker", "var(--queued)"],
    ["waiting", "var(--waiting)"]]);
}

// Task groups (a collection's layer, a map call), active ones first, as the scheduler
// sends them; each bar over the tasks the group ever had.
const GROUPS_SHOWN = 15;

function renderGroups(d) {
  const el = document.getElementById("groups");
  if (!el) return;
  const groups = (d.groups || []).slice(0, GROUPS_SHOWN);
  if (!groups.length) {
    el.innerHTML = '<div class="empty">no task groups</div>';
    return;
  }
  el.innerHTML = '<div class="bars">' + groups.map(g => {
    const deps = (g.dependencies || []).join(", ");
    const title = esc(g.name) + (deps ? `\ndepends on ${esc(deps)}` : "");
    const attrs = `data-group="${esc(g.name)}" title="${title}"`;
    return stateRow("group-row", attrs, g.name, g.prefix, g.states || {}, g.len || 0);
  }).join("") + "</div>" + ((d.groups || []).length > GROUPS_SHOWN
    ? `<div class="legend">${d.groups.length - GROUPS_SHOWN} more groups not shown</div>` : "");
}

function memoryParts(w) {
  const m = w.memory || {};
  return [[m.managed || 0, "var(--memory)", `managed: ${fmtBytes(m.managed || 0)}`],
          [m.unmanaged || 0, "var(--unmanaged)", `unmanaged: ${fmtBytes(m.unmanaged || 0)}`],
          [m.spilled || 0, "var(--spilled)", `spilled to disk: ${fmtBytes(m.spilled || 0)}`]];
}

function renderMemory(d) {
  const el = document.getElementById("memory");
  if (!el) return;
  const workers = d.workers || [];
  if (!workers.length) {
    el.innerHTML = '<div class="empty">no workers</div>';
    return;
  }
  const most = Math.max(...workers.map(w => w.processing || 0), 1);
  el.innerHTML = '<div class="bars">' + workers.map(w => {
    const parts = memoryParts(w);
    const used = parts[0][0] + parts[1][0];
    const limit = w.memory_limit || Math.max(used + parts[2][0], 1);
    return `<div class="name" title="${esc(w.address)}">${esc(w.name)}</div>` +
           bar(parts, Math.max(limit, used + parts[2][0])) +
           `<div class="figure">${fmtBytes(used)}${w.memory_limit ? " / " +
             fmtBytes(w.memory_limit) : ""}</div>` +
           `<div class="name figure" style="text-align:left">processing</div>` +
           bar([[w.processing || 0, "var(--processing)", `processing: ${w.processing || 0}`]],
               most) +
           `<div class="figure">${fmtCount(w.processing || 0)} · ` +
           `${fmtFigure("seconds", w.occupancy || 0)} of work</div>`;
  }).join("") + "</div>" + legend([["managed", "var(--memory)"],
    ["unmanaged", "var(--unmanaged)"], ["spilled", "var(--spilled)"],
    ["tasks processing (and their expected seconds of work)", "var(--processing)"]]);
}

function addStream(d) {
  const s = d.stream;
  if (!s) return;
  state.cursor = s.cursor;
  for (const [worker, thread, start, stop, prefix, key, status] of s.records) {
    const row = worker + " " + thread;
    if (!state.rows.has(row)) {
      state.rows.set(row, 0);
      const sorted = [...state.rows.keys()].sort();
      sorted.forEach((r, i) => state.rows.set(r, i));
    }
    state.rects.push([row, start, stop, prefix, key, status]);
  }
  if (state.rects.length > STREAM_MAX_RECTS) {
    state.rects.splice(0, state.rects.length - STREAM_MAX_RECTS);
  }
  const note = document.getElementById("stream-note");
  if (note && s.sampled !== undefined) {
    note.textContent = s.sampled > 1 ? `sampled: 1 task in ${s.sampled.toFixed(0)} shown`
                                     : "every task shown";
  }
}

// Pixels per worker-thread row of the task stream: the rows share about 260 px.
function streamRowHeight() {
  return Math.max(6, Math.min(22, Math.floor(260 / Math.max(state.rows.size, 1))));
}

function drawStream() {
  const canvas = document.getElementById("task-stream");
  if (!canvas) return;
  const rows = Math.max(state.rows.size, 1);
  const rowH = streamRowHeight();
  const axisH = 18;
  const cssW = canvas.clientWidth, cssH = rows * rowH + axisH;
  const ratio = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(cssW * ratio) || canvas.height !== Math.round(cssH * ratio)) {
    canvas.width = Math.round(cssW * ratio);
    canvas.height = Math.round(cssH * ratio);
    canvas.style.height = cssH + "px";
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  const now = Date.now() / 1000 + state.skew;
  const t0 = now - STREAM_WINDOW_S;
  const x = t => (t - t0) / STREAM_WINDOW_S * cssW;
  // Drop what has scrolled out of the window.
  let first = 0;
  while (first < state.rects.length && state.rects[first][2] < t0) first++;
  if (first) state.rects.splice(0, first);
  // A row's tasks come in the order they ran, so whole device pixels are filled left
  // to right and a task falling within pixels already filled is not drawn again: at a
  // million tasks the frame costs what the canvas's width does, not what the records do.
  let drawn = 0;
  const filled = new Map();  // row -> device pixel where its drawing reached
  let color = "";
  for (const [row, start, stop, prefix, , status] of state.rects) {
    const left = Math.floor(x(start) * ratio);
    const right = Math.max(Math.ceil(x(stop) * ratio), left + 1);
    const from = Math.max(left, filled.get(row) ?? -Infinity);
    if (right <= from) continue;
    filled.set(row, right);
    const c = status === "OK" ? prefixColor(prefix) : "#000";
    if (c !== color) ctx.fillStyle = color = c;
    ctx.fillRect(from / ratio, state.rows.get(row) * rowH + 1, (right - from) / ratio, rowH - 2);
    drawn++;
  }
  ctx.fillStyle = "#6e7781";
  ctx.font = "11px system-ui, sans-serif";
  for (let s = 0; s <= STREAM_WINDOW_S; s += 5) {
    const px = cssW - s / STREAM_WINDOW_S * cssW;
    ctx.fillRect(px, rows * rowH, 1, 4);
    ctx.textAlign = s === 0 ? "right" : s === STREAM_WINDOW_S ? "left" : "center";
    ctx.fillText(s === 0 ? "now" : `-${s}s`, px, rows * rowH + 15);
  }
  canvas.dataset.rects = String(drawn);
  canvas.dataset.rows = String(state.rows.size);
}

function streamTooltip() {
  const canvas = document.getElementById("task-stream");
  const tip = document.getElementById("tip");
  if (!canvas || !tip) return;
  canvas.addEventListener("mousemove", ev => {
    const box = canvas.getBoundingClientRect();
    const rowH = streamRowHeight();
    const t0 = Date.now() / 1000 + state.skew - STREAM_WINDOW_S;
    const t = t0 + (ev.clientX - box.left) / box.width * STREAM_WINDOW_S;
    const row = Math.floor((ev.clientY - box.top) / rowH);
    const hit = state.rects.find(r => state.rows.get(r[0]) === row && r[1] <= t + 0.02 &&
                                      r[2] >= t - 0.02);
    if (!hit) { tip.style.display = "none"; return; }
    tip.textContent = `${hit[4]} · ${((hit[2] - hit[1]) * 1e3).toFixed(1)} ms · ${hit[0]}`;
    tip.style.left = ev.clientX + 12 + "px";
    tip.style.top = ev.clientY + 12 + "px";
    tip.style.display = "block";
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
}

// ----- workers page -----------------------------------------------------------------

function renderWorkers(d) {
  const el = document.getElementById("workers-table");
  if (!el) return;
  const workers = d.workers || [];
  if (!workers.length) {
    el.innerHTML = '<div class="empty">no workers</div>';
    return;
  }
  const head = ["worker", "threads", "status", "executing", "ready", "processing",
                "in memory", "memory", "managed", "unmanaged",
                "spilled", "limit", "CPU", "read", "write"];
  el.innerHTML = "<table><thead><tr>" + head.map(h => `<th>${esc(h)}</th>`).join("") +
    "</tr></thead><tbody>" + workers.map(w => {
      const m = w.memory || {};
      const parts = memoryParts(w);
      const total = Math.max(w.memory_limit || 0, parts.reduce((s, p) => s + p[0], 0), 1);
      const link = w.dashboard ? ` <a href="${esc(w.dashboard)}">metrics</a>` : "";
      return `<tr data-worker="${esc(w.address)}"><td title="${esc(w.address)}">` +
        `${esc(w.name)}${w.name !== w.address ? `<br><small>${esc(w.address)}</small>` : ""}` +
        `${link}</td><td>${w.nthreads}</td>` +
        `<td class="${w.status === "paused" ? "paused" : ""}">${esc(w.status)}</td>` +
        `<td>${w.executing ?? 0}</td><td>${w.ready ?? 0}</td><td>${w.processing ?? 0}</td>` +
        `<td>${fmtCount(w.in_memory ?? 0)}</td><td>${bar(parts, total)}</td>` +
        `<td>${fmtBytes(m.managed || 0)}</td><td>${fmtBytes(m.unmanaged || 0)}</td>` +
        `<td>${fmtBytes(m.spilled || 0)}</td>` +
        `<td>${w.memory_limit ? fmtBytes(w.memory_limit) : "none"}</td>` +
        `<td>${(w.cpu || 0).toFixed(0)}%</td>` +
        `<td>${fmtBytes(w.read_bps || 0)}/s</td><td>${fmtBytes(w.write_bps || 0)}/s</td></tr>`;
    }).join("") + "</tbody></table>";
}

// ----- system page ------------------------------------------------------------------

// The system page's figures: (name in the snapshot's health, label, secondary figure).
const HEALTH_FIGURES = [
  ["latency", "event-loop latency", "latency_max", "longest, last 5 s"],
  ["messages_per_second", "messages per second", "messages", "in all"],
  ["tasks_per_second", "tasks computed per second", null, null],
  ["core_seconds_per_second", "time in the core", "core_seconds", "in all"],
  ["tick_seconds", "core time per tick", "ticks", "ticks in all"],
];

function renderHealth(d) {
  const el = document.getElementById("health");
  if (!el) return;
  const health = d.health || {};
  const shown = HEALTH_FIGURES.filter(([k]) => typeof health[k] === "number");
  for (const [k] of shown) {
    const h = state.history[k] || (state.history[k] = []);
    h.push(health[k]);
    if (h.length > HISTORY) h.shift();
  }
  if (!el.dataset.built) {
    el.innerHTML = shown.map(([k, label]) => `<section data-figure="${esc(k)}"><h2>` +
      `${esc(label)}</h2><div class="counts"><div><b></b><span class="sub"></span></div>` +
      '</div><canvas height="60"></canvas></section>').join("");
    el.dataset.built = "1";
  }
  for (const [k, , sub, subLabel] of shown) {
    const box = el.querySelector(`section[data-figure="${CSS.escape(k)}"]`);
    if (!box) continue;
    box.querySelector("b").textContent = fmtFigure(k, health[k]);
    box.querySelector(".sub").textContent =
      sub && typeof health[sub] === "number" ? `${fmtFigure(sub, health[sub])} ${subLabel}` : "";
    spark(box.querySelector("canvas"), state.history[k], k);
  }
}

function spark(canvas, values, name) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = 60;
  canvas.width = Math.round(w * ratio);
  canvas.height = Math.round(h * ratio);
  canvas.style.height = h + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  const top = Math.max(...values, 1e-9);
  ctx.fillStyle = "#eaeef2";
  ctx.fillRect(0, h - 1, w, 1);
  ctx.fillStyle = "#6e7781";
  ctx.font = "10px system-ui, sans-serif";
  ctx.fillText(`max ${fmtFigure(name, top)} · last minute`, 0, 10);
  ctx.strokeStyle = "#2f81f7";
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  values.forEach((v, i) => {
    const px = w - (values.length - 1 - i) * (w / (HISTORY - 1));
    const py = h - 2 - (v / top) * (h - 16);
    if (i) ctx.lineTo(px, py); else ctx.moveTo(px, py);
  });
  ctx.stroke();
}

// ----- polling ----------------------------------------------------------------------

function renderHeader(d) {
  const el = document.getElementById("scheduler");
  if (el) el.textContent = d.scheduler.address;
}

function tickLive() {
  const el = document.getElementById("live");
  if (!el) return;
  const age = Date.now() - state.lastUpdate;
  el.classList.toggle("stale", !state.lastUpdate || age > STALE_MS);
  el.textContent = !state.lastUpdate ? "connecting…"
    : age > STALE_MS ? `no update for ${(age / 1000).toFixed(0)} s` : "live";
  el.dataset.updates = String(state.updates);
  el.dataset.lastUpdate = String(state.lastUpdate);
}

async function poll(page) {
  const wantStream = page === "status";
  const url = `dashboard/data.json?cursor=${wantStream ? state.cursor : -1}`;
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), 5000);
  const asked = performance.now();
  try {
    const r = await fetch(url, {signal: abort.signal, cache: "no-store"});
    if (r.ok) {
      const d = await r.json();
      state.skew = d.now - Date.now() / 1000;
      if (state.lastUpdate) state.longestGap = Math.max(state.longestGap, Date.now() - state.lastUpdate);
      state.lastUpdate = Date.now();
      state.updates++;
      state.states = stackOrder(d.states || []);
      renderHeader(d);
      if (page === "status") {
        renderCounts(d); renderProgress(d); renderGroups(d); renderMemory(d); addStream(d);
      } else if (page === "workers") {
        renderWorkers(d);
      } else {
        renderHealth(d);
      }
      tickLive();
      state.latencies.push(performance.now() - asked);
      if (state.latencies.length > 1000) state.latencies.shift();
    }
  } catch (e) {
    // Unreachable scheduler: the header says how long since the last update.
  } finally {
    clearTimeout(timer);
    setTimeout(() => poll(page), POLL_MS);
  }
}

// The pages: one HTML file, the path says which (docs/dashboard.md#pages).
const PAGES = {
  status: {title: "status", figures: false, main: `
    <section class="wide"><h2>Tasks</h2><div class="counts" id="counts"></div></section>
    <section class="wide">
      <h2>Task stream <span class="note" id="stream-note"></span></h2>
      <canvas id="task-stream" height="40"></canvas>
    </section>
    <section><h2>Progress by task prefix</h2><div id="progress"></div></section>
    <section><h2>Memory and work per worker</h2><div id="memory"></div></section>
    <section class="wide"><h2>Task groups</h2><div id="groups"></div></section>`},
  workers: {title: "workers", figures: false, main: `
    <section class="wide"><h2>Workers</h2><div id="workers-table"></div></section>`},
  system: {title: "scheduler health", figures: true, main: ""},  // renderHealth fills it
};

function start() {
  // the last segment: the pages are served under the dashboard prefix, if any
  const path = location.pathname.replace(/\/+$/, "").split("/").pop();
  const page = path in PAGES ? path : "status";
  const main = document.getElementById("main");
  main.innerHTML = PAGES[page].main;
  if (PAGES[page].figures) {
    main.classList.add("figures");
    main.id = "health";
  }
  document.title = `squall · ${PAGES[page].title}`;
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("current", a.getAttribute("href") === page);
  }
  poll(page);
  setInterval(tickLive, 250);
  if (page === "status") {
    streamTooltip();
    setInterval(drawStream, DRAW_MS);
  }
}

// For benchmarks and tests: how live the page has been.
function stats() {
  return {updates: state.updates, latencies_ms: state.latencies.slice(),
          longest_gap_ms: state.longestGap};
}

window.squallDashboard = {start, stats};
