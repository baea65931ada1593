// The Search page (find ready, delayed and dead messages; act on every match after a dry
// run) and the Edit page (edit a dead letter's headers and body, then retry it), beside
// app.js: loaded first, called by app.js's router. Text only through textContent.
"use strict";

// Elements read per request: a request is a few Redis commands, whatever the queue holds.
const SEARCH_PAGE = 2000;
// Matches listed on the page (all are counted and acted on).
const SEARCH_SHOWN = 200;

const searchState = { name: "", form: {}, result: null };

function searchParams(name, form, cursor) {
  const p = new URLSearchParams({ name, limit: String(SEARCH_PAGE) });
  for (const key of ["id", "type", "header", "error", "body", "places"]) {
    if (form[key]) p.set(key, form[key]);
  }
  if (cursor) p.set("cursor", cursor);
  return p;
}

function progressText(what, position, total, matched) {
  const pct = total ? Math.min(100, Math.round((100 * position) / total)) : 100;
  return `${what}: ${num(position)} of ${num(total)} scanned (${pct}%) · ${num(matched)} match${matched === 1 ? "" : "es"}`;
}

/** Every page of a search; `onPage` shows the progress. */
async function runSearch(name, form, onPage) {
  const found = [];
  let matched = 0;
  let cursor = null;
  let page;
  do {
    page = await getJson(`/api/search?${searchParams(name, form, cursor)}`);
    matched += page.found.length;
    for (const f of page.found) if (found.length < SEARCH_SHOWN) found.push(f);
    onPage(page, matched);
    cursor = page.next;
  } while (cursor);
  return { found, matched };
}

function searchForm(name) {
  const f = searchState.form;
  const field = (key, label, hint) => h("label", { class: "field" }, label,
    h("input", { type: "text", name: key, id: `search-${key}`, value: f[key] || "", placeholder: hint }));
  const places = (f.places || "ready,delayed,dead").split(",");
  const place = (p) => h("label", { class: "inline" },
    h("input", { type: "checkbox", name: "place", value: p, checked: places.includes(p) }), ` ${p}`);
  return h("form", { class: "card section search-form", id: "search-form",
    onsubmit: (e) => { e.preventDefault(); startSearch(name, e.target).catch((err) => toast(err.message, true)); } },
    h("div", { class: "search-fields" },
      field("id", "Message id", "01J… or ~42"), field("type", "Type", "payments"),
      field("header", "Header", "name=value"), field("error", "Error text", "declined"),
      field("body", "Body text", "\"customer\":\"42\"")),
    h("div", { class: "toolbar" }, h("span", {}, "In "), ["ready", "delayed", "dead"].map(place),
      h("button", { class: "btn btn-primary", type: "submit", id: "search-go" }, "Search")));
}

async function startSearch(name, formEl) {
  const data = new FormData(formEl);
  const form = {};
  for (const key of ["id", "type", "header", "error", "body"]) {
    const v = String(data.get(key) || "").trim();
    if (v) form[key] = v;
  }
  form.places = data.getAll("place").join(",");
  searchState.form = form;
  searchState.result = null;
  const status = document.getElementById("search-progress");
  status.textContent = "Searching…";
  const result = await runSearch(name, form, (page, matched) => {
    status.textContent = progressText("Searching", page.position, page.total, matched);
  });
  searchState.result = result;
  showResults(name);
}

function showResults(name) {
  const box = document.getElementById("search-results");
  const r = searchState.result;
  if (!r) { box.replaceChildren(); return; }
  const plural = `${num(r.matched)} match${r.matched === 1 ? "" : "es"}`;
  const targets = h("select", { id: "act-target" }, h("option", { value: "" }, "another queue…"),
    (searchState.targets || []).filter((t) => t !== name).map((t) => h("option", { value: t }, t)));
  const act = (action) => async (event) => {
    event.preventDefault();
    const to = action === "move" ? targets.value : null;
    if (action === "move" && !to) { toast("Pick the queue to move them to", true); return; }
    const verbs = { requeue: "Requeue", delete: "Delete", move: `Move to ${to}` };
    const what = {
      requeue: "Dead letters go back to the ready list with their full delivery limit, delayed ones become ready now; ready ones stay as they are.",
      delete: "They are removed for good. This cannot be undone.",
      move: `They go to the back of ${to}'s ready list as new messages and leave ${name}.`,
    }[action];
    const ok = await confirmAction(`${verbs[action]} ${plural}?`,
      `The dry run found ${plural}. ${what} Each is checked again as it is acted on: one taken meanwhile is left alone.`,
      verbs[action], action === "delete");
    if (!ok) return;
    await runAct(name, action, to);
  };
  box.replaceChildren(h("section", { class: "card section" },
    h("div", { class: "section-head" }, h("h2", { id: "search-count", "data-matched": String(r.matched) }, `Dry run: ${plural}`),
      r.matched > r.found.length ? h("span", { class: "hint" }, `the first ${num(r.found.length)} are listed`) : null),
    r.matched ? h("div", { class: "toolbar", id: "search-actions" },
      h("button", { class: "btn btn-primary", type: "button", "data-action": "search-requeue", onclick: act("requeue") }, `Requeue ${plural}`),
      h("button", { class: "btn btn-danger", type: "button", "data-action": "search-delete", onclick: act("delete") }, `Delete ${plural}`),
      targets,
      h("button", { class: "btn", type: "button", "data-action": "search-move", onclick: act("move") }, "Move")) : null,
    messageList(r.found, [
      { label: "Where", value: (m) => h("span", { class: `badge place-${m.place}`, "data-place": m.place }, m.place) },
      { label: "Message", cls: "mono", value: (m) => (m.message ? m.message.id : m.storage_id || "–") },
      { label: "Type", value: (m) => (m.message ? m.message.type : "unreadable") },
      { label: "Last error", value: (m) => (m.errors.length ? m.errors[m.errors.length - 1].message : m.reason || "–") },
    ])));
  box.querySelectorAll("details.msg").forEach((d, i) => { d.dataset.found = String(i); });
}

async function runAct(name, action, to) {
  const status = document.getElementById("search-progress");
  const sum = { matched: 0, changed: 0, gone: 0, unchanged: 0, duplicated: 0 };
  let cursor = null;
  do {
    const payload = { ...searchState.form, name, action, to, cursor, limit: SEARCH_PAGE };
    const done = await post("/api/search/act", payload);
    for (const k of Object.keys(sum)) sum[k] += done.acted[k];
    status.textContent = progressText(`${action}`, done.page.position, done.page.total, sum.matched);
    cursor = done.page.next;
  } while (cursor);
  const extra = [sum.gone && `${num(sum.gone)} were gone meanwhile`, sum.unchanged && `${num(sum.unchanged)} left as they were`,
    sum.duplicated && `${num(sum.duplicated)} copied but already gone here`].filter(Boolean).join("; ");
  const verb = { requeue: "Requeued", delete: "Deleted", move: `Moved to ${to}` }[action];
  status.textContent = `${verb} ${num(sum.changed)} of ${num(sum.matched)}` + (extra ? ` (${extra})` : "");
  status.dataset.done = String(sum.changed);
  toast(status.textContent);
  searchState.result = null;
  showResults(name);
}

async function searchPage(id, name) {
  if (searchState.name !== name) searchState.form = {};
  searchState.name = name;
  searchState.result = null;
  const overview = await getJson("/api/overview").catch(() => ({ queues: [] }));
  searchState.targets = overview.queues.filter((q) => q.kind === "bus").map((q) => q.name);
  replace(id, h("div", {},
    h("div", { class: "page-head" },
      h("div", {}, h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / ", h("a", { href: `#/queue/${enc(name)}` }, name), " / search"),
        h("h1", {}, "Search ", queueTitle(name)),
        h("div", { class: "sub" }, "Ready, delayed and dead messages, read in bounded pages; every criterion given must hold (text ignores case)"))),
    searchForm(name),
    h("div", { class: "sub", id: "search-progress", "aria-live": "polite" }),
    h("div", { id: "search-results" })));
  setLive(true, "live");
}

// ---- edit and retry -------------------------------------------------------------

/** The dead letter `sid` of `name`, found by a search by id over the dead letters. */
async function findDead(name, sid) {
  const result = await runSearch(name, { id: sid, places: "dead" }, () => {});
  return result.found.find((f) => f.storage_id === sid);
}

async function editPage(id, name, sid) {
  const letter = await findDead(name, sid);
  if (!letter) {
    replace(id, h("div", { class: "empty" }, `No dead letter ${sid} in ${name} (requeued or deleted meanwhile?)`));
    return;
  }
  const msg = letter.message;
  const headers = h("textarea", { id: "edit-headers", rows: "6", spellcheck: "false" }, JSON.stringify(msg ? msg.headers : {}, null, 2));
  const body = h("textarea", { id: "edit-body", rows: "14", spellcheck: "false" }, msg ? prettyBody(msg.body) : "");
  const submit = async (event) => {
    event.preventDefault();
    let parsedHeaders;
    try { parsedHeaders = JSON.parse(headers.value); } catch (e) { toast(`Headers are not JSON: ${e.message}`, true); return; }
    const ok = await confirmAction("Requeue the edited message?",
      `Dead letter ${sid} leaves the dead letters; the edited message goes to the back of ${name}'s ready list. The original stays in the queue's edit history.`,
      "Requeue edited", false);
    if (!ok) return;
    const done = await post("/api/dead-letters/edit", { name, id: sid, headers: parsedHeaders, body: body.value });
    if (done.outcome === "requeued") {
      toast(`Edited and requeued ${done.message_id}`);
      location.hash = `#/dead/${enc(name)}`;
    } else {
      toast(`No dead letter ${sid} any more: nothing changed`, true);
    }
  };
  replace(id, h("div", {},
    h("div", { class: "page-head" },
      h("div", {}, h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), " / ", h("a", { href: `#/dead/${enc(name)}` }, `${name} dead letters`), " / edit"),
        h("h1", {}, "Edit and retry ", h("span", { class: "mono" }, msg ? msg.id : sid)),
        h("div", { class: "sub" }, `${msg ? msg.type : "unreadable"} · dead-lettered as ${letter.reason || "–"} · ${letter.errors.length} error(s) · the original is kept in the edit history`))),
    h("form", { class: "card section edit-form", id: "edit-form", onsubmit: (e) => submit(e).catch((err) => toast(err.message, true)) },
      h("label", { class: "field" }, "Headers (JSON object of strings)", headers),
      h("label", { class: "field" }, "Body (JSON)", body),
      h("div", { class: "toolbar" },
        h("button", { class: "btn btn-primary", type: "submit", "data-action": "edit-requeue" }, "Requeue edited message"),
        h("a", { class: "btn", href: `#/dead/${enc(name)}` }, "Cancel"))),
    h("section", { class: "card section" }, h("h2", {}, "Last errors"),
      letter.errors.length
        ? h("ol", { class: "errors" }, letter.errors.map((e) => h("li", {}, h("time", {}, when(Number(e.at_ms))), e.message)))
        : h("div", { class: "muted" }, "No errors"))));
  setLive(true, "live");
}
