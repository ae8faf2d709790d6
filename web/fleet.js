// oopsd fleet page: polls the JSON of the oopsd that served it (/api/fleet,
// /api/pipeline/ID) and redraws; no dependency, no other origin. Every value
// from the database reaches the page as text (textContent), never as HTML.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const STEPS = ["build", "deploy", "rollout"];
  // status -> the step it is in (index) and what that step is doing
  const AT = {
    INITIALIZED: [0, "wait"], RUNNING: [0, "active"], BUILD_SUCCEEDED: [1, "wait"],
    DEPLOYING: [1, "active"], ROLLING_OUT: [2, "active"], SUCCEEDED: [3, "done"],
  };
  const STEP_OF = { INITIALIZED: 0, RUNNING: 0, BUILD_SUCCEEDED: 1, DEPLOYING: 1, ROLLING_OUT: 2 };
  let fleet = null, fetchedAt = 0, openId = null, detailTimer = null, failures = 0, fetchError = "";

  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids.flat()) {
      if (k === undefined || k === null || k === false) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  function dur(s) {
    if (s === undefined || s === null) return "";
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  // "YYYY-MM-DD HH:MM:SS.ffffff" (UTC) -> shorter, still UTC
  const when = (t) => (t ? String(t).slice(0, 19) + "Z" : "");
  function fill(tbody, rows, empty, cols) {
    tbody.replaceChildren(...(rows.length ? rows : [h("tr", null, h("td", { colspan: cols, class: "muted" }, empty))]));
  }

  function stepBar(p) {
    let [at, mode] = AT[p.status] || [STEP_OF[p.last_from] ?? 0, p.status === "ERROR" ? "failed" : "stopped"];
    return h("div", { class: "steps", title: p.status, "data-status": p.status },
      STEPS.map((name, i) => h("span", {
        class: "step " + (i < at ? "done" : i === at ? mode : ""),
      }, name)));
  }
  function timer(p) {
    const finished = !(p.status in STEP_OF);
    const txt = finished ? dur(p.age_s) + " ago" : dur(p.age_s) + (p.timeout_s ? " / " + dur(p.timeout_s) : "");
    const kids = [h("span", null, txt)];
    if (!finished && p.timeout_s) {
      const f = Math.min(1, p.age_s / p.timeout_s);
      kids.push(h("div", { class: "meter" + (f > 0.8 ? " late" : "") },
        h("span", { style: null, "data-w": f })));
    }
    return h("td", { class: "timer" }, kids);
  }

  function drawServers(f) {
    const live = f.servers.filter((s) => s.live).length;
    $("servers-count").textContent = live + " live of " + f.servers.length;
    fill($("servers").tBodies[0], f.servers.map((s) => h("tr", { class: s.live ? "" : "gone", "data-server": s.name },
      h("td", null, h("strong", null, s.name), s.name === f.server ? h("span", { class: "muted" }, " (this page)") : null,
        h("div", { class: "muted" }, s.host || "")),
      h("td", null, !s.live ? h("span", { class: "badge bad", "data-state": "gone" }, "gone")
        : s.health === "ok" ? h("span", { class: "badge good", "data-state": "healthy" }, "healthy")
          : h("span", { class: "badge warn", "data-state": "unhealthy", title: s.health || "" }, s.health || "unknown"),
        !s.live && s.seen_s !== undefined ? h("div", { class: "muted" }, "seen " + dur(s.seen_s) + " ago") : null),
      h("td", { class: "wide" }, when(s.started_at), s.live ? h("div", { class: "muted" }, "up " + dur(s.up_s)) : null),
      h("td", { class: "wide mono" }, s.live ? s.lock_session : "—"),
      h("td", null, h("code", null, (s.policy_hash || "?").slice(0, 8)),
        s.policy_differs ? h("span", { class: "badge warn" }, " differs") : null),
      h("td", null, s.leaders.join(", ") || h("span", { class: "muted" }, "—")),
      h("td", { class: "wide muted" }, s.version || "")
    )), "no server has registered", 7);
  }

  function drawPipelines(f) {
    const open = f.pipelines.filter((p) => p.status in STEP_OF).length;
    $("pipelines-count").textContent = open + " unfinished, " + (f.pipelines.length - open) + " recent";
    fill($("pipelines").tBodies[0], f.pipelines.map((p) => h("tr", {
      class: "pipeline", tabindex: 0, "data-id": p.id, "data-status": p.status,
      onclick: () => openDetail(p.id), onkeydown: (e) => { if (e.key === "Enter") openDetail(p.id); },
    },
    h("td", null, h("code", null, p.id), h("div", { class: "muted wide" }, when(p.created_at))),
    h("td", null, h("strong", null, p.application), " ", p.environment,
      h("div", { class: "muted" }, p.namespace + (p.mode === "manual" ? " · manual" : "") +
        (p.trigger === "rollback" ? " · rollback" : ""))),
    h("td", null, stepBar(p), h("div", { class: "status" }, p.status,
      p.hold ? h("span", { class: "badge warn", "data-hold": p.hold, title: p.message || "" }, " held: " + p.hold) : null)),
    h("td", { class: "wide" }, p.driver || h("span", { class: "muted" }, "—")),
    timer(p),
    h("td", { class: "wide msg" }, p.message || "")
    )), "no pipeline yet", 6);
    for (const m of document.querySelectorAll(".meter > span")) m.style.width = (m.dataset.w * 100).toFixed(1) + "%";
  }

  function drawRestarts(f) {
    fill($("restarts").tBodies[0], f.restarts.map((r) => h("tr", null,
      h("td", null, h("strong", null, r.app), " ", r.environment),
      h("td", null, h("code", null, r.cron)),
      h("td", null, when(r.next), r.next_in_s !== undefined ? h("div", { class: "muted" }, "in " + dur(r.next_in_s)) : null),
      h("td", null, r.last.length ? r.last.map((o) => h("div", null,
        h("span", { class: o.outcome === "ok" ? "good" : o.outcome ? "bad" : "run" }, o.outcome || "running"),
        h("span", { class: "muted" }, " " + when(o.occurrence) + " by " + o.fired_by))) : h("span", { class: "muted" }, "none yet"))
    )), "no restart is scheduled", 4);
  }

  function drawAlerts(f) {
    $("alerts-count").textContent = f.alerts.length ? String(f.alerts.length) : "";
    const ul = $("alerts");
    ul.replaceChildren(...(f.alerts.length ? f.alerts.map((a) => h("li", null,
      h("span", { class: "badge bad" }, a.metric), " ", h("strong", null, a.application), " ", a.environment,
      h("span", { class: "muted" }, " firing for " + dur(a.for_s)))) : [h("li", { class: "muted" }, "none firing")]));
    fill($("routes").tBodies[0], f.routes.map((r) => h("tr", null,
      h("td", null, r.kind, h("div", { class: "muted mono" }, r.where !== r.kind ? r.where : "")),
      h("td", { class: r.pending ? "warn" : "good" }, String(r.pending)),
      h("td", null, r.pending ? dur(r.oldest_s) : "—"))), "no route", 3);
  }

  function draw() {
    const f = fleet;
    drawServers(f);
    drawPipelines(f);
    drawRestarts(f);
    drawAlerts(f);
    $("footer").textContent = "served by " + f.server + " · " + f.statements + " statements, " + f.read_ms +
      " ms per refresh · refreshed every " + (f.refresh_ms / 1000) + " s while this page is open";
  }

  // The data's age is the snapshot's age when served (the server's clock) plus
  // the time since: a server whose database is down keeps serving its last
  // snapshot, which must not look live.
  function tickLive() {
    const el = $("live");
    if (!fetchedAt) return;
    const f = fleet;
    const age = (f.snapshot_age_s || 0) + (Date.now() - fetchedAt) / 1000;
    const why = failures > 0 ? "oopsd is not answering (" + fetchError + ")"
      : f.refresh_error ? "reading the fleet failed: " + f.refresh_error
        : f.refresh_running_s > 5 ? "the database has not answered for " + dur(f.refresh_running_s) : "";
    const stale = why !== "" || age > Math.max(10, 3 * (f.refresh_ms || 2000) / 1000);
    el.className = "live " + (stale ? "stale" : "ok");
    el.dataset.state = stale ? "stale" : "live";
    el.textContent = stale ? "stale · data " + dur(age) + " old" + (why ? " · " + why.slice(0, 200) : "")
      : "live · updated " + dur(age) + " ago";
    el.title = why || "data age";
  }

  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    if (r.status === 202) return { pending: true };
    if (!r.ok) throw new Error(url + ": HTTP " + r.status);
    return r.json();
  }

  async function poll() {
    let next = 2000;
    try {
      const f = await getJSON("/api/fleet");
      if (f.pending) next = 300;
      else {
        fleet = f;
        fetchedAt = Date.now();
        failures = 0;
        next = f.refresh_ms || 2000;
        draw();
      }
    } catch (e) {
      failures++;
      fetchError = e.message;
      next = Math.min(10000, 1000 * failures);
    }
    tickLive();
    setTimeout(poll, next);
  }

  function drawDetail(d) {
    const p = d.pipeline;
    $("detail-title").textContent = p.application + " " + p.environment + " · " + p.id;
    $("detail-summary").replaceChildren(stepBar(p), h("dl", null,
      h("dt", null, "status"), h("dd", { id: "detail-status" }, p.status),
      h("dt", null, "namespace"), h("dd", null, p.namespace),
      h("dt", null, "artifact"), h("dd", null, p.artifact || "—"),
      h("dt", null, "driven by"), h("dd", null, p.driver || "—"),
      h("dt", null, "in status"), h("dd", null, dur(p.age_s) + (p.timeout_s ? " of " + dur(p.timeout_s) : "")),
      h("dt", null, "message"), h("dd", null, p.message || "—")));
    fill($("events").tBodies[0], d.events.map((e) => h("tr", { "data-event": e.type },
      h("td", null, when(e.at)),
      h("td", null, (e.from || "—") + " → " + e.to),
      h("td", null, e.server),
      h("td", { class: "msg" }, e.message || ""))), "no event", 4);
    $("logs").replaceChildren(...(d.logs.length ? d.logs.map((l) => h("div", null,
      h("div", null, h("strong", null, l.step), " on " + l.server + " · " + (l.result || "") +
        (l.duration_ms !== undefined ? " · " + l.duration_ms + " ms" : ""), h("div", { class: "muted mono" }, l.argv)),
      h("pre", null, l.output || "(no output)"))) : [h("p", { class: "muted" },
      "No command output recorded (the simulated gateway runs no command).")]));
  }

  async function pollDetail() {
    if (!openId) return;
    const id = openId;
    let next = 2000;
    try {
      const d = await getJSON("/api/pipeline/" + encodeURIComponent(id));
      if (d.pending) next = 300;
      else if (openId === id) drawDetail(d);
    } catch (e) {
      next = 4000;
    }
    if (openId === id) detailTimer = setTimeout(pollDetail, next);
  }

  function openDetail(id) {
    openId = id;
    clearTimeout(detailTimer);
    $("detail-title").textContent = id;
    $("detail-summary").replaceChildren(h("p", { class: "muted" }, "loading…"));
    $("events").tBodies[0].replaceChildren();
    $("logs").replaceChildren();
    const dlg = $("detail");
    if (!dlg.open) dlg.showModal();
    pollDetail();
  }
  function closeDetail() {
    openId = null;
    clearTimeout(detailTimer);
    if ($("detail").open) $("detail").close();
  }

  $("detail-close").addEventListener("click", closeDetail);
  $("detail").addEventListener("close", () => { openId = null; clearTimeout(detailTimer); });
  setInterval(tickLive, 1000);
  poll();
})();
