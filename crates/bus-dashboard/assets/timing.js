// The Timing page (per-type timing the hosts report: handled, failed, durations per message
// type and minute), beside app.js: loaded first, called by app.js's router. The same rules:
// text only through textContent; the plots are app.js's.
"use strict";

const TIMING_WINDOWS = [[60, "1 h"], [480, "8 h"], [1440, "24 h"], [4320, "72 h"]];
const timingState = { minutes: 60 };

function millis(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms >= 60000) return age(ms);
  if (ms >= 1000) return `${(ms / 1000).toFixed(ms >= 10000 ? 0 : 1)} s`;
  if (ms < 1) return `${Math.round(ms * 1000)} µs`;
  return `${ms >= 10 ? Math.round(ms) : +ms.toFixed(2)} ms`;
}

function failureShare(row) {
  const runs = row.handled + row.failed;
  return runs ? `${((100 * row.failed) / runs).toFixed(runs >= 1000 ? 2 : 1)} %` : "–";
}

function windowPicker(render) {
  return h("div", { class: "tabs", id: "timing-window" }, TIMING_WINDOWS.map(([minutes, label]) => h("button", {
    type: "button", class: minutes === timingState.minutes ? "active" : "", "data-minutes": minutes,
    onclick: () => { timingState.minutes = minutes; redraw(); render(); },
  }, label)));
}

function typeLink(name) {
  return h("a", { href: `#/timing/${enc(name)}`, class: "mono", "data-timing-link": name }, name);
}

/** A short ranked table: the busiest or the slowest types. */
function ranked(title, rows, value, hint) {
  return h("section", { class: "card section" },
    h("div", { class: "section-head" }, h("h2", {}, title), h("span", { class: "hint" }, hint)),
    rows.length
      ? h("table", {}, h("tbody", {}, rows.map((r) => h("tr", {}, h("td", {}, typeLink(r.message_type)), h("td", { class: "num" }, value(r))))))
      : h("div", { class: "empty" }, "No runs in this window."));
}

async function timingPage(id) {
  const data = await getJson(`/api/timing?minutes=${timingState.minutes}`);
  if (unchanged(id, data)) return;
  const label = TIMING_WINDOWS.find(([m]) => m === data.minutes);
  const over = label ? `last ${label[1]}` : `last ${data.minutes} min`;
  const busiest = data.types.slice(0, 8);
  const slowest = [...data.types].sort((a, b) => b.p95_ms - a.p95_ms || b.mean_ms - a.mean_ms).slice(0, 8);
  const runs = data.types.reduce((n, r) => n + r.handled + r.failed, 0);
  const failed = data.types.reduce((n, r) => n + r.failed, 0);
  const rows = data.types.map((r) => h("tr", { "data-timing-type": r.message_type },
    h("td", {}, typeLink(r.message_type)), h("td", { class: "num" }, num(r.handled)),
    countCell(r.failed, "pill-dead"), h("td", { class: "num" }, failureShare(r)),
    h("td", { class: "num" }, millis(r.mean_ms)), h("td", { class: "num" }, millis(r.p50_ms)),
    h("td", { class: "num" }, millis(r.p95_ms)), h("td", { class: "num" }, millis(r.p99_ms)),
    h("td", { class: "num" }, millis(r.total_ms))));
  replace(id, h("div", {},
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Timing"),
      h("div", { class: "sub" }, `Handler runs per message type, ${over}: every host adds its counts every 10 s; Redis keeps each minute 72 h`)),
      windowPicker(() => timingPage(id).catch(showError))),
    h("div", { class: "tiles" },
      tile("Types", num(data.types.length), "c-ready"), tile("Runs", num(runs), "c-rate"),
      tile("Failed", num(failed), "c-dead"), tile("Failed share", failureShare({ handled: runs - failed, failed }), "c-expired")),
    h("div", { class: "timing-ranks" },
      ranked("Busiest", busiest, (r) => `${num(r.handled + r.failed)} runs`, "most runs"),
      ranked("Slowest", slowest, (r) => `p95 ${millis(r.p95_ms)}`, "95th percentile of duration")),
    h("section", { class: "card section" },
      h("div", { class: "section-head" }, h("h2", {}, "Every type"),
        h("span", { class: "hint" }, "percentiles are the upper bounds of the histogram's buckets")),
      data.types.length
        ? h("table", { id: "timing" }, h("thead", {}, h("tr", {}, ["Type", "Handled", "Failed", "Failed %", "Mean", "p50", "p95", "p99", "Total time"]
          .map((c, i) => h("th", i ? { class: "num" } : {}, c)))), h("tbody", {}, rows))
        : h("div", { class: "empty" }, "No host reported a run in this window. Hosts on the Redis transport report every 10 s."))));
}

/** Bars of the duration histogram: one per bucket, labelled by its upper bound. */
function histogram(buckets) {
  const max = Math.max(1, ...buckets.map((b) => b.count));
  const total = buckets.reduce((n, b) => n + b.count, 0);
  return h("div", { class: "histogram", id: "timing-histogram" }, buckets.map((b, i) => {
    const bar = h("div", { class: "bar" });
    bar.style.height = `${Math.round((100 * b.count) / max)}%`;
    const bound = b.le_ms === null ? `> ${millis(buckets[i - 1].le_ms)}` : `≤ ${millis(b.le_ms)}`;
    return h("div", { class: "bucket", "data-count": b.count, title: `${bound}: ${num(b.count)} runs${total ? ` (${((100 * b.count) / total).toFixed(1)} %)` : ""}` },
      h("div", { class: "bar-box" }, bar), h("div", { class: "bucket-count" }, b.count ? compact(b.count) : ""), h("div", { class: "bucket-label" }, bound));
  }));
}

async function timingTypePage(id, name) {
  const data = await getJson(`/api/timing/type?name=${enc(name)}&minutes=${timingState.minutes}`);
  if (unchanged(id, data)) return;
  const sum = data.summary;
  const win = data.minutes * 60000;
  const end = data.points.length ? data.points[data.points.length - 1].t + data.span_minutes * 60000 : data.now_ms;
  const per = data.span_minutes === 1 ? "per minute" : `per ${data.span_minutes} minutes`;
  const counts = [{ key: "handled", label: `Handled ${per}`, color: "var(--rate)" }, { key: "failed", label: `Failed ${per}`, color: "var(--dead)" }];
  const durations = [{ key: "mean_ms", label: "Mean (ms)", color: "var(--ready)" }, { key: "p95_ms", label: "p95 (ms)", color: "var(--inflight)" }];
  replace(id, h("div", {},
    h("div", { class: "page-head" },
      h("div", {}, h("div", { class: "crumbs" }, h("a", { href: "#/timing" }, "Timing"), " / type"), h("h1", { class: "mono", id: "timing-type" }, name),
        h("div", { class: "sub" }, `Its handler runs over the ${TIMING_WINDOWS.find(([m]) => m === data.minutes)?.[1] || `${data.minutes} min`} before now, all hosts added`)),
      windowPicker(() => timingTypePage(id, name).catch(showError))),
    h("div", { class: "tiles" },
      tile("Handled", num(sum.handled), "c-rate"), tile("Failed", num(sum.failed), "c-dead"),
      tile("Mean", millis(sum.mean_ms), "c-ready"), tile("p50", millis(sum.p50_ms), "c-delayed"),
      tile("p95", millis(sum.p95_ms), "c-inflight"), tile("p99", millis(sum.p99_ms), "c-expired")),
    h("div", { class: "charts timing-charts" },
      h("div", { class: "card chart-card" }, h("h3", {}, h("span", {}, "Runs"), h("span", { class: "hint" }, per)),
        lineChart(data.points, counts, { now: end, window: win, label: `${name} runs` }), legend(counts)),
      h("div", { class: "card chart-card" }, h("h3", {}, h("span", {}, "Duration"), h("span", { class: "hint" }, "ms")),
        lineChart(data.points, durations, { now: end, window: win, label: `${name} durations` }), legend(durations))),
    h("section", { class: "card section" },
      h("div", { class: "section-head" }, h("h2", {}, "Duration histogram"), h("span", { class: "hint" }, `${num(sum.handled + sum.failed)} runs`)),
      histogram(data.buckets))));
}
