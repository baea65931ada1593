// The operations pages (Redis health, hosts, audit log), beside app.js: loaded first, called by
// app.js's overview and router. The same rules: text only through textContent.
"use strict";

// Read-only mode (`bus dashboard --read-only`): the server refuses every change; the
// pages hide the buttons that would ask for one (CSS on body.read-only).
const READ_ONLY = document.querySelector('meta[name="read-only"]').content === "true";
if (READ_ONLY) {
  document.body.classList.add("read-only");
  const badge = document.createElement("span");
  badge.className = "badge read-only-badge";
  badge.id = "read-only";
  badge.textContent = "read-only";
  document.querySelector(".topbar-right").prepend(badge);
}

const CHECK_TITLES = {
  eviction: "Eviction policy", persistence: "Persistence", memory: "Memory",
  replication: "Replication", scripts: "Scripts", protocol: "Protocol version",
};

// The overview refreshes every few seconds; Redis's configuration changes rarely.
const HEALTH_EVERY_MS = 15000;
const healthCache = { at: 0, data: null };

async function healthNow(fresh) {
  if (fresh || !healthCache.data || Date.now() - healthCache.at > HEALTH_EVERY_MS) {
    healthCache.data = await getJson("/api/health");
    healthCache.at = Date.now();
  }
  return healthCache.data;
}

function severityBadge(severity) {
  return h("span", { class: `badge sev sev-${severity}`, "data-severity": severity }, severity);
}

/** The overview's banner: the warnings and critical findings, or nothing. */
function healthBanner(health) {
  if (!health) return null;
  const problems = health.checks.filter((c) => c.severity === "warning" || c.severity === "critical");
  if (problems.length === 0) return null;
  const worst = problems.some((c) => c.severity === "critical") ? "critical" : "warning";
  return h("section", { class: `card section health-banner sev-${worst}`, id: "health-banner" },
    h("div", { class: "section-head" },
      h("h2", {}, `Redis health: ${problems.length} problem${problems.length === 1 ? "" : "s"}`),
      h("a", { href: "#/health", class: "hint" }, "all checks")),
    h("ul", { class: "health-list" }, problems.map((c) => h("li", { "data-health-check": c.name },
      severityBadge(c.severity), " ", h("strong", {}, CHECK_TITLES[c.name] || c.name), ": ", c.found,
      c.advice ? h("div", { class: "advice" }, "What to change: ", c.advice) : null))));
}

async function healthPage(id) {
  const health = await healthNow(true);
  const rows = health.checks.map((c) => h("tr", { "data-health-check": c.name, class: `sev-row-${c.severity}` },
    h("td", {}, CHECK_TITLES[c.name] || c.name), h("td", {}, severityBadge(c.severity)),
    h("td", {}, c.found), h("td", {}, c.advice || "–")));
  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Redis health"),
      h("div", { class: "sub" }, `Redis ${health.redis_version || "(version unknown)"} · protocol checked under prefix “${health.prefix}” · the checks of bus doctor`))),
    h("section", { class: "card section" },
      h("table", { id: "health" }, h("thead", {}, h("tr", {}, h("th", {}, "Check"), h("th", {}, "Status"), h("th", {}, "Found"), h("th", {}, "What to change"))),
        h("tbody", {}, rows)))));
}

async function auditPage(id) {
  const entries = await getJson("/api/audit?count=200");
  const rows = entries.map((e) => h("tr", { "data-audit": e.id, "data-audit-action": e.action },
    h("td", {}, when(e.at_ms)), h("td", {}, e.who), h("td", {}, e.via), h("td", {}, h("span", { class: "badge" }, e.action)),
    h("td", { class: "mono" }, e.target), h("td", { class: "num" }, num(e.count)), h("td", { class: "muted" }, e.detail || "")));
  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Audit log"),
      h("div", { class: "sub" }, "Every change made from this dashboard or the bus tool, newest first (a capped Redis stream)"))),
    h("section", { class: "card section" }, entries.length
      ? h("table", { id: "audit" }, h("thead", {}, h("tr", {}, ["When", "Who", "Through", "Action", "Target", "Count", "Detail"].map((c) => h("th", c === "Count" ? { class: "num" } : {}, c)))),
        h("tbody", {}, rows))
      : h("div", { class: "empty" }, "No changes recorded yet."))));
}

function seenAgo(ms) {
  return ms < 60000 ? `${(ms / 1000).toFixed(1)} s ago` : `${Math.round(ms / 60000)} min ago`;
}

/** A host's queues, each with its circuit breaker's state when that is not closed. */
function queuesOf(host) {
  const breakers = host.breakers || {};
  return host.queues.flatMap((q, i) => [i ? ", " : "", q,
    breakers[q] && breakers[q] !== "closed" ? h("span", { class: `badge badge-breaker-${breakers[q]}`, "data-breaker": q }, `breaker ${breakers[q]}`) : ""]);
}

async function hostsPage(id) {
  const [hosts, schedules] = await Promise.all([getJson("/api/hosts"), getJson("/api/schedules")]);
  const lost = hosts.filter((x) => x.lost).length;
  const rows = hosts.map((x) => h("tr", { "data-host": x.id, "data-host-state": x.lost ? "lost" : "running", class: x.lost ? "sev-row-critical" : "" },
    h("td", {}, h("span", { class: `badge sev ${x.lost ? "sev-critical" : "sev-ok"}` }, x.lost ? "lost" : "running")),
    h("td", {}, x.hostname), h("td", { class: "num" }, String(x.pid)), h("td", {}, x.version),
    h("td", { class: "mono" }, queuesOf(x)), h("td", { class: "num" }, num(x.concurrency)),
    h("td", { class: "num" }, num(x.in_flight)), h("td", {}, when(x.started_at_ms)), h("td", {}, seenAgo(x.seen_ago_ms))));
  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Hosts"),
      h("div", { class: "sub" }, `${hosts.length - lost} running, ${lost} lost · each host reports every few seconds; one silent for two reports is lost`))),
    h("section", { class: "card section" }, hosts.length
      ? h("table", { id: "hosts" }, h("thead", {}, h("tr", {}, ["State", "Host", "PID", "Version", "Queues", "Concurrency", "In flight", "Started", "Last seen"].map((c) => h("th", ["PID", "Concurrency", "In flight"].includes(c) ? { class: "num" } : {}, c)))),
        h("tbody", {}, rows))
      : h("div", { class: "empty" }, "No host has reported. Running hosts report every 5 s.")),
    schedulesSection(schedules)));
}

// The recurring schedules (cron) the hosts run, on the Hosts page.
function schedulesSection(schedules) {
  const at = (ms) => (ms == null ? "–" : when(ms));
  const rows = schedules.map((x) => h("tr", { "data-schedule": x.name },
    h("td", {}, x.name), h("td", { class: "mono" }, x.cron), h("td", {}, x.zone), h("td", { class: "mono" }, x.queue),
    h("td", {}, x.missed === "catch_up_once" ? "catch up once" : "skip"), h("td", {}, at(x.last_tick_ms)), h("td", {}, at(x.next_run_ms))));
  return h("section", { class: "card section" }, h("h2", {}, "Schedules"), schedules.length
    ? h("table", { id: "schedules" }, h("thead", {}, h("tr", {}, ["Name", "Cron", "Zone", "Queue", "Missed ticks", "Last tick", "Next run"].map((c) => h("th", {}, c)))),
      h("tbody", {}, rows))
    : h("div", { class: "empty" }, "No recurring schedule is recorded. A host records its schedules when it starts."));
}
