// The Workflows page (bus-workflows: batches, continuations, durable steps), beside app.js:
// loaded first, called by app.js's router. The same rules: text only through textContent.
"use strict";

/** `done (complete)`, `open`, `open (adding)`. */
function batchState(b) {
  if (b.outcome) return `${b.state} (${b.outcome})`;
  return b.closed ? b.state : `${b.state} (adding)`;
}

function batchKind(b) {
  if (b.policy) return `children (${b.policy === "fail" ? "fail parent" : b.policy})`;
  return b.parent ? `nested in ${b.parent}` : "batch";
}

/** Settled members against all (a native bar: the page's style sheet stays as it is). */
function progress(b) {
  const total = Math.max(1, b.total);
  const settled = b.succeeded + b.dead;
  return h("span", { class: "wf-progress", title: `${num(b.succeeded)} acknowledged, ${num(b.dead)} dead, ${num(b.total - settled)} pending` },
    h("progress", { max: String(total), value: String(settled) }), `\u00a0${Math.floor((100 * settled) / total)}\u00a0%`);
}

function callbackState(c, b) {
  if (c.sent) return "sent";
  if (c.fired) return "sending";
  return b.outcome ? "never" : "pending";
}

function callbacksCell(b) {
  return h("td", {}, b.callbacks.map((c) => h("span", { class: `badge wf-cb wf-cb-${callbackState(c, b)}`, "data-callback": `${c.kind}:${callbackState(c, b)}` },
    `${c.kind} · ${callbackState(c, b)}`)));
}

function batchLink(id) {
  return h("a", { href: `#/workflows/${enc(id)}`, class: "mono", "data-batch-link": id }, id);
}

function batchesTable(tableId, batches) {
  const rows = batches.map((b) => h("tr", { "data-batch": b.id },
    h("td", {}, batchLink(b.id)), h("td", {}, batchKind(b)), h("td", {}, batchState(b)), h("td", {}, progress(b)),
    h("td", { class: "num" }, num(b.total)), countCell(b.total - b.succeeded - b.dead), h("td", { class: "num" }, num(b.succeeded)),
    countCell(b.dead, "pill-dead"), callbacksCell(b), h("td", {}, when(b.created_ms))));
  return h("table", { id: tableId }, h("thead", {}, h("tr", {}, ["Batch", "Kind", "State", "Progress", "Total", "Pending", "Acknowledged", "Dead", "Callbacks", "Opened"]
    .map((c) => h("th", ["Total", "Pending", "Acknowledged", "Dead"].includes(c) ? { class: "num" } : {}, c)))), h("tbody", {}, rows));
}

function waitsFor(run) {
  if (run.kind === "sleep") return "sleep";
  const w = run.kind.wait;
  return w.signalled ? `signal ${w.signal} (came)` : `signal ${w.signal}`;
}

function parkedTable(parked) {
  const rows = parked.map((r) => h("tr", { "data-parked": r.token },
    h("td", { class: "mono" }, r.token), h("td", { class: "mono" }, r.queue), h("td", { class: "mono" }, r.message_type),
    h("td", { "data-waits": r.token }, waitsFor(r)), h("td", {}, relative(r.due_ms))));
  return h("table", { id: "parked" }, h("thead", {}, h("tr", {}, ["Run", "Queue", "Type", "Waits for", "Resumes at the latest"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows));
}

async function workflowsPage(id) {
  const data = await getJson("/api/workflows");
  if (unchanged(id, data)) return;
  const pending = data.open.reduce((n, b) => n + b.total - b.succeeded - b.dead, 0);
  const dead = data.open.reduce((n, b) => n + b.dead, 0);
  const waiting = data.open.filter((b) => b.policy).length;
  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Workflows"),
      h("div", { class: "sub" }, "Batches and their callbacks, parents waiting for their children, runs parked by a sleep or a wait"))),
    h("div", { class: "tiles" },
      tile("Open batches", num(data.open.length), "c-ready"), tile("Members pending", num(pending), "c-flight"),
      tile("Members dead", num(dead), "c-dead"), tile("Continuations waiting", num(waiting), "c-delayed"),
      tile("Parked runs", num(data.parked.length), "c-expired")),
    h("section", { class: "card section" }, h("h2", {}, "Open batches"), data.open.length
      ? batchesTable("open-batches", data.open)
      : h("div", { class: "empty" }, "No open batch.")),
    h("section", { class: "card section" }, h("h2", {}, "Parked runs"), data.parked.length
      ? parkedTable(data.parked)
      : h("div", { class: "empty" }, "No run sleeps or waits for a signal.")),
    h("section", { class: "card section" }, h("h2", {}, "Recently done"), data.done.length
      ? batchesTable("done-batches", data.done)
      : h("div", { class: "empty" }, "No batch finished in the last 7 days."))));
}

async function batchPage(id, batchId) {
  const b = await getJson(`/api/workflows/batch?id=${enc(batchId)}`);
  if (unchanged(id, b)) return;
  const callbacks = b.callbacks.map((c) => h("tr", { "data-callback-row": c.kind },
    h("td", {}, c.kind), h("td", { class: "mono" }, c.queue), h("td", { class: "mono" }, c.message_id), h("td", {}, callbackState(c, b))));
  const deadRows = b.dead_members.map((d) => h("tr", { "data-dead-member": String(d.index) },
    h("td", { class: "num" }, String(d.index)), h("td", { class: "mono" }, d.message_id), h("td", { class: "mono" }, d.queue),
    h("td", {}, d.reason), h("td", {}, d.error), h("td", {}, when(d.at_ms))));
  const waitingRows = b.waiting_on.map(([index, child]) => h("tr", {}, h("td", { class: "num" }, String(index)), h("td", {}, batchLink(child))));
  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, h("span", { class: "mono" }, b.id)),
      h("div", { class: "sub" }, `${batchKind(b)} · ${batchState(b)} · opened ${when(b.created_ms)}`))),
    h("div", { class: "tiles" },
      tile("Members", num(b.total), "c-ready"), tile("Pending", num(b.total - b.succeeded - b.dead), "c-flight"),
      tile("Acknowledged", num(b.succeeded), "c-rate"), tile("Dead", num(b.dead), "c-dead")),
    h("section", { class: "card section" }, h("h2", {}, "Progress"), progress(b)),
    h("section", { class: "card section" }, h("h2", {}, "Callbacks"), b.callbacks.length
      ? h("table", { id: "callbacks" }, h("thead", {}, h("tr", {}, ["Kind", "Queue", "Message id", "State"].map((c) => h("th", {}, c)))), h("tbody", {}, callbacks))
      : h("div", { class: "empty" }, "No callback.")),
    b.waiting_on.length ? h("section", { class: "card section" }, h("h2", {}, "Members waiting for their child batch"),
      h("table", { id: "waiting" }, h("thead", {}, h("tr", {}, ["Member", "Child batch"].map((c) => h("th", {}, c)))), h("tbody", {}, waitingRows))) : null,
    h("section", { class: "card section" }, h("h2", {}, "Dead members"), deadRows.length
      ? h("table", { id: "dead-members" }, h("thead", {}, h("tr", {}, ["Member", "Message id", "Queue", "Reason", "Error", "At"].map((c) => h("th", {}, c)))), h("tbody", {}, deadRows))
      : h("div", { class: "empty" }, "No member died."))));
}
