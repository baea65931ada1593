// The bus dashboard's pages: hand-written, no framework, no network but this server.
// Every text from Redis goes into the page through textContent (never innerHTML), so a
// message body or header cannot inject markup.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const REFRESH_MS = Number(document.querySelector('meta[name="refresh-ms"]').content) || 2000;
const app = document.getElementById("app");
const SVG = "http://www.w3.org/2000/svg";

const SERIES = [
  { key: "ready", label: "Ready", color: "var(--ready)" },
  { key: "in_flight", label: "In flight", color: "var(--inflight)" },
  { key: "expired", label: "Expired locks", color: "var(--expired)" },
  { key: "delayed", label: "Delayed", color: "var(--delayed)" },
  { key: "dead", label: "Dead", color: "var(--dead)" },
];

// ---- small helpers ---------------------------------------------------------------

/** Builds an element: h("td", {class: "num"}, "3"). Children: nodes, strings, arrays. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function s(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}

const fmt = new Intl.NumberFormat("en");
function num(n) { return n === null || n === undefined ? "–" : fmt.format(n); }
function rate(r) { return r >= 100 ? fmt.format(Math.round(r)) : r.toFixed(r >= 10 ? 1 : 2); }

function age(ms) {
  if (ms === null || ms === undefined) return "–";
  const sec = ms / 1000;
  if (sec < 1) return `${Math.round(ms)} ms`;
  if (sec < 60) return `${sec < 10 ? sec.toFixed(1) : Math.floor(sec)} s`;
  // Whole units, floored: "59 min 59 s", never "59 min 60 s".
  if (sec < 3600) return `${Math.floor(sec / 60)} min ${Math.floor(sec % 60)} s`;
  if (sec < 86400) return `${Math.floor(sec / 3600)} h ${Math.floor((sec % 3600) / 60)} min`;
  return `${Math.floor(sec / 86400)} d ${Math.floor((sec % 86400) / 3600)} h`;
}

function when(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString("en-GB") : d.toLocaleString("en-GB");
}

function relative(ms, now) {
  if (!ms) return "–";
  const diff = ms - (now || Date.now());
  return diff >= 0 ? `in ${age(diff)}` : `${age(-diff)} ago`;
}

function enc(name) { return encodeURIComponent(name); }

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function post(url, payload) {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json", "x-csrf-token": CSRF },
    body: JSON.stringify(payload),
  });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function toast(text, bad) {
  const el = h("div", { class: bad ? "toast bad" : "toast", role: "status" }, text);
  document.getElementById("toasts").append(el);
  setTimeout(() => el.remove(), bad ? 8000 : 4000);
}

/** Asks before a destructive action; resolves true when confirmed. */
function confirmAction(title, text, okLabel, danger = true) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  const ok = document.getElementById("confirm-ok");
  ok.textContent = okLabel || "Confirm";
  ok.className = danger ? "btn btn-danger" : "btn btn-primary";
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

function setLive(ok, text) {
  const live = document.getElementById("live");
  live.className = ok ? "live ok" : "live error";
  document.getElementById("live-text").textContent = text;
}

/** What the overview says a queue of another kind is (`<kind>:<queue>` names). */
const KINDS = { babel: "BabelQueue", laravel: "BabelQueue · Laravel" };

function queueTitle(name) {
  const colon = name.indexOf(":");
  if (colon > 0) {
    const kind = name.slice(0, colon);
    return [h("span", { class: "qname" }, name.slice(colon + 1)), h("span", { class: "kind", "data-kind": kind }, KINDS[kind] || kind)];
  }
  const slash = name.indexOf("/");
  if (slash < 0) return [h("span", { class: "qname" }, name), h("span", { class: "kind" }, "queue")];
  return [
    h("span", { class: "qname" }, h("span", { class: "topic" }, name.slice(0, slash) + " / "), name.slice(slash + 1)),
    h("span", { class: "kind" }, "subscription"),
  ];
}

// ---- charts ----------------------------------------------------------------------

/** The time window of a plot: the last `span`, or less while the server has sampled for
 *  less than that (so a fresh dashboard's plots fill their width). */
function windowOf(points, now, span, minimum) {
  const first = points.length ? points[0].t : now;
  return Math.min(span, Math.max(minimum || 0, now - first));
}

function ago(ms) {
  if (ms < 1000) return "now";
  return ms >= 60000 ? `−${Math.round(ms / 60000)} min` : `−${Math.round(ms / 1000)} s`;
}

/** A line chart of `series` over the window ending now: grid, y scale, time axis. */
function lineChart(points, series, opts) {
  const W = opts.width || 440, H = opts.height || 160, L = 34, R = 6, T = 8, B = 20;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": opts.label || "chart" });
  const width = opts.window;
  const t1 = opts.now, t0 = t1 - width;
  let max = 0;
  for (const p of points) for (const se of series) if (p.t >= t0) max = Math.max(max, p[se.key] || 0);
  max = niceMax(max);
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / max) * (H - T - B);
  const rows = opts.rows || 2;
  for (let i = 0; i <= rows; i++) {
    const v = (max * i) / rows;
    svg.append(s("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    const label = s("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "axis" });
    label.textContent = compact(v);
    svg.append(label);
  }
  [[t0, "start"], [t0 + width / 2, "middle"], [t1, "end"]].forEach(([t, anchor]) => {
    const label = s("text", { x: x(t), y: H - 5, "text-anchor": anchor, class: "axis" });
    label.textContent = ago(t1 - t);
    svg.append(label);
  });
  for (const se of series) {
    const visible = points.filter((p) => p.t >= t0);
    if (visible.length === 0) continue;
    if (visible.length === 1) {
      // One point has no line yet: a dot, so the plot is not empty.
      const dot = s("circle", { cx: x(visible[0].t).toFixed(1), cy: y(visible[0][se.key] || 0).toFixed(1), r: 2, class: "series-dot" });
      dot.style.fill = se.color;
      svg.append(dot);
      continue;
    }
    const d = visible.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p[se.key] || 0).toFixed(1)}`).join("");
    const path = s("path", { d, class: "series" });
    path.style.stroke = se.color;
    svg.append(path);
  }
  return svg;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function compact(v) {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return `${+v.toFixed(v < 10 && v % 1 ? 1 : 0)}`;
}

function sparkline(points, key, color, now, span) {
  const W = 140, H = 28;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "spark", "aria-hidden": "true" });
  const t0 = now - span;
  const visible = points.filter((p) => p.t >= t0);
  const max = Math.max(1, ...visible.map((p) => p[key] || 0));
  if (visible.length > 0) {
    const d = visible.map((p, i) => `${i ? "L" : "M"}${(((p.t - t0) / span) * W).toFixed(1)},${(H - 2 - ((p[key] || 0) / max) * (H - 4)).toFixed(1)}`).join("");
    const path = s("path", { d, fill: "none", "stroke-width": 1.5 });
    path.style.stroke = color;
    svg.append(path);
  }
  return svg;
}

function legend(series) {
  return h("div", { class: "legend" }, series.map((se) => {
    const i = h("i");
    i.style.setProperty("--c", se.color);
    return h("span", {}, i, se.label);
  }));
}

// ---- pages -----------------------------------------------------------------------

let timer = null;
let renderId = 0;
let lastShown = null;

/** Whether a refresh brought nothing new (then the page is left as it is, so a click
 *  or a selection in progress is not lost to a redraw). */
function unchanged(id, data) {
  const text = `${id}:${JSON.stringify(data)}`;
  if (text === lastShown) return true;
  lastShown = text;
  return false;
}

/** Redraws on the next refresh even if nothing changed (after the operator's action). */
function redraw() { lastShown = null; }

function schedule(fn) {
  clearTimeout(timer);
  timer = setTimeout(fn, REFRESH_MS);
}

/** Runs a page's loader now and again every REFRESH_MS while the page stays open. */
function livePage(load) {
  const id = ++renderId;
  const tick = async () => {
    if (id !== renderId) return;
    if (document.getElementById("confirm").open) return schedule(tick);
    try {
      await load(id);
      setLive(true, "live");
    } catch (error) {
      setLive(false, "offline");
      showError(error);
    }
    if (id === renderId) schedule(tick);
  };
  tick();
}

function showError(error) {
  let box = document.getElementById("page-error");
  if (!box) {
    box = h("div", { class: "error-box", id: "page-error" });
    app.prepend(box);
  }
  box.textContent = `Cannot load this page: ${error.message}`;
}

/** Shows a page's new content; what the operator had opened stays open across refreshes. */
function replace(id, node) {
  if (id !== renderId) return;
  const open = new Set([...app.querySelectorAll("details[data-key][open]")].map((d) => d.dataset.key));
  node.querySelectorAll("details[data-key]").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
  app.replaceChildren(node);
}

function tile(label, value, cls, unit) {
  return h("div", { class: `card tile ${cls}` }, h("div", { class: "label" }, label),
    h("div", { class: "value", "data-tile": cls }, value, unit ? h("span", { class: "unit" }, unit) : null));
}

/** The ready count, and beside it the messages waiting for their key (per-key ordering). */
function keyedCell(q) {
  const cell = countCell(q.ready);
  if (q.keyed) cell.append(" ", h("span", { class: "muted", "data-keyed": q.name, title: "waiting for their key (per-key ordering)" }, `+${num(q.keyed)} keyed`));
  return cell;
}

function countCell(n, cls) {
  const zero = !n;
  const inner = !zero && cls ? h("span", { class: `pill ${cls}` }, num(n)) : num(n);
  return h("td", { class: zero ? "num zero" : "num" }, inner);
}

async function overview(id) {
  // Health is a banner: the overview shows even when its checks cannot be read.
  const [data, health] = await Promise.all([getJson("/api/overview"), healthNow(false).catch(() => null)]);
  const queues = data.queues;
  const sum = (k) => queues.reduce((a, q) => a + (q[k] || 0), 0);
  const totalRate = queues.reduce((a, q) => a + q.rate, 0);
  const span = data.history_ms;
  // How long the server has sampled (its first sample, not a plot's width), and the
  // plots' window: that time, at least two refreshes wide so a fresh line has a length.
  const sampledFor = data.sampling_since_ms === null ? 0 : Math.max(0, data.now_ms - data.sampling_since_ms);
  const minWindow = Math.min(span, Math.max(sampledFor, 2 * REFRESH_MS));
  const tiles = h("div", { class: "tiles" },
    tile("Ready", num(sum("ready")), "c-ready"),
    tile("In flight", num(sum("in_flight")), "c-inflight"),
    tile("Expired locks", num(sum("expired_locks")), "c-expired"),
    tile("Delayed", num(sum("delayed")), "c-delayed"),
    tile("Dead letters", num(sum("dead")), "c-dead"),
    tile("Processed", rate(totalRate), "c-rate", "msg/s"),
    // Per-key ordering's backlog: shown once some queue has messages waiting for their key.
    sum("keyed") ? tile("Waiting for their key", num(sum("keyed")), "c-keyed") : null);

  const rows = queues.map((q) => h("tr", { "data-queue": q.name },
    h("td", {}, h("a", { href: `#/queue/${enc(q.name)}` }, queueTitle(q.name)),
      q.paused ? h("span", { class: "badge badge-paused", "data-paused": q.name }, "paused") : null),
    keyedCell(q), countCell(q.in_flight), countCell(q.expired_locks, "pill-expired"),
    countCell(q.delayed),
    h("td", { class: q.dead ? "num" : "num zero" }, q.dead
      ? h("a", { href: `#/dead/${enc(q.name)}`, class: "pill pill-dead", "data-dead-link": q.name }, num(q.dead))
      : "0"),
    h("td", { class: "num" }, age(q.oldest_ready_age_ms)),
    // Another kind (BabelQueue's) keeps no counter a rate could be derived from.
    h("td", { class: "num" }, q.kind === "bus" ? rate(q.rate) : "–"),
    h("td", {}, sparkline(q.history, "ready", "var(--ready)", data.now_ms, windowOf(q.history, data.now_ms, span, minWindow)))));
  const table = h("section", { class: "card section" },
    h("div", { class: "section-head" }, h("h2", {}, "Queues and subscriptions"),
      h("span", { class: "hint" }, `${queues.length} found · counts read from Redis every ${REFRESH_MS / 1000} s`)),
    queues.length === 0
      ? h("div", { class: "empty" }, "No queue or subscription is registered under this prefix yet (consumers register theirs when they start), and no BabelQueue queue was found.")
      : h("table", { id: "queues" },
        h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", { class: "num" }, "Ready"), h("th", { class: "num" }, "In flight"),
          h("th", { class: "num" }, "Expired locks"), h("th", { class: "num" }, "Delayed"), h("th", { class: "num" }, "Dead"),
          h("th", { class: "num" }, "Oldest ready"), h("th", { class: "num" }, "Processed/s"), h("th", {}, "Ready, last hour"))),
        h("tbody", {}, rows)));

  const charts = h("section", {},
    h("div", { class: "section-head" }, h("h2", {}, sampledFor < span ? `Since sampling began (${age(sampledFor)} ago)` : `Last ${age(span)}`),
      h("span", { class: "hint" }, `sampled by the server every ${data.sample_interval_ms / 1000} s, kept for ${age(span)}`)),
    h("div", { class: "charts" }, queues.map((q) => h("div", { class: "card chart-card" },
      h("h3", {}, h("span", {}, q.name), h("span", { class: "hint" }, `${rate(q.rate)} msg/s`)),
      lineChart(q.history, SERIES, { now: data.now_ms, window: windowOf(q.history, data.now_ms, span, minWindow), label: `${q.name} counts` }),
      legend(SERIES),
      lineChart(q.history, [{ key: "rate", label: "Processed/s", color: "var(--rate)" }],
        { now: data.now_ms, window: windowOf(q.history, data.now_ms, span, minWindow), height: 84, rows: 1, label: `${q.name} processing rate` }),
      legend([{ label: "Processed per second", color: "var(--rate)" }])))));

  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Overview"),
      h("div", { class: "sub" }, `Every queue and subscription under prefix “${data.prefix}”` +
        (queues.some((q) => q.kind !== "bus") ? ", and the BabelQueue queues found" : "")))),
    healthBanner(health), tiles, table, queues.length ? charts : null));
}

function envelopeDetails(m, extra) {
  const msg = m.message;
  const errors = m.errors || [];
  const meta = h("dl", { class: "kv" },
    h("dt", {}, "Message id"), h("dd", { class: "mono" }, msg ? msg.id : "–"),
    h("dt", {}, "Type"), h("dd", {}, msg ? msg.type : "–"),
    h("dt", {}, "Sent"), h("dd", {}, msg ? when(msg.sent_at_ms) : "–"),
    h("dt", {}, "Format"), h("dd", {}, msg ? msg.format : "–"),
    h("dt", {}, "Storage id"), h("dd", { class: "mono" }, m.storage_id || "(fresh envelope)"),
    h("dt", {}, "Deliveries"), h("dd", {}, num(m.delivery_count)),
    h("dt", {}, "Attachment"), h("dd", {}, attachmentOf(msg)),
    extra || []);
  const headers = msg && Object.keys(msg.headers).length
    ? h("dl", { class: "kv" }, Object.entries(msg.headers).map(([k, v]) => [h("dt", { class: "mono" }, k), h("dd", { class: "mono" }, v)]))
    : h("div", { class: "muted" }, "No headers");
  const body = msg ? prettyBody(msg.body) : (m.decode_error || "not readable");
  return h("div", { class: "msg-body" },
    h("div", {}, h("h3", {}, "Envelope"), meta, h("h3", { class: "spaced" }, "Headers"), headers),
    h("div", {}, h("h3", {}, "Body"), h("pre", {}, body),
      h("h3", { class: "spaced" }, `Error history (${errors.length})`),
      errors.length
        ? h("ol", { class: "errors" }, errors.map((e) => h("li", {}, h("time", {}, when(Number(e.at_ms))), e.message)))
        : h("div", { class: "muted" }, "No errors")));
}

// The attachment the bus-attachments layer names in the `bus-attachment` header (JSON:
// id, scope, name, content_type, length): stored beside the message, not in it. The
// download link serves the Redis provider's copy (an object store's answers 404).
function attachmentOf(msg) {
  const header = msg && msg.headers["bus-attachment"];
  if (!header) return "none";
  try {
    const a = JSON.parse(header);
    const href = `/api/attachment?scope=${encodeURIComponent(a.scope)}&id=${encodeURIComponent(a.id)}`;
    return [`${a.name} (${a.content_type}, ${byteSize(Number(a.length))}) `,
      h("a", { href, download: a.name, "data-attachment-download": "" }, "download")];
  } catch (_) { return "unreadable bus-attachment header"; }
}

function byteSize(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

function prettyBody(body) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
}

function messageList(items, columns, now) {
  if (items.length === 0) return h("div", { class: "empty" }, "Nothing here.");
  return h("div", {},
    h("div", { class: "msg-head" }, columns.map((c) => h("span", {}, c.label))),
    items.map((m) => h("details", { class: "msg", "data-key": m.storage_id || (m.message && m.message.id) || "" },
      h("summary", {}, columns.map((c) => h("span", { class: c.cls || "" }, c.value(m, now)))),
      envelopeDetails(m, columns.extra ? columns.extra(m, now) : null))));
}

const queueTabs = { current: "ready" };

async function queuePage(id, name) {
  const [q, keys] = await Promise.all([getJson(`/api/queue?name=${enc(name)}`), getJson(`/api/queue/keys?name=${enc(name)}`)]);
  const now = q.snapshot.at_ms;
  const idCell = (m) => h("span", { class: "mono" }, m.message ? m.message.id : (m.storage_id || "?"));
  const typeCell = (m) => (m.message ? m.message.type : h("span", { class: "warn" }, "unreadable"));
  const errCell = (m) => ((m.errors || []).length ? h("span", { class: "warn" }, `${m.errors.length} errors`) : h("span", { class: "muted" }, "none"));
  const lists = {
    ready: { label: "Next ready", hint: "in processing order", items: q.ready, columns: [
      { label: "#", value: (m) => m.position + 1 }, { label: "Message", value: idCell }, { label: "Type", value: typeCell },
      { label: "Sent", value: (m) => (m.message ? relative(m.message.sent_at_ms, now) : "–") },
      { label: "Deliveries", value: (m) => num(m.delivery_count) }, { label: "Errors", value: errCell }] },
    scheduled: { label: "Scheduled", hint: "earliest due first", items: q.scheduled, columns: [
      { label: "#", value: (m, _n) => q.scheduled.indexOf(m) + 1 }, { label: "Message", value: idCell }, { label: "Type", value: typeCell },
      { label: "Due", value: (m) => `${when(m.due_at_ms)} (${relative(m.due_at_ms, now)})` },
      { label: "Deliveries", value: (m) => num(m.delivery_count) }, { label: "Errors", value: errCell },
      { label: "", value: (m) => cancelButton(name, m, () => queuePage(id, name).catch(showError)) }] },
    in_flight: { label: "In flight", hint: "earliest lock deadline first", items: q.in_flight, columns: [
      { label: "#", value: (m) => q.in_flight.indexOf(m) + 1 }, { label: "Message", value: idCell }, { label: "Type", value: typeCell },
      { label: "Lock deadline", value: (m) => (m.lock_deadline_ms < now
        ? h("span", { class: "warn" }, `expired ${age(now - m.lock_deadline_ms)} ago`)
        : `${when(m.lock_deadline_ms)} (${relative(m.lock_deadline_ms, now)})`) },
      { label: "Deliveries", value: (m) => num(m.delivery_count) }, { label: "Errors", value: errCell }] },
  };
  // Another kind's queue (BabelQueue's) shows its next messages only.
  if (q.snapshot.kind !== "bus") { delete lists.scheduled; delete lists.in_flight; }
  else lists.in_flight.columns.extra = (m) => [h("dt", {}, "Lock deadline"), h("dd", {}, when(m.lock_deadline_ms))];
  if (lists.scheduled) lists.scheduled.columns.extra = (m) => [h("dt", {}, "Due"), h("dd", {}, when(m.due_at_ms))];
  const current = lists[queueTabs.current] ? queueTabs.current : "ready";
  const list = lists[current];
  const body = messageList(list.items, list.columns, now);
  if (current === "scheduled") body.classList.add("scheduled-list");
  const snap = q.snapshot;
  const tabs = h("div", { class: "tabs" }, Object.entries(lists).map(([key, l]) => h("button", {
    class: key === current ? "active" : "", type: "button", "data-tab": key,
    onclick: () => { queueTabs.current = key; app.querySelectorAll("details.msg").forEach((d) => { d.open = false; }); queuePage(id, name).catch(showError); },
  }, l.label, h("span", { class: "count" }, num(key === "ready" ? snap.ready : key === "scheduled" ? snap.delayed : snap.in_flight)))));
  replace(id, h("div", {},
    h("div", { class: "page-head" },
      h("div", {}, h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / queue"),
        h("h1", {}, queueTitle(name), snap.paused ? h("span", { class: "badge badge-paused", id: "paused-badge" }, "paused") : null),
        h("div", { class: "sub" }, snap.oldest_ready_age_ms !== null ? `Oldest ready message: ${age(snap.oldest_ready_age_ms)} old` : "Nothing waiting")),
      h("div", { class: "head-actions" }, q.flow ? flowButton(id, name, snap.paused) : null,
        snap.kind === "bus" ? h("a", { class: "btn", href: `#/search/${enc(name)}`, "data-action": "search" }, "Search") : null,
        snap.dead ? h("a", { class: "btn btn-danger", href: `#/dead/${enc(name)}` }, `Dead letters (${num(snap.dead)})`) : null)),
    q.flow ? flowLine(q.flow, q.breakers, breakerButton(id, name)) : null,
    h("div", { class: "tiles" },
      tile("Ready", num(snap.ready), "c-ready"), tile("In flight", num(snap.in_flight), "c-inflight"),
      tile("Expired locks", num(snap.expired_locks), "c-expired"), tile("Delayed", num(snap.delayed), "c-delayed"),
      tile("Dead letters", num(snap.dead), "c-dead"), tile("Oldest ready", age(snap.oldest_ready_age_ms), "c-rate"),
      snap.kind === "bus" ? tile("Keyed", num(snap.keyed), "c-keyed") : null),
    keyBacklogs(keys),
    h("section", { class: "card section" }, tabs,
      h("div", { class: "section-head" }, h("span", { class: "hint" }, `${list.hint}; the first ${q.limit} at most`)),
      body)));
}

/** Per-key ordering: the keys with the most messages waiting for them (none: no section). */
function keyBacklogs(backlogs) {
  if (!backlogs.keys.length) return null;
  return h("section", { class: "card section", id: "key-backlogs" },
    h("div", { class: "section-head" }, h("h2", {}, "Keys with the most waiting"),
      h("span", { class: "hint" }, backlogs.complete ? "per-key ordering; every key looked at" : "per-key ordering; the first keys looked at only (many keys)")),
    h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "Key"), h("th", { class: "num" }, "Waiting"), h("th", { class: "num" }, "In flight"))),
      h("tbody", {}, backlogs.keys.map((k) => h("tr", { "data-key": k.key },
        h("td", { class: "mono" }, k.key), countCell(k.waiting), countCell(k.in_flight))))));
}

/** Pause or resume a queue (flow control): hidden in read-only mode, refused there too. */
function flowButton(id, name, paused) {
  const action = paused ? "resume" : "pause";
  const run = async () => {
    const ok = await confirmAction(paused ? `Resume ${name}?` : `Pause ${name}?`,
      paused ? "Consumers on every host reserve its messages again within a second."
        : "Consumers on every host stop reserving its messages within a second; running handlers finish and sends still enqueue.",
      paused ? "Resume" : "Pause", !paused);
    if (!ok) return;
    await post(`/api/queue/${action}`, { name });
    toast(paused ? `Resumed ${name}` : `Paused ${name}`);
    redraw();
    queuePage(id, name).catch(showError);
  };
  return h("button", { class: paused ? "btn btn-primary" : "btn", type: "button", id: `${action}-queue`, "data-action": action,
    onclick: (event) => { event.preventDefault(); run().catch((e) => toast(e.message, true)); } }, paused ? "Resume" : "Pause");
}

/** Closes a queue's fleet circuit breaker by hand: hidden in read-only mode, refused there too. */
function breakerButton(id, name) {
  const run = async () => {
    const ok = await confirmAction(`Close the circuit breaker of ${name}?`,
      "Consumers on every host take its messages again at once, with no probe. Do this when its downstream is known to be back.",
      "Close breaker");
    if (!ok) return;
    await post("/api/queue/close-breaker", { name });
    toast(`Closed the circuit breaker of ${name}`);
    redraw();
    queuePage(id, name).catch(showError);
  };
  return h("button", { class: "btn btn-sm", type: "button", id: "close-breaker", "data-action": "close-breaker",
    onclick: (event) => { event.preventDefault(); run().catch((e) => toast(e.message, true)); } }, "Close");
}

/** The queue's flow control and its hosts' circuit breakers, in one line; `closeButton`
 * beside a fleet-wide breaker that is open. */
function flowLine(flow, breakers, closeButton) {
  const item = (label, value, attrs) => h("span", Object.assign({ class: "flow-item" }, attrs || {}), h("span", { class: "muted" }, `${label}: `), value);
  const limit = flow.concurrency === null ? "none" : `${num(flow.concurrency)} in flight`;
  const rateLimit = flow.rate === null ? "none" : `${num(flow.rate.starts)} per ${age(flow.rate.per_ms)}`;
  const open = breakers.filter((b) => b.state !== "closed");
  const hostBreakers = breakers.length === 0 ? "none"
    : open.length === 0 ? `closed on ${breakers.length} host${breakers.length === 1 ? "" : "s"}`
      : open.map((b) => h("span", { class: `badge badge-breaker-${b.state}`, title: b.host }, `${b.state} on ${b.host.split(":")[0]}`));
  // A fleet-scoped breaker is stored with the queue: open on every host until then.
  const until = flow.breaker_until_ms;
  const breaker = until === null || until === undefined ? hostBreakers
    : [h("span", { class: "badge badge-breaker-open", "data-fleet-breaker": String(until) },
      `open on every host until ${when(until)}`), " ", closeButton, " ", hostBreakers];
  return h("div", { class: "flow-line", id: "flow" },
    item("State", flow.paused ? h("span", { class: "warn" }, "paused") : "consuming", { "data-flow": "state" }),
    item("Concurrency limit", limit, { "data-flow": "concurrency" }),
    item("Rate limit", rateLimit, { "data-flow": "rate" }),
    item("Circuit breaker", breaker, { "data-flow": "breaker" }));
}

/** Cancels a scheduled message after confirmation (`POST /api/scheduled/cancel`, audited). */
function cancelButton(name, m, then) {
  const sid = m.storage_id;
  const cancel = async (event) => {
    event.preventDefault();
    const ok = await confirmAction("Cancel this scheduled message?",
      `Message ${m.message ? m.message.id : sid} due ${when(m.due_at_ms)} is removed from ${name} and never delivered.`, "Cancel message");
    if (!ok) return;
    try {
      const done = await post("/api/scheduled/cancel", { name, id: sid });
      toast(done.cancelled ? "Scheduled message cancelled" : "It was no longer scheduled (delivered or cancelled already)");
      redraw();
      then();
    } catch (e) { toast(e.message, true); }
  };
  return h("span", { class: "actions" }, h("button", { class: "btn btn-sm btn-danger", type: "button", "data-action": "cancel-scheduled", onclick: cancel }, "Cancel"));
}

const deadState = { open: new Set(), target: "" };

async function deadPage(id, name) {
  const d = await getJson(`/api/dead-letters?name=${enc(name)}`);
  if (unchanged(id, { d, open: [...deadState.open], target: deadState.target })) return;
  const target = () => (deadState.target && deadState.target !== name ? deadState.target : null);
  const targetName = () => target() || name;
  const act = async (what, ids, all) => {
    const count = all ? d.total : ids.length;
    const plural = `${num(count)} dead letter${count === 1 ? "" : "s"}`;
    if (what === "requeue") {
      const ok = await confirmAction(`Requeue ${plural}?`,
        `They go to the back of the ready list of ${targetName()} and will be processed again` +
        (target() ? ` there (removed from ${name}).` : "."), "Requeue", false);
      if (!ok) return;
      const done = await post("/api/dead-letters/requeue", { name, ids: all ? [] : ids, all: !!all, to: target() });
      toast(`Requeued ${num(done.requeued.length)} to ${done.target}` +
        (done.not_found.length ? `; ${done.not_found.length} were already gone` : ""));
    } else {
      const ok = await confirmAction(`Delete ${plural}?`, "They are removed for good, with their error history. This cannot be undone.", "Delete");
      if (!ok) return;
      const done = await post("/api/dead-letters/delete", { name, ids });
      toast(`Deleted ${num(done.deleted.length)}` + (done.not_found.length ? `; ${done.not_found.length} were already gone` : ""));
    }
    redraw();
    deadPage(id, name).catch(showError);
  };
  const guarded = (fn) => (event) => { event.preventDefault(); fn().catch((e) => toast(e.message, true)); };
  const byId = new Map(d.letters.map((l) => [l.storage_id, l]));

  const select = h("select", { id: "requeue-target", onchange: (e) => { deadState.target = e.target.value; } },
    h("option", { value: "" }, `${name} (same queue)`),
    d.targets.filter((t) => t !== name).map((t) => h("option", { value: t, selected: t === deadState.target }, t)));
  const groups = d.groups.map((g) => {
    const open = deadState.open.has(g.key);
    const letters = open ? h("div", { class: "group-letters letters" },
      h("div", { class: "msg-head" }, ["#", "Message", "Type", "Dead-lettered", "Deliveries", ""].map((c) => h("span", {}, c))),
      g.ids.map((sid, i) => {
        const l = byId.get(sid);
        return h("details", { class: "msg", "data-letter": sid, "data-key": sid },
          h("summary", {},
            h("span", {}, i + 1),
            h("span", { class: "mono" }, l.message ? l.message.id : sid),
            h("span", {}, l.message ? l.message.type : h("span", { class: "warn" }, "unreadable")),
            h("span", {}, when(l.dead_lettered_at_ms)),
            h("span", {}, num(l.delivery_count)),
            h("span", { class: "actions" },
              h("button", { class: "btn btn-sm", type: "button", "data-action": "requeue-one", onclick: guarded(() => act("requeue", [sid])) }, "Requeue"),
              h("button", { class: "btn btn-sm btn-danger", type: "button", "data-action": "delete-one", onclick: guarded(() => act("delete", [sid])) }, "Delete"),
              name.includes(":") ? null : h("a", { class: "btn btn-sm", href: `#/edit/${enc(name)}/${enc(sid)}`, "data-action": "edit-one" }, "Edit"))),
          envelopeDetails(l, [h("dt", {}, "Reason"), h("dd", {}, l.reason || "–"), h("dt", {}, "Dead-lettered"), h("dd", {}, when(l.dead_lettered_at_ms))]));
      })) : null;
    return h("div", { class: open ? "group open" : "group", "data-group": g.key },
      h("div", { class: "group-head" },
        h("div", {},
          h("div", { class: "group-title" },
            h("span", { class: "group-count", "data-group-count": "" }, num(g.count)),
            h("span", { class: `badge badge-${g.reason || "none"}` }, g.reason || "no reason"),
            h("span", { class: "group-error" }, g.example)),
          h("div", { class: "group-meta" }, `Grouped as “${g.error}” · first ${when(g.first_ms)} · last ${when(g.last_ms)}`)),
        h("div", { class: "actions" },
          h("button", { class: "btn toggle", type: "button", "data-action": "open-group",
            onclick: () => { if (open) deadState.open.delete(g.key); else deadState.open.add(g.key); deadPage(id, name).catch(showError); } },
          open ? "Hide messages" : "Show messages"),
          h("button", { class: "btn btn-primary", type: "button", "data-action": "requeue-group", onclick: guarded(() => act("requeue", g.ids)) }, "Requeue group"),
          h("button", { class: "btn btn-danger", type: "button", "data-action": "delete-group", onclick: guarded(() => act("delete", g.ids)) }, "Delete group"))),
      letters);
  });
  replace(id, h("div", {},
    h("div", { class: "page-head" },
      h("div", {}, h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / ", h("a", { href: `#/queue/${enc(name)}` }, name), " / dead letters"),
        h("h1", {}, "Dead letters of ", queueTitle(name)),
        h("div", { class: "sub", id: "dead-total" }, `${num(d.total)} dead letters` + (d.read < d.total ? ` · the oldest ${num(d.read)} are grouped here` : "") +
          ` · grouped by reason and last error`),
        reasonCounts(d.groups)),
      h("div", { class: "toolbar" },
        name.includes(":") ? null : h("a", { class: "btn", href: `#/search/${enc(name)}`, "data-action": "search" }, "Search"),
        h("label", { class: "inline", for: "requeue-target" }, "Requeue to", select),
        d.total ? h("button", { class: "btn btn-primary", type: "button", "data-action": "requeue-all", onclick: guarded(() => act("requeue", [], true)) }, `Requeue all ${num(d.total)}`) : null)),
    h("section", { class: "card section" },
      h("div", { class: "section-head" }, h("h2", {}, `${d.groups.length} group${d.groups.length === 1 ? "" : "s"}`),
        h("span", { class: "hint" }, "Numbers in error messages are masked (#) when grouping")),
      d.groups.length ? groups : h("div", { class: "empty" }, "No dead letters. 🎉"))));
}

/** How many dead letters (of those read) each reason holds: expired, rejected, ... */
function reasonCounts(groups) {
  const by = new Map();
  for (const g of groups) by.set(g.reason || "none", (by.get(g.reason || "none") || 0) + g.count);
  if (by.size === 0) return null;
  return h("div", { class: "reasons", id: "dead-reasons" }, "By reason: ", [...by.entries()].sort((a, b) => b[1] - a[1]).map(([reason, count]) =>
    h("span", { class: `badge badge-${reason}`, "data-reason": reason, "data-reason-count": count }, `${reason} ${num(count)}`)));
}

async function sagasPage(id, partition) {
  const list = await getJson(`/api/sagas${partition ? `?partition=${enc(partition)}` : ""}`);
  const filter = h("input", { type: "text", id: "saga-partition", placeholder: "all partitions", value: partition || "" });
  const form = h("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); location.hash = `#/sagas/${enc(filter.value.trim())}`; } },
    h("label", { class: "inline", for: "saga-partition" }, "Partition", filter), h("button", { class: "btn", type: "submit" }, "Filter"));
  const rows = list.map((sg) => h("tr", { "data-saga": sg.key },
    h("td", {}, sg.partition), h("td", { class: "mono" }, h("a", { href: `#/saga/${enc(sg.partition)}/${enc(sg.id)}` }, sg.id)),
    h("td", { class: "num" }, sg.ttl_ms === null ? "no expiry" : age(sg.ttl_ms)), h("td", { class: "mono muted" }, sg.key),
    h("td", {}, h("div", { class: "actions" }, h("a", { class: "btn btn-sm", href: `#/saga/${enc(sg.partition)}/${enc(sg.id)}` }, "Show"),
      h("button", { class: "btn btn-sm btn-danger", type: "button", "data-action": "delete-saga", onclick: () => deleteSaga(sg.partition, sg.id, () => sagasPage(id, partition)) }, "Delete")))));
  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Sagas"), h("div", { class: "sub" }, "Found with SCAN, never KEYS")), form),
    h("section", { class: "card section" },
      list.length ? h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Partition"), h("th", {}, "Id"), h("th", { class: "num" }, "Expires in"), h("th", {}, "Key"), h("th", {}))), h("tbody", {}, rows))
        : h("div", { class: "empty" }, "No sagas."))));
}

async function deleteSaga(partition, sagaId, then) {
  const ok = await confirmAction("Delete this saga?", `Saga ${partition}/${sagaId} and its state are removed for good; its next message starts it again or fails.`, "Delete");
  if (!ok) return;
  try {
    const done = await post("/api/sagas/delete", { partition, id: sagaId });
    toast(done.existed ? "Saga deleted" : "It was already gone");
    then();
  } catch (e) { toast(e.message, true); }
}

async function sagaPage(id, partition, sagaId) {
  const sg = await getJson(`/api/saga?partition=${enc(partition)}&id=${enc(sagaId)}`);
  replace(id, h("div", {},
    h("div", { class: "page-head" },
      h("div", {}, h("div", { class: "crumbs" }, h("a", { href: "#/sagas" }, "Sagas"), ` / ${partition}`), h("h1", { class: "mono" }, sagaId)),
      sg.exists ? h("button", { class: "btn btn-danger", type: "button", "data-action": "delete-saga", onclick: () => deleteSaga(partition, sagaId, () => { location.hash = "#/sagas"; }) }, "Delete saga") : null),
    h("section", { class: "card section" }, sg.exists
      ? h("div", { class: "msg-body flat" },
        h("div", {}, h("h3", {}, "Saga"), h("dl", { class: "kv" },
          h("dt", {}, "Partition"), h("dd", {}, sg.partition), h("dt", {}, "Id"), h("dd", { class: "mono" }, sg.id),
          h("dt", {}, "Key"), h("dd", { class: "mono" }, sg.key), h("dt", {}, "Stamp"), h("dd", { class: "mono" }, sg.stamp || "–"),
          h("dt", {}, "Expires in"), h("dd", {}, sg.ttl_ms === null ? "no expiry" : age(sg.ttl_ms)))),
        h("div", {}, h("h3", {}, "State"), h("pre", {}, sg.data === null ? "(no data field)" : prettyBody(sg.data))))
      : h("div", { class: "empty" }, "This saga does not exist (completed, expired or deleted)."))));
}

// ---- routing ---------------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const page = parts[0] || "overview";
  const nav = page.startsWith("saga") ? "sagas" : ["health", "audit", "hosts", "timing", "workflows"].includes(page) ? page : "overview";
  document.querySelectorAll(".nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
  clearTimeout(timer);
  app.replaceChildren(h("div", { class: "empty" }, "Loading…"));
  if (page === "queue") {
    const name = parts.slice(1).join("/");
    queueTabs.current = "ready";
    livePage((id) => queuePage(id, name));
  } else if (page === "dead") {
    const name = parts.slice(1).join("/");
    deadState.open.clear();
    livePage((id) => deadPage(id, name));
  } else if (page === "sagas") {
    const id = ++renderId;
    sagasPage(id, parts[1] || "").then(() => setLive(true, "live")).catch(showError);
  } else if (page === "saga") {
    const id = ++renderId;
    sagaPage(id, parts[1], parts.slice(2).join("/")).catch(showError);
  } else if (page === "search") {
    searchPage(++renderId, parts.slice(1).join("/")).catch(showError);
  } else if (page === "edit") {
    // The storage id is the last part (`~42`, `1:~42`); a subscription's name has a '/'.
    editPage(++renderId, parts.slice(1, -1).join("/"), parts[parts.length - 1]).catch(showError);
  } else if (page === "health") {
    livePage(healthPage);
  } else if (page === "audit") {
    livePage(auditPage);
  } else if (page === "hosts") {
    livePage(hostsPage);
  } else if (page === "workflows") {
    const batch = parts.slice(1).join("/");
    livePage(batch ? (id) => batchPage(id, batch) : workflowsPage);
  } else if (page === "timing") {
    const name = parts.slice(1).join("/");
    livePage(name ? (id) => timingTypePage(id, name) : timingPage);
  } else {
    livePage(overview);
  }
}

window.addEventListener("hashchange", route);
route();
