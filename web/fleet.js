// oopsd fleet page: polls the JSON of the oopsd that served it (/api/me,
// /api/fleet, /api/pipeline/ID, /api/history/NS/APP/ENV, /api/stats) and
// redraws; no dependency, no other origin. Every value from the database
// reaches the page as text (textContent), never as HTML.
//
// Sign-in: an oopsd with tokens answers /api/... 401 without one; the page
// then asks for the token, keeps it in sessionStorage (this tab only; never
// localStorage, never a cookie) and sends it as "Authorization: Bearer" on
// every /api request. Actions (stop, release, override a hold, roll back)
// are drawn only when /api/me says actions: true (the operator role); each
// is confirmed in a dialog saying what will happen, with a reason kept in the
// pipeline's history, and is sent as a same-origin JSON POST.
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
  const TOKEN_KEY = "oopsd-token";
  const REASON_MAX = 500; // bytes, as the server counts them
  const BURST_MS = 8000; // after an action: poll faster this long, to show its effect at once
  let fleet = null, fetchedAt = 0, failures = 0, fetchError = "";
  let me = null; // { name, role, actions } from /api/me; null while signed out
  let gen = 0; // bumped at every sign-in and sign-out: answers of an older one are dropped
  let openId = null, openHistory = null, burstUntil = 0, pendingAction = null, noticeTimer = null;
  let memToken = null; // when sessionStorage cannot be used (the tab keeps it in memory)
  let hashTried = false; // #pipeline=ID looked at after the first fleet load

  // h("svg:rect", ...): an SVG element (the delivery charts)
  function h(tag, attrs, ...kids) {
    const e = tag.startsWith("svg:") ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.setAttribute("class", v);
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
  const muted = (t) => h("span", { class: "muted" }, t);
  const where = (p) => p.namespace + "/" + p.application + " " + p.environment;
  // Redraws patch what is shown rather than replace it: an element that is
  // there already (the same tag and data-key; without a key, at the same
  // place) keeps its node, its focus and its listeners, and takes the new
  // attributes and text. So a click or a keyboard focus is never lost to a
  // redraw (the fleet is redrawn every 1.5 s). Listeners therefore depend on
  // the key only, and read the data they act on when they run.
  const keyOf = (n) => (n.nodeType === 1 ? n.dataset.key || "" : "");
  const sameKind = (o, n) => o.nodeType === n.nodeType &&
    (o.nodeType !== 1 || (o.tagName === n.tagName && keyOf(o) === keyOf(n)));
  function patch(o, n) {
    if (o.nodeType !== 1) {
      if (o.data !== n.data) o.data = n.data;
      return;
    }
    for (const a of [...o.attributes]) if (!n.hasAttribute(a.name)) o.removeAttribute(a.name);
    for (const a of [...n.attributes]) if (o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
    patchChildren(o, [...n.childNodes]);
  }
  function patchChildren(parent, kids) {
    const old = [...parent.childNodes], byKey = new Map(), used = new Set();
    for (const o of old) if (keyOf(o)) byKey.set(keyOf(o), o);
    const next = kids.map((n, i) => {
      if (!(n instanceof Node)) n = document.createTextNode(String(n));
      const o = keyOf(n) ? byKey.get(keyOf(n)) : old[i] && !keyOf(old[i]) ? old[i] : undefined;
      if (o && !used.has(o) && sameKind(o, n)) {
        used.add(o);
        patch(o, n);
        return o;
      }
      return n;
    });
    next.forEach((node, i) => { if (parent.childNodes[i] !== node) parent.insertBefore(node, parent.childNodes[i] || null); });
    while (parent.childNodes.length > next.length) parent.lastChild.remove();
  }
  function swap(el, kids) {
    const a = document.activeElement;
    const key = a && a !== el && el.contains(a) && a.dataset ? a.dataset.key : undefined;
    patchChildren(el, kids);
    if (key && !el.contains(document.activeElement)) { // its node was replaced after all: focus the new one
      const again = [...el.querySelectorAll("[data-key]")].find((n) => n.dataset.key === key);
      if (again) again.focus();
    }
  }
  function fill(tbody, rows, empty, cols) {
    swap(tbody, rows.length ? rows : [h("tr", null, h("td", { colspan: cols, class: "muted" }, empty))]);
  }

  // ------------------------------------------------------------ the token

  function getToken() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY);
    } catch (e) {
      return memToken;
    }
  }
  function setToken(t) {
    memToken = t;
    try {
      if (t === null) window.sessionStorage.removeItem(TOKEN_KEY);
      else window.sessionStorage.setItem(TOKEN_KEY, t);
    } catch (e) {
      // no session storage here: kept in memory (this page) only
    }
  }

  // ------------------------------------------------------------ requests

  class ApiError extends Error {
    constructor(status, text) {
      super(text);
      this.status = status;
    }
  }
  const describe = (e) => (e.status ? "HTTP " + e.status + (e.message ? ": " + e.message : "") : e.message);

  // One request to this oopsd: the token (if any) as a bearer, a JSON body
  // for POSTs. -> the JSON, or { pending: true } (202, for GETs); throws
  // ApiError (status 0: no answer). A 401 for the token in use signs out.
  async function api(method, url, body) {
    const t = getToken();
    const headers = { Accept: "application/json" };
    if (t) headers.Authorization = "Bearer " + t;
    const init = { method, headers, cache: "no-store", credentials: "same-origin", redirect: "error" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch(url, init);
    } catch (e) {
      throw new ApiError(0, "oopsd is not answering (" + e.message + ")");
    }
    if (r.status === 401) {
      if (getToken() === t) needSignIn(t ? "The token was refused: sign in again." : "");
      throw new ApiError(401, "sign-in needed");
    }
    if (r.status === 202 && method === "GET") return { pending: true };
    let data = null;
    try {
      data = await r.json();
    } catch (e) {
      data = null;
    }
    if (!r.ok) throw new ApiError(r.status, data && typeof data.error === "string" ? data.error.slice(0, 500) : "");
    return data;
  }

  // A poll loop: run() -> ms until the next run, or null to stop. now()
  // runs it at once (after the run in flight, if any); never two at once.
  function poller(run) {
    let timer = null, busy = false, again = false, on = false;
    async function tick() {
      if (busy) { again = true; return; }
      clearTimeout(timer);
      timer = null;
      if (!on) return;
      busy = true;
      let next = null;
      try {
        next = await run();
      } catch (e) {
        next = 4000;
      }
      busy = false;
      if (!on) return;
      if (again) { again = false; next = 0; }
      if (next !== null && next !== undefined) timer = setTimeout(tick, next);
    }
    return {
      start() { on = true; tick(); },
      stop() { on = false; again = false; clearTimeout(timer); timer = null; },
      now() { if (on) tick(); },
    };
  }
  let burstOf = new Set(); // which polls an action sped up: "fleet", "detail", "history"
  const burst = (which, ms) => (burstOf.has(which) && Date.now() < burstUntil ? 500 : ms);

  // ------------------------------------------------------------ drawing the fleet

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
      h("td", null, h("strong", null, s.name), s.name === f.server ? muted(" (this page)") : null,
        h("div", { class: "muted" }, s.host || "")),
      h("td", null, !s.live ? h("span", { class: "badge bad", "data-state": "gone" }, "gone")
        : s.health === "ok" ? h("span", { class: "badge good", "data-state": "healthy" }, "healthy")
          : h("span", { class: "badge warn", "data-state": "unhealthy", title: s.health || "" }, s.health || "unknown"),
        !s.live && s.seen_s !== undefined ? h("div", { class: "muted" }, "seen " + dur(s.seen_s) + " ago") : null),
      h("td", { class: "wide" }, when(s.started_at), s.live ? h("div", { class: "muted" }, "up " + dur(s.up_s)) : null),
      h("td", { class: "wide mono" }, s.live ? s.lock_session : "—"),
      h("td", null, h("code", null, (s.policy_hash || "?").slice(0, 8)),
        s.policy_differs ? h("span", { class: "badge warn" }, " differs") : null),
      h("td", null, s.leaders.join(", ") || muted("—")),
      h("td", { class: "wide muted" }, s.version || "")
    )), "no server has registered", 7);
  }

  // The actions an operator may take on a pipeline as the page shows it
  // (none for a viewer: no button at all).
  // The pipeline as the page shows it now: in the detail, or in the fleet.
  let detailPipeline = null;
  function shown(id, where) {
    if (where === "detail" && detailPipeline && detailPipeline.id === id) return detailPipeline;
    return (fleet && fleet.pipelines.find((q) => q.id === id)) || null;
  }
  function actionsFor(p, where) {
    if (!me || !me.actions) return [];
    const list = [];
    if (p.status in STEP_OF && p.status !== "ROLLING_OUT") list.push(["stop", "Stop"]);
    if (p.status === "BUILD_SUCCEEDED" && p.mode === "manual" && !p.deploy_requested) list.push(["release", "Release"]);
    if ((p.status === "BUILD_SUCCEEDED" || p.status === "INITIALIZED" && p.trigger === "promotion") &&
      (p.hold === "window" || p.hold === "freeze") &&
      (p.mode !== "manual" || p.deploy_requested)) list.push(["override", "Override hold"]);
    // a live release its policy promotes (issue 39; in the detail only): now, its wait skipped
    if (p.promotion && p.status === "SUCCEEDED") list.push(["promote_now", "Promote to " + p.promotion.to]);
    // approvals (issue 39; in the detail only): before the deploy of a release whose policy asks for them
    if (p.approval && p.approval.needed > 0 && (p.status === "INITIALIZED" || p.status === "RUNNING" ||
      p.status === "BUILD_SUCCEEDED")) list.push(["approve", "Approve"], ["reject", "Reject"]);
    // a canary (issue 38; its state is in the detail only)
    if (p.canary && p.status === "ROLLING_OUT") {
      if (p.canary.step > 0 && p.canary.request !== "abort") {
        list.push(["promote", "Promote"], ["promote_full", "Promote fully"]);
      }
      list.push(["abort", "Abort"]);
    }
    return list.map(([a, label]) => h("button", {
      type: "button", class: "act " + a, "data-action": a, "data-id": p.id, "data-key": a + ":" + p.id,
      "aria-label": label + " pipeline " + p.id,
      onclick: (e) => { e.stopPropagation(); confirmAction(a, shown(p.id, where) || p); },
    }, label));
  }
  function historyButton(p, key, label) {
    return h("button", {
      type: "button", class: "link app", "data-history": p.namespace + "/" + p.application + "/" + p.environment,
      "data-key": key, title: "release history of " + where(p),
      onclick: (e) => { e.stopPropagation(); showHistory(p.namespace, p.application, p.environment); },
    }, label);
  }
  const rowOpens = (p) => ({
    tabindex: 0, "data-id": p.id, onclick: () => openDetail(p.id),
    onkeydown: (e) => { if (e.key === "Enter" && e.target === e.currentTarget) openDetail(p.id); },
  });

  // Waiting to deploy: held by a window, freeze or slot (their message says
  // why), or a manual pipeline waiting for its release.
  function waiting(p) {
    if (p.status !== "INITIALIZED" && p.status !== "BUILD_SUCCEEDED") return null;
    if (p.hold) return p.hold;
    if (p.status === "BUILD_SUCCEEDED" && p.mode === "manual" && !p.deploy_requested) return "release";
    return null;
  }
  const HOLD_WHY = { release: "a manual pipeline: it deploys once released" };
  function drawHeld(f) {
    const held = f.pipelines.filter((p) => waiting(p));
    $("held-count").textContent = held.length ? String(held.length) : "";
    fill($("held").tBodies[0], held.map((p) => h("tr", Object.assign({ class: "held-row", "data-key": "w:" + p.id,
      "data-hold": waiting(p), "data-status": p.status }, rowOpens(p)),
    h("td", null, h("code", null, p.id)),
    h("td", null, h("strong", null, historyButton(p, "wh:" + p.id, p.application)), " ", p.environment,
      h("div", { class: "muted" }, p.namespace + (p.mode === "manual" ? " · manual" : ""))),
    h("td", null, h("span", { class: "badge warn", "data-hold": waiting(p) },
      waiting(p) === "release" ? "awaiting release" : p.hold)),
    h("td", { class: "msg why" }, p.message || HOLD_WHY[waiting(p)] || ""),
    h("td", { class: "wide" }, dur(p.age_s)),
    h("td", { class: "act-col" }, h("div", { class: "row-actions" }, actionsFor(p, "fleet")))
    )), "nothing is waiting to deploy", 6);
  }

  function drawPipelines(f) {
    const open = f.pipelines.filter((p) => p.status in STEP_OF).length;
    $("pipelines-count").textContent = open + " unfinished, " + (f.pipelines.length - open) + " recent";
    fill($("pipelines").tBodies[0], f.pipelines.map((p) => h("tr", Object.assign({
      class: "pipeline", "data-status": p.status, "data-key": "p:" + p.id }, rowOpens(p)),
    h("td", null, h("code", null, p.id), h("div", { class: "muted wide" }, when(p.created_at))),
    h("td", null, h("strong", null, historyButton(p, "ph:" + p.id, p.application)), " ", p.environment,
      h("div", { class: "muted" }, p.namespace + (p.mode === "manual" ? " · manual" : "") +
        (p.mode === "manual" && p.deploy_requested && p.status === "BUILD_SUCCEEDED" ? " · released" : "") +
        (p.trigger === "rollback" ? " · rollback" : "") + (p.trigger === "promotion" ? " · promotion" : ""))),
    h("td", null, stepBar(p), h("div", { class: "status" }, p.status,
      p.hold ? h("span", { class: "badge warn", "data-hold": p.hold, title: p.message || "" }, " held: " + p.hold) : null)),
    h("td", { class: "wide" }, p.driver || muted("—")),
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
        muted(" " + when(o.occurrence) + " by " + o.fired_by))) : muted("none yet"))
    )), "no restart is scheduled", 4);
  }

  function drawAlerts(f) {
    $("alerts-count").textContent = f.alerts.length ? String(f.alerts.length) : "";
    const ul = $("alerts");
    swap(ul, (f.alerts.length ? f.alerts.map((a) => h("li", null,
      h("span", { class: "badge bad" }, a.metric), " ", h("strong", null, a.application), " ", a.environment,
      muted(" firing for " + dur(a.for_s)))) : [h("li", { class: "muted" }, "none firing")]));
    fill($("routes").tBodies[0], f.routes.map((r) => h("tr", null,
      h("td", null, r.kind, h("div", { class: "muted mono" }, r.where !== r.kind ? r.where : "")),
      h("td", { class: r.failing ? "bad" : r.pending ? "warn" : "good" }, String(r.pending) + (r.capped ? "+" : ""),
        r.failing ? h("div", { class: "muted" }, r.failing + " failing") : null,
        r.retry_in_s > 0 ? h("div", { class: "muted" }, "backing off " + dur(r.retry_in_s)) : null),
      h("td", null, r.pending ? dur(r.oldest_s) : "—",
        r.last_error ? h("div", { class: "muted route-error" }, r.last_error) : null))), "no route", 3);
  }

  function draw() {
    const f = fleet;
    drawServers(f);
    drawHeld(f);
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
    if (!fetchedAt || !fleet) return;
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
  function liveSays(state, text) {
    const el = $("live");
    el.className = "live";
    el.dataset.state = state;
    el.textContent = text;
    el.title = text;
  }

  const fleetPoll = poller(async () => {
    const g = gen;
    try {
      const f = await api("GET", "/api/fleet");
      if (g !== gen || !me) return null;
      if (f.pending) return 300;
      fleet = f;
      fetchedAt = Date.now();
      failures = 0;
      draw();
      if (!hashTried) {
        hashTried = true;
        openFromHash();
      }
      return burst("fleet", f.refresh_ms || 2000);
    } catch (e) {
      if (g !== gen || e.status === 401) return null;
      failures++;
      fetchError = "/api/fleet: " + describe(e);
      if (!fleet) liveSays("connecting", "connecting… " + fetchError);
      return Math.min(10000, 1000 * failures);
    } finally {
      tickLive();
    }
  });

  // ------------------------------------------------------------ delivery figures

  // The delivery figures (DORA, issue 39): /api/stats has every window (the
  // buttons only redraw), kept a minute by the server: asked no more often.
  const NONE = "–"; // no data: never a made-up 0
  let stats = null, statsError = "", statsWindow = "30d";
  const span = (s) => (s === null ? NONE : dur(s).replace(/ 0\w$/, "")); // "3h" as oopsctl stats says
  const plural = (n, one) => n + " " + one + (n === 1 ? "" : "s");
  // Each card's figure and line, of the fleet or of a day (the same shape);
  // val: a day's bar, top: the chart's top (else the highest bar).
  const CARDS = [
    { id: "frequency", name: "Deployment frequency", label: "releases live per day",
      fig: (f) => f.per_day.toFixed(2) + " / day", sub: (f) => plural(f.deployments, "release") + " live",
      val: (d) => d.deployments },
    { id: "lead", name: "Lead time", label: "median lead time per day", fig: (f) => span(f.lead_time.median_s),
      sub: (f) => (f.lead_time.releases ? "p90 " + span(f.lead_time.p90_s) : "no data"), val: (d) => d.lead_time.median_s },
    { id: "failure", name: "Change failure rate", label: "change failure rate per day", top: 1,
      fig: (f) => (f.change_failure.rate === null ? NONE : (f.change_failure.rate * 100).toFixed(1) + " %"),
      sub: (f) => f.change_failure.failures + " of " + plural(f.change_failure.deployments, "deployment"),
      val: (d) => d.change_failure.rate },
    { id: "restore", name: "Time to restore", label: "median time to restore per day",
      fig: (f) => span(f.restore.median_s), val: (d) => d.restore.median_s,
      // open: failed with nothing live since (not timed)
      sub: (f) => plural(f.restore.restored, "failure") + " restored" +
        (f.restore.open ? ", " + f.restore.open + " open" : "") },
  ];

  // A bar per day, oldest first, each in a <g> with its <title> (the tooltip).
  // Attributes only: the page's CSP allows no inline style.
  function chart(c, w) {
    const vals = w.series.map(c.val), top = c.top || Math.max(...vals), label = c.label + ", last " + w.days + " days";
    const tip = (d) => (c.fig(d) === NONE ? "" : c.fig(d) + ", ") + c.sub(d);
    return h("svg:svg", { class: "chart", role: "img", "aria-label": label, viewBox: "0 0 " + vals.length * 10 + " 50",
      preserveAspectRatio: "none" }, h("svg:title", null, label), w.series.map((d, i) => h("svg:g", null,
      h("svg:title", null, when(d.from).replace("T", " ") + ": " + tip(d)), bar(vals[i], i, top))));
  }
  function bar(v, i, top) { // none for a day without data, a thin one for 0
    if (v === null) return null;
    const high = Math.max(1.5, (v / top) * 50 || 0);
    return h("svg:rect", { class: v > 0 ? "bar" : "zero", x: i * 10 + 1, width: 8, y: 50 - high, height: high });
  }

  function drawDelivery() {
    for (const b of $("delivery-window").children) b.setAttribute("aria-pressed", b.dataset.window === statsWindow);
    const w = stats && stats.windows[statsWindow];
    $("delivery-error").textContent = statsError;
    // past 20,000 pipelines per status the server reads the newest only
    $("delivery-age").textContent = w ? "computed at " + stats.at + (w.capped ? " · figures whole since " +
      when(w.whole_since) : "") : "";
    swap($("delivery-cards"), w ? CARDS.map((c) => h("article", { id: "delivery-" + c.id },
      h("h3", null, c.name), h("p", { class: "figure" }, c.fig(w.fleet)), h("p", { class: "muted" }, c.sub(w.fleet)),
      chart(c, w))) : [h("p", { class: "muted" }, "no figures yet")]);
  }

  const statsPoll = poller(async () => {
    const g = gen;
    try {
      const t = await api("GET", "/api/stats");
      if (g !== gen || !me) return null;
      if (t.pending) return 1000; // the first computation is running
      stats = t;
      // the last computation failed: these are the figures kept before it
      statsError = t.error ? "Reading the history failed: " + t.error : "";
      t.at = new Date(Date.now() - t.age_s * 1000).toISOString().slice(11, 19) + "Z";
      drawDelivery();
      return 60000;
    } catch (e) {
      if (g !== gen || e.status === 401) return null;
      statsError = "Reading the delivery figures failed: " + describe(e);
      drawDelivery();
      return 15000;
    }
  });
  $("delivery-window").addEventListener("click", (ev) => {
    statsWindow = ev.target.dataset.window || statsWindow;
    drawDelivery();
  });

  // ------------------------------------------------------------ a pipeline's detail

  // A canary's section (issue 38): the step bar, the weight, why it waits,
  // the pause left, a pending request, each measurement and its verdict.
  function stepLabel(s) {
    if (s.kind === "weight") return s.weight + "%";
    if (s.kind === "analysis") return "analysis " + s.name + (s.count ? " ×" + s.count : "");
    return s.until_operator ? "pause (operator)" : "pause " + dur((s.ms || 0) / 1000);
  }
  function canarySection(p) {
    const c = p.canary;
    if (!c) return null;
    const chips = c.steps.map((s, i) => h("li", {
      "data-key": "cs:" + i, "data-step": String(i + 1),
      class: "chip" + (i + 1 < c.step ? " done" : i + 1 === c.step ? " current" : ""),
      "aria-current": i + 1 === c.step ? "step" : null,
    }, stepLabel(s)));
    const waits = c.paused === "operator" ? "paused until an operator promotes" :
      c.paused === "inconclusive" ? "paused: an analysis was inconclusive; promote or abort" : null;
    const rows = c.measurements.map((m) => h("tr", { "data-key": "m:" + m.step + ":" + m.n, "data-verdict": m.verdict },
      h("td", null, String(m.step)), h("td", null, String(m.n)), h("td", null, m.analysis),
      h("td", null, m.value === undefined ? "—" : String(m.value)),
      h("td", { class: m.verdict === "pass" ? "ok" : m.verdict === "fail" ? "bad" : "warn" }, m.verdict),
      h("td", { class: "msg" }, m.detail || "")));
    return h("section", { id: "canary", "data-step": String(c.step) },
      h("h3", null, "Canary"),
      h("ol", { class: "chips", id: "canary-steps" }, ...chips),
      h("dl", null,
        h("dt", null, "step"), h("dd", { id: "canary-step" }, c.step > c.steps.length ? "done" :
          c.step === 0 ? "not begun (the rollout is not ready yet)" : c.step + " of " + c.steps.length),
        h("dt", null, "weight"), h("dd", { id: "canary-weight" }, c.weight === undefined ? "—" : c.weight + "%"),
        waits ? h("dt", null, "waits") : null, waits ? h("dd", { id: "canary-paused", class: "warn" }, waits) : null,
        c.pause_left_ms !== undefined ? h("dt", null, "pause left") : null,
        c.pause_left_ms !== undefined ? h("dd", null, dur(c.pause_left_ms / 1000)) : null,
        c.request ? h("dt", null, "requested") : null,
        c.request ? h("dd", { id: "canary-request" }, c.request.replace("_", " ")) : null),
      rows.length ? h("table", { id: "canary-measurements" },
        h("thead", null, h("tr", null, h("th", null, "step"), h("th", null, "n"), h("th", null, "analysis"),
          h("th", null, "value"), h("th", null, "verdict"), h("th", null, "detail"))),
        h("tbody", null, ...rows)) : h("p", { class: "muted" }, "No measurement yet."),
      h("p", { class: "muted help" }, "A canary is written in the policy: rollout { strategy = \"canary\", " +
        "steps = { { weight = 10 }, { analysis = \"errors\" }, { pause = true }, { weight = 100 } } } and " +
        "analysis \"errors\" { prometheus = ..., query = ..., success = function(v) ... end } — see oopsd.policy(5)."));
  }

  function drawDetail(d) {
    const p = d.pipeline;
    $("detail-title").textContent = p.application + " " + p.environment + " · " + p.id;
    swap($("detail-summary"), [stepBar(p), h("dl", null,
      h("dt", null, "status"), h("dd", { id: "detail-status" }, p.status,
        p.hold ? h("span", { class: "badge warn", "data-hold": p.hold }, " held: " + p.hold) : null),
      h("dt", null, "namespace"), h("dd", null, p.namespace),
      h("dt", null, "mode"), h("dd", null, (p.mode || "auto") +
        (p.mode === "manual" ? (p.deploy_requested ? " · released" : " · waits for a release") : "") +
        (p.trigger === "rollback" ? " · rollback" : "")),
      // a promotion (issue 39): the release it came from, one click away
      p.promoted_from ? h("dt", null, "promoted from") : null,
      p.promoted_from ? h("dd", { id: "detail-promoted-from" },
        h("a", { href: "#pipeline=" + p.promoted_from }, p.promoted_from)) : null,
      h("dt", null, "artifact"), h("dd", null, p.artifact || "—"),
      h("dt", null, "driven by"), h("dd", null, p.driver || "—"),
      h("dt", null, "in status"), h("dd", null, dur(p.age_s) + (p.timeout_s ? " of " + dur(p.timeout_s) : "")),
      h("dt", null, "message"), h("dd", null, p.message || "—"),
      // approvals (issue 39): what this server's policy asks for, who gave one
      p.approval ? h("dt", null, "approvals") : null,
      p.approval ? h("dd", { id: "detail-approvals", "data-count": String(p.approval.count),
        "data-needed": String(p.approval.needed) }, p.approval.count + " of " + p.approval.needed +
        (p.approval.by.length ? " (" + p.approval.by.join(", ") + ")" : "")) : null), canarySection(p)]);
    detailPipeline = p;
    swap($("detail-actions"), [...actionsFor(p, "detail"), historyButton(p, "dh:" + p.id, "Release history of " + where(p))]);
    fill($("events").tBodies[0], d.events.map((e) => h("tr", { "data-key": "ev:" + e.id, "data-event": e.type, "data-actor": e.actor || "" },
      h("td", null, when(e.at)),
      h("td", null, (e.from || "—") + " → " + e.to),
      h("td", { class: "wide" }, e.server),
      // no actor: the engine's own transition
      h("td", { class: "actor" }, e.actor ? e.actor : h("span", { class: "muted", title: "the engine's own transition" }, "—")),
      h("td", { class: "msg reason" }, e.reason || ""),
      h("td", { class: "msg" }, e.message || ""))), "no event", 6);
    swap($("logs"), (d.logs.length ? d.logs.map((l) => h("div", { "data-key": "log:" + l.id },
      h("div", null, h("strong", null, l.step), " on " + l.server + " · " + (l.result || "") +
        (l.duration_ms !== undefined ? " · " + l.duration_ms + " ms" : ""), h("div", { class: "muted mono" }, l.argv)),
      h("pre", null, l.output || "(no output)"))) : [h("p", { class: "muted" },
      "No command output recorded (the simulated gateway runs no command).")]));
  }

  let detailShown = null; // the id whose detail is drawn
  const detailPoll = poller(async () => {
    const id = openId;
    if (!id) return null;
    try {
      const d = await api("GET", "/api/pipeline/" + encodeURIComponent(id));
      if (openId !== id) return 0;
      if (d.pending) return 300;
      detailShown = id;
      drawDetail(d);
      return burst("detail", 2000);
    } catch (e) {
      if (e.status === 401) return null;
      if (openId === id && detailShown !== id) {
        swap($("detail-summary"), [h("p", { class: "bad", role: "alert" }, "Reading pipeline " + id + " failed: " + describe(e))]);
      }
      return e.status === 404 ? 5000 : 4000;
    }
  });

  function openDetail(id) {
    openId = id;
    detailPipeline = null;
    detailShown = null;
    $("detail-title").textContent = id;
    $("detail-summary").replaceChildren(h("p", { class: "muted" }, "loading…"));
    $("detail-actions").replaceChildren();
    $("events").tBodies[0].replaceChildren();
    $("logs").replaceChildren();
    const dlg = $("detail");
    if (!dlg.open) dlg.showModal();
    detailPoll.stop();
    detailPoll.start();
  }
  // A notification's link (lua/oops/formats: PAGE#pipeline=ID) opens that
  // pipeline's detail once the fleet has loaded, as a click on its row does;
  // a hash that is not exactly that is ignored.
  function openFromHash() {
    const m = /^#pipeline=([a-z0-9]{1,24})$/.exec(location.hash);
    if (m && me) openDetail(m[1]);
  }
  function closeDetail() {
    if ($("detail").open) $("detail").close();
  }

  // ------------------------------------------------------------ release history

  // The release a rollback without "to" takes (as oopsctl rollback chooses):
  // the last SUCCEEDED one before the live one whose artifact is set and
  // differs from the live one's; null when the listed ones hold none.
  function previousRelease(list) {
    const i = list.findIndex((r) => r.live);
    if (i < 0) return null;
    const live = list[i];
    return list.slice(i + 1).find((r) => r.status === "SUCCEEDED" && r.artifact && r.artifact !== live.artifact) || null;
  }

  // A rollback from the history as the page shows it now: to release `to`,
  // or (null) to the previous one.
  let historyShown = null; // { key, releases }
  function rollbackTo(to) {
    const hs = historyShown;
    if (!hs || hs.key !== openHistory) return;
    const live = hs.releases.find((r) => r.live);
    const target = to === null ? previousRelease(hs.releases) : hs.releases.find((r) => r.id === to);
    if (!live || !target) return;
    confirmAction("rollback", { namespace: hs.key.ns, application: hs.key.app, environment: hs.key.env, live,
      to: target, previous: to === null });
  }

  function drawHistory(t) {
    const key = openHistory;
    const releases = t.releases || [];
    historyShown = { key, releases };
    const live = releases.find((r) => r.live) || null;
    const prev = previousRelease(releases);
    const app = key.ns + "/" + key.app + "/" + key.env;
    $("history-title").textContent = "Releases of " + key.ns + "/" + key.app + " " + key.env;
    $("history-summary").textContent = live ? "live: " + live.id + " (" + (live.artifact || "no artifact") + ", finished " +
      when(live.finished_at) + ")" : "no release has gone live yet";
    const acts = [];
    if (me && me.actions && live && prev) {
      acts.push(h("button", { type: "button", class: "act rollback", "data-action": "rollback", "data-to": "",
        "data-key": "rb:prev:" + app, onclick: () => rollbackTo(null) },
      "Roll back to the previous release (" + prev.id + ")"));
    }
    swap($("history-actions"), acts);
    fill($("releases").tBodies[0], releases.map((r) => h("tr", { "data-key": "rel:" + app + ":" + r.id,
      "data-release": r.id, "data-live": r.live ? "1" : "0" },
    h("td", null, h("code", null, r.id), r.live ? h("span", { class: "badge good", "data-state": "live" }, " live") : null),
    h("td", null, r.trigger || ""),
    h("td", null, r.finished_at ? when(r.finished_at) : h("span", { class: "run" }, "in progress · " + r.status)),
    h("td", { class: "mono msg" }, r.artifact || "—"),
    h("td", { class: "act-col" }, me && me.actions && live && !r.live && r.status === "SUCCEEDED" && r.artifact
      ? h("button", { type: "button", class: "act rollback", "data-action": "rollback", "data-to": r.id,
        "data-key": "rb:" + r.id, "aria-label": "Roll back to release " + r.id,
        onclick: () => rollbackTo(r.id) }, "Roll back to this")
      : null))), "no release has gone live yet", 5);
    // The audit log's rows for this application and environment (issue 34).
    fill($("operator-actions").tBodies[0], (t.actions || []).map((a, i) => h("tr", {
      "data-key": "oa:" + app + ":" + i + ":" + a.at, "data-outcome": a.outcome },
    h("td", null, when(a.at)),
    h("td", null, a.actor),
    h("td", null, a.action),
    h("td", null, a.pipeline ? h("code", null, a.pipeline) : "—"),
    h("td", null, h("span", { class: "badge " + (a.outcome === "done" ? "good" : a.outcome === "refused" ? "bad" : "warn") },
      a.outcome)),
    h("td", { class: "msg" }, a.reason || "—"),
    h("td", { class: "msg" }, a.detail || "—"))), "no operator has acted here yet", 7);
  }

  const historyPoll = poller(async () => {
    const key = openHistory;
    if (!key) return null;
    try {
      const t = await api("GET", "/api/history/" + [key.ns, key.app, key.env].map(encodeURIComponent).join("/"));
      if (openHistory !== key) return 0;
      if (t.pending) return 300;
      drawHistory(t);
      return burst("history", 3000);
    } catch (e) {
      if (e.status === 401) return null;
      if (openHistory !== key) return 0;
      if (e.status === 404) { // none yet (an oopsd that answers 404 rather than an empty list)
        drawHistory({ releases: [] });
        $("history-summary").textContent = e.message || "no release yet";
      } else $("history-summary").textContent = "Reading the release history failed: " + describe(e);
      return 5000;
    }
  });

  function showHistory(ns, app, env) {
    openHistory = { ns, app, env };
    historyShown = null;
    $("history-title").textContent = "Releases of " + ns + "/" + app + " " + env;
    $("history-summary").textContent = "loading…";
    $("history-actions").replaceChildren();
    $("releases").tBodies[0].replaceChildren();
    $("operator-actions").tBodies[0].replaceChildren();
    const dlg = $("history");
    if (!dlg.open) dlg.showModal();
    historyPoll.stop();
    historyPoll.start();
  }

  // ------------------------------------------------------------ actions

  const enc = encodeURIComponent;
  const withReason = (body, reason) => (reason ? Object.assign(body, { reason }) : body);
  // What each action does, said exactly, and how it is sent.
  const SPECS = {
    stop: (p) => ({
      title: "Stop pipeline " + p.id + "?",
      what: "Pipeline " + p.id + " of " + where(p) + " is stopped from " + p.status + ": it ends STOPPED and is not " +
        "deployed" + (p.status === "DEPLOYING" ? " further (a deploy already sent is not undone)" : "") +
        (p.status === "RUNNING" ? "; its build is cancelled" : "") + ". If it has left " + p.status +
        " meanwhile, nothing changes.",
      url: "/api/pipeline/" + enc(p.id) + "/stop",
      body: (reason) => withReason({ expect: p.status }, reason),
      done: (r) => "Stopped " + (r.id || p.id) + ": " + (r.from || p.status) + " → " + (r.status || "STOPPED") + ".",
    }),
    release: (p) => ({
      title: "Release pipeline " + p.id + "?",
      what: "Manual pipeline " + p.id + " of " + where(p) + (p.artifact ? " (artifact " + p.artifact + ")" : "") +
        " built successfully; releasing it deploys it at the servers' next scan, unless a deploy window, freeze " +
        "or slot holds it.",
      url: "/api/pipeline/" + enc(p.id) + "/deploy",
      body: (reason) => withReason({}, reason),
      done: (r) => "Released " + (r.id || p.id) + ": its deploy is requested.",
    }),
    override: (p) => ({
      needReason: true,
      title: "Override the " + p.hold + " holding " + p.id + "?",
      what: "Pipeline " + p.id + " of " + where(p) + " is held by a deploy " + p.hold +
        (p.message ? " (" + p.message + ")" : "") + ". Overriding releases it at the next scan, inside the " +
        p.hold + "; a deploy slot still bounds it. Your name and the reason are kept in its history.",
      url: "/api/pipeline/" + enc(p.id) + "/deploy",
      body: (reason) => ({ reason, override: true }),
      done: (r) => "Hold overridden on " + (r.id || p.id) + ": it deploys at the next scan.",
    }),
    promote: (p) => ({
      needReason: true,
      title: "Promote canary " + p.id + "?",
      what: "The canary of " + where(p) + " ends its current step (a pause, or an analysis) and goes on to the " +
        "next, at the next scan of the server driving it. Your name and the reason are kept in its history.",
      url: "/api/pipeline/" + enc(p.id) + "/promote",
      body: (reason) => ({ reason }),
      done: (r) => "Promotion of " + (r.id || p.id) + " requested" + (r.already ? " already" : "") + ".",
    }),
    promote_full: (p) => ({
      needReason: true,
      title: "Promote canary " + p.id + " fully?",
      what: "Every step left of the canary of " + where(p) + " is skipped: all traffic goes to it (weight 100) " +
        "and it finishes. Your name and the reason are kept in its history.",
      url: "/api/pipeline/" + enc(p.id) + "/promote",
      body: (reason) => ({ reason, full: true }),
      done: (r) => "Full promotion of " + (r.id || p.id) + " requested" + (r.already ? " already" : "") + ".",
    }),
    promote_now: (p) => ({
      needReason: true,
      title: "Promote release " + p.id + " to " + p.promotion.to + " now?",
      what: "Release " + p.id + " of " + where(p) + (p.artifact ? " (artifact " + p.artifact + ")" : "") +
        " is released to " + p.promotion.to + " now, its wait skipped; once, whoever else promotes it. " +
        "Your name and the reason are kept in the new pipeline's history.",
      url: "/api/pipeline/" + enc(p.id) + "/promote_now",
      body: (reason) => ({ reason, to: p.promotion.to }),
      done: (r) => (r.already ? "Promoted already: " : "Promoted to " + r.environment + ": ") + r.id + ".",
    }),
    approve: (p) => ({
      needReason: true,
      title: "Approve release " + p.id + "?",
      what: "Release " + p.id + " of " + where(p) + (p.artifact ? " (artifact " + p.artifact + ")" : "") +
        " has " + p.approval.count + " of the " + p.approval.needed + " approvals it needs before its deploy. " +
        "Yours counts once, and not if you created it. Your name and the reason are kept in its history.",
      url: "/api/pipeline/" + enc(p.id) + "/approve",
      body: (reason) => ({ reason }),
      done: (r) => (r.already ? "You approved " + (r.id || p.id) + " already: " : "Approved " + (r.id || p.id) +
        ": ") + r.approvals + " approval" + (r.approvals === 1 ? "" : "s") + " (" + (r.approved_by || "") + ").",
    }),
    reject: (p) => ({
      needReason: true,
      title: "Reject release " + p.id + "?",
      what: "Release " + p.id + " of " + where(p) + (p.artifact ? " (artifact " + p.artifact + ")" : "") +
        " is stopped before its deploy (STOPPED). Your name and the reason are kept in its history.",
      url: "/api/pipeline/" + enc(p.id) + "/reject",
      body: (reason) => ({ reason }),
      done: (r) => "Rejected " + (r.id || p.id) + ": " + (r.from || p.status) + " → STOPPED.",
    }),
    abort: (p) => ({
      needReason: true,
      title: "Abort canary " + p.id + "?",
      what: "The traffic of " + where(p) + " goes back to the stable release (weight 0), then pipeline " + p.id +
        " fails; its policy's on_failure decides what follows (a rollback). Your name and the reason are kept.",
      url: "/api/pipeline/" + enc(p.id) + "/abort",
      body: (reason) => ({ reason }),
      done: (r) => "Abort of " + (r.id || p.id) + " requested" + (r.already ? " already" : "") + ".",
    }),
    rollback: (t) => ({
      title: "Roll back " + t.namespace + "/" + t.application + " " + t.environment + " to " +
        (t.previous ? "the previous release" : "release " + t.to.id) + "?",
      what: "A new pipeline (trigger rollback) redeploys, without a build, the artifact " + t.to.artifact +
        " of release " + t.to.id + " (finished " + when(t.to.finished_at) + "), replacing the live release " +
        t.live.id + " (" + (t.live.artifact || "no artifact") + "). Refused while another pipeline of " +
        t.namespace + "/" + t.application + " " + t.environment + " is unfinished.",
      url: "/api/rollback",
      body: (reason) => withReason({ app: t.namespace + "/" + t.application, env: t.environment, to: t.to.id }, reason),
      done: (r) => "Rollback pipeline " + (r.id || "?") + " created: it redeploys " + (r.artifact || t.to.artifact) +
        " (release " + (r.rollback_to || t.to.id) + ").",
    }),
  };

  function reasonProblem(reason, required) {
    if (!reason) return required ? "A reason is required: it is kept in the pipeline's history." : "";
    const n = new TextEncoder().encode(reason).length;
    if (n > REASON_MAX) return "The reason is " + n + " bytes long; at most " + REASON_MAX + ".";
    if (/[\u0000-\u001f\u007f]/.test(reason)) return "The reason may not hold a control character.";
    return "";
  }
  function setResult(state, text) {
    const el = $("confirm-result");
    el.dataset.state = state;
    el.textContent = text;
  }
  function notice(state, text) {
    const el = $("notice");
    el.dataset.state = state;
    el.textContent = text;
    el.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { el.hidden = true; }, 30000);
  }

  function confirmAction(kind, target) {
    if (!me || !me.actions) return;
    const spec = SPECS[kind](target);
    spec.kind = kind;
    pendingAction = spec;
    $("confirm").dataset.action = kind;
    $("confirm-title").textContent = spec.title;
    $("confirm-what").textContent = spec.what;
    $("confirm-need").textContent = spec.needReason ? "(required; kept in the history)" : "(optional; kept in the history)";
    const input = $("confirm-reason");
    input.value = "";
    input.required = !!spec.needReason;
    input.removeAttribute("aria-invalid");
    input.disabled = false;
    setResult("", "");
    $("confirm-ok").hidden = false;
    $("confirm-ok").disabled = false;
    $("confirm-cancel").textContent = "Cancel";
    const dlg = $("confirm");
    if (!dlg.open) dlg.showModal();
    input.focus();
  }

  async function submitAction(ev) {
    ev.preventDefault();
    const spec = pendingAction;
    if (!spec || spec.busy || spec.sent) return;
    const input = $("confirm-reason");
    const reason = input.value.trim();
    const bad = reasonProblem(reason, spec.needReason);
    if (bad) {
      setResult("bad", bad);
      input.setAttribute("aria-invalid", "true");
      input.focus();
      return;
    }
    input.removeAttribute("aria-invalid");
    spec.busy = true;
    $("confirm-ok").disabled = true;
    setResult("busy", "Sending…");
    try {
      const r = (await api("POST", spec.url, spec.body(reason))) || {};
      spec.sent = true;
      const text = spec.done(r);
      if (pendingAction === spec) {
        setResult("ok", text);
        input.disabled = true;
        $("confirm-ok").hidden = true;
        $("confirm-cancel").textContent = "Close";
        $("confirm-cancel").focus();
      }
      notice("ok", text);
    } catch (e) {
      if (e.status === 401) return; // signed out: the sign-in form says why
      const text = "Refused: " + describe(e) + (e.status === 409 ? ". The page shows its state now." : "");
      if (pendingAction === spec) {
        setResult("bad", text);
        $("confirm-ok").disabled = false;
      } else notice("bad", text);
    } finally {
      spec.busy = false;
      // Show the effect (a new event, status, release) at once.
      burstUntil = Date.now() + BURST_MS;
      burstOf = new Set(["fleet", spec.kind === "rollback" ? "history" : "detail"]);
      fleetPoll.now();
      detailPoll.now();
      historyPoll.now();
    }
  }

  // ------------------------------------------------------------ sign-in

  function closeDialogs() {
    for (const id of ["confirm", "history", "detail"]) if ($(id).open) $(id).close();
  }
  function showWho() {
    const who = $("who-name");
    who.dataset.role = me.role;
    who.textContent = me.name ? me.name + " · " + me.role : "not signed in · read-only";
    who.title = me.actions ? "you may stop, release and roll back" : "read-only: actions need the operator role";
    $("signout").hidden = !getToken();
    $("who").hidden = false;
  }

  // Forget the token and the data; ask for a token (why: a refusal to show).
  function needSignIn(why, intro) {
    gen++;
    setToken(null);
    me = null;
    fleet = null;
    fetchedAt = 0;
    failures = 0;
    openId = null;
    openHistory = null;
    pendingAction = null;
    fleetPoll.stop();
    detailPoll.stop();
    historyPoll.stop();
    statsPoll.stop();
    stats = null;
    closeDialogs();
    document.body.classList.remove("can-act");
    for (const t of document.querySelectorAll("main tbody")) t.replaceChildren();
    $("alerts").replaceChildren();
    $("footer").textContent = "";
    $("notice").hidden = true;
    $("fleet").hidden = true;
    $("who").hidden = true;
    $("signin-why").textContent = intro || "This oopsd asks for a token.";
    $("signin-error").textContent = why || "";
    $("signin-wrap").hidden = false;
    liveSays("signed-out", "signed out");
    $("signin-token").focus();
  }

  let startTimer = null;
  async function start() {
    clearTimeout(startTimer);
    const g = ++gen;
    let m;
    try {
      m = await api("GET", "/api/me");
    } catch (e) {
      if (g !== gen || e.status === 401) return;
      if (e.status === 404) m = { name: null, role: "viewer", actions: false }; // an oopsd without /api/me
      else {
        if (!$("signin-wrap").hidden) $("signin-error").textContent = "Cannot sign in: " + describe(e);
        else liveSays("connecting", "connecting… /api/me: " + describe(e));
        startTimer = setTimeout(start, 3000);
        return;
      }
    }
    if (g !== gen) return;
    me = { name: typeof m.name === "string" ? m.name : null, role: String(m.role || "viewer"), actions: m.actions === true };
    document.body.classList.toggle("can-act", me.actions);
    showWho();
    $("signin-wrap").hidden = true;
    $("signin-error").textContent = "";
    $("fleet").hidden = false;
    if (!fleet) liveSays("connecting", "connecting…");
    fleetPoll.stop();
    fleetPoll.start();
    statsError = "";
    drawDelivery();
    statsPoll.stop();
    statsPoll.start();
  }

  $("signin").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = $("signin-token");
    const t = input.value.trim();
    if (!/^[\x21-\x7e]{1,4096}$/.test(t)) {
      $("signin-error").textContent = t ? "A token is printable ASCII without spaces." : "Enter your token.";
      input.focus();
      return;
    }
    setToken(t);
    input.value = "";
    $("signin-error").textContent = "";
    $("signin-submit").disabled = true;
    try {
      await start();
    } finally {
      $("signin-submit").disabled = false;
    }
  });
  $("signout").addEventListener("click", () => needSignIn("", "Signed out: the token is forgotten in this tab."));
  $("detail-close").addEventListener("click", closeDetail);
  $("detail").addEventListener("close", () => { openId = null; detailShown = null; detailPoll.stop(); });
  $("history-close").addEventListener("click", () => $("history").close());
  $("history").addEventListener("close", () => { openHistory = null; historyPoll.stop(); });
  $("confirm-form").addEventListener("submit", submitAction);
  $("confirm-cancel").addEventListener("click", () => $("confirm").close());
  $("confirm").addEventListener("close", () => {
    pendingAction = null;
    // The button that opened it may have been redrawn meanwhile: keep the focus in the dialog below.
    setTimeout(() => {
      if (document.activeElement && document.activeElement !== document.body) return;
      const below = $("history").open ? "history-close" : $("detail").open ? "detail-close" : null;
      if (below) $(below).focus();
    }, 0);
  });
  $("confirm-reason").addEventListener("input", () => {
    if ($("confirm-reason").getAttribute("aria-invalid") === "true") {
      $("confirm-reason").removeAttribute("aria-invalid");
      setResult("", "");
    }
  });
  // A link followed while the page is open changes only the hash.
  window.addEventListener("hashchange", () => { if (fleet) openFromHash(); });
  setInterval(tickLive, 1000);
  start();
})();
