// The fleet page's sign-in and actions in a real browser (Debian's chromium,
// headless, through puppeteer-core: no downloaded browser). Run by
// tests/integration/fleet_actions.sh, which starts MariaDB and an oopsd with
// --http-users (alice: operator, bob: viewer) and prepares the pipelines.
// Prints TAP: "ok N - ..." / "not ok N - ..." (diagnostics as "#" lines),
// ending with "1..N"; "# rollback-id ID" names the pipeline the page's
// rollback created (the script checks it with oopsctl).
//
// Environment: FA_URL (the page), FA_ALICE / FA_BOB (their tokens),
// FA_RUNNING (a RUNNING pipeline alice stops), FA_MANUAL (a manual pipeline in
// BUILD_SUCCEEDED alice releases), FA_HELD (an automatic one held by a freeze:
// alice overrides it), FA_APP (NS/APP/ENV with two releases, FA_R1 then FA_R2
// live: alice rolls back to FA_R1; FA_REFUSED is the reason of an oopsctl
// release of FA_R1 that was refused), FA_REASON_STOP, FA_REASON_RELEASE,
// FA_REASON_OVERRIDE, FA_REASON_ROLLBACK (the reasons typed), FA_STALE (a
// RUNNING pipeline that FA_STALE_CMD stops behind the page's back while its
// Stop is being confirmed), FA_SHOTS (the screenshots' directory), CHROMIUM.
"use strict";
const puppeteer = require("puppeteer-core");
const { check, end, until, sleep, click, post } = require("./tap");
const { execFileSync } = require("child_process");
const path = require("path");

const env = process.env;
const URL_ = env.FA_URL;
const origin = new URL(URL_).origin;
const [NS, APP, ENV] = env.FA_APP.split("/");
const text = (page, sel) => page.$eval(sel, (e) => e.innerText).catch(() => "(" + sel + " not found)");


// Console errors, page errors, foreign requests and every /api request of a
// page, each with the phase it happened in: a 401 is expected while signing
// in, a 403 when a viewer forges a POST, a 409/422 for the refused stop; nothing else.
function watch(page, who, log) {
  page.phase = "load";
  page.on("console", (m) => {
    if (m.type() === "error") log.errors.push({ who, phase: page.phase, text: m.text(), url: (m.location() || {}).url || "" });
  });
  page.on("pageerror", (e) => log.errors.push({ who, phase: page.phase, text: "page error: " + String(e), url: "" }));
  page.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith(origin) && !u.startsWith("data:")) log.foreign.push(u);
    if (u.startsWith(origin + "/api/")) {
      log.api.push({ who, phase: page.phase, method: r.method(), path: u.slice(origin.length), auth: r.headers().authorization || "" });
    }
  });
}
function unexpected(errors) {
  return errors.filter((e) => !((e.phase === "signin" && /status of 401/.test(e.text)) ||
    (e.phase === "forge" && /status of 403/.test(e.text)) || (e.phase === "refused" && /status of (409|422)/.test(e.text))));
}

async function signIn(page, token) {
  await page.click("#signin-token", { clickCount: 3 });
  await page.type("#signin-token", token);
  await click(page, "#signin-submit");
}
async function openRow(page, sel) {
  // the row's first cell (the id): a click elsewhere may land on the application's history button
  await click(page, sel + " td:first-child");
}
// Waits for the open confirmation, types the reason, confirms; -> the result's state and text.
async function confirmWith(page, reason) {
  if (reason !== null) {
    await page.click("#confirm-reason", { clickCount: 3 });
    await page.keyboard.press("Backspace");
    if (reason) await page.type("#confirm-reason", reason);
  }
  await click(page, "#confirm-ok");
  await until(page, 20, () => ["ok", "bad"].includes(document.getElementById("confirm-result").dataset.state));
  return page.$eval("#confirm-result", (e) => [e.dataset.state, e.textContent]);
}
// The detail's events table has a row by ACTOR whose reason cell is REASON exactly.
const eventBy = (actor, reason, status) => {
  const rows = [...document.querySelectorAll("#events tbody tr[data-event]")];
  const hit = rows.some((r) => r.dataset.actor === actor && r.querySelector("td.reason") &&
    r.querySelector("td.reason").textContent === reason && r.querySelector("td.actor").textContent === actor);
  return hit && (!status || (document.getElementById("detail-status") || {}).textContent.startsWith(status));
};

(async () => {
  const browser = await puppeteer.launch({
    executablePath: env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  const log = { errors: [], foreign: [], api: [] };
  try {
    // ---------------------------------------------------------------- alice signs in
    const ctxA = await browser.createBrowserContext();
    const a = await ctxA.newPage();
    watch(a, "alice", log);
    await a.setViewport({ width: 1280, height: 900 });
    const assets = {};
    a.on("response", (r) => { const p = r.url().slice(origin.length); if (!p.startsWith("/api/")) assets[p] = r.status(); });
    a.phase = "signin";
    const resp = await a.goto(URL_, { waitUntil: "load" });
    check(resp.status() === 200 && assets["/fleet.js"] === 200 && assets["/fleet.css"] === 200,
      "the page, its script and style load without a token (HTTP " + resp.status() + ")", JSON.stringify(assets));
    await a.evaluate(() => { window.__sameDocument = true; });
    const asked = await until(a, 20, () => !document.getElementById("signin-wrap").hidden &&
      document.getElementById("fleet").hidden && document.activeElement === document.getElementById("signin-token"));
    check(asked, "without a token the page asks for one (the token field focused), showing no data",
      await text(a, "body"));
    check(await a.$eval("#signin-token", (e) => e.type === "password" && !!e.labels.length),
      "... a labelled password field");
    check((await a.$$("tr.pipeline")).length === 0, "... and no pipeline row");

    await signIn(a, "wrong-" + env.FA_ALICE);
    const refused = await until(a, 20, () => /refused/.test(document.getElementById("signin-error").textContent));
    check(refused, "a wrong token is refused, said on the form", await text(a, "#signin-wrap"));
    check(await a.evaluate(() => sessionStorage.getItem("oopsd-token") === null && document.getElementById("fleet").hidden),
      "... forgotten, still no data");

    await signIn(a, env.FA_ALICE);
    const signed = await until(a, 30, () => document.getElementById("who-name").textContent === "alice · operator" &&
      document.querySelectorAll("tr.pipeline").length > 0);
    check(signed, "alice signs in through the form: the header says alice · operator, the pipelines show",
      await text(a, "header") + " | " + await text(a, "#signin-wrap"));
    a.phase = "alice";
    const store = await a.evaluate(() => ({ session: sessionStorage.getItem("oopsd-token"), local: localStorage.length,
      cookie: document.cookie }));
    check(store.session === env.FA_ALICE && store.local === 0 && store.cookie === "",
      "the token is kept in sessionStorage only (no localStorage, no cookie)",
      JSON.stringify({ session: store.session === env.FA_ALICE, local: store.local, cookie: store.cookie }));
    check(await a.$eval("#signout", (e) => !e.hidden && e.tagName === "BUTTON"), "a sign-out button is shown");

    // Waiting to deploy: the freeze's pipeline with why, the manual one awaiting its release.
    const heldSel = `#held tr.held-row[data-id="${env.FA_HELD}"][data-hold="freeze"]`;
    const held = await until(a, 30, (sel) => {
      const r = document.querySelector(sel);
      return r && /freeze/.test(r.querySelector(".why").textContent);
    }, heldSel);
    check(held, "the held pipeline is listed under Waiting to deploy: held by freeze, with why", await text(a, "#held"));
    check(await until(a, 10, (id) => document.querySelector(`#held tr[data-id="${id}"][data-hold="release"]`), env.FA_MANUAL),
      "... and the manual pipeline awaiting its release", await text(a, "#held"));
    check(await a.$(heldSel + ' button[data-action="override"]') !== null, "... with an Override hold button for alice");
    await a.focus(heldSel + ' button[data-action="override"]');
    await sleep(3500); // the fleet is redrawn every 1.5 s
    const kept = await a.evaluate(() => document.activeElement && document.activeElement.dataset.key);
    check(kept === "override:" + env.FA_HELD, "the keyboard focus on a button survives the redraws", kept);
    await a.screenshot({ path: path.join(env.FA_SHOTS, "actions-operator.png"), fullPage: true });

    // ---------------------------------------------------------------- bob, a viewer
    const ctxB = await browser.createBrowserContext();
    const b = await ctxB.newPage();
    watch(b, "bob", log);
    await b.setViewport({ width: 1280, height: 900 });
    b.phase = "signin";
    await b.goto(URL_, { waitUntil: "load" });
    await until(b, 20, () => !document.getElementById("signin-wrap").hidden);
    await signIn(b, env.FA_BOB);
    const bobIn = await until(b, 30, (id) => document.getElementById("who-name").textContent === "bob · viewer" &&
      document.querySelector(`tr.pipeline[data-id="${id}"][data-status="RUNNING"]`), env.FA_RUNNING);
    check(bobIn, "bob signs in: bob · viewer, the pipelines show", await text(b, "header"));
    b.phase = "bob";
    await until(b, 20, (id) => document.querySelector(`#held tr[data-id="${id}"]`), env.FA_HELD);
    await openRow(b, `tr.pipeline[data-id="${env.FA_RUNNING}"]`);
    await until(b, 20, () => document.querySelector("#detail[open]") &&
      document.querySelectorAll("#events tbody tr[data-event]").length > 0);
    const bobDetail = await b.$$eval("#detail[open] button", (x) => x.map((e) => e.textContent).join(" | "));
    await click(b, "#detail-close");
    await until(b, 5, () => !document.querySelector("#detail[open]"));
    await click(b, `#pipelines button[data-history="${env.FA_APP}"]`);
    await until(b, 20, (r1) => document.querySelector("#history[open]") &&
      document.querySelector(`#releases tr[data-release="${r1}"]`), env.FA_R1);
    const bobButtons = await b.evaluate(() => ({
      actions: document.querySelectorAll("[data-action]").length,
      labels: [...document.querySelectorAll("button")].filter((x) => x.getClientRects().length > 0)
        .map((x) => x.textContent).filter((t) => /^(Stop|Release|Override hold|Roll back.*|Confirm)$/.test(t)),
      column: [...document.querySelectorAll(".act-col")].filter((e) => e.offsetParent !== null).length,
    }));
    check(bobButtons.actions === 0 && bobButtons.labels.length === 0 && bobButtons.column === 0 &&
      !/Stop/.test(bobDetail) && /Release history/.test(bobDetail),
      "the viewer's page shows no action button (fleet, held list, a RUNNING pipeline's detail, a release history)",
      JSON.stringify(bobButtons) + " detail: " + bobDetail);
    await b.screenshot({ path: path.join(env.FA_SHOTS, "actions-viewer.png") });
    b.phase = "forge";
    const forged = await b.evaluate(async (id, tok) => {
      const r = await fetch("/api/pipeline/" + id + "/stop", { method: "POST",
        headers: { "Content-Type": "application/json", Authorization: "Bearer " + tok },
        body: JSON.stringify({ reason: "forged by a viewer", expect: "RUNNING" }) });
      return [r.status, await r.text()];
    }, env.FA_RUNNING, env.FA_BOB);
    check(forged[0] === 403, "a POST forged from the viewer's page (bob's token) gets 403", forged.join(" "));
    b.phase = "bob";

    // ---------------------------------------------------------------- a foreign origin
    const body = JSON.stringify({ reason: "from evil.example", expect: "RUNNING" });
    const stopUrl = origin + "/api/pipeline/" + env.FA_RUNNING + "/stop";
    const evil = await post(stopUrl, { Authorization: "Bearer " + env.FA_ALICE, Origin: "http://evil.example" }, body);
    check(evil[0] === 403, "a POST with alice's token but Origin: http://evil.example gets 403", evil.join(" "));
    const site = await post(stopUrl, { Authorization: "Bearer " + env.FA_ALICE, "Sec-Fetch-Site": "cross-site" }, body);
    check(site[0] === 403, "... and one with Sec-Fetch-Site: cross-site", site.join(" "));
    await sleep(2000); // a refusal that changed something would show by now
    check(await until(a, 5, (id) => document.querySelector(`tr.pipeline[data-id="${id}"][data-status="RUNNING"]`), env.FA_RUNNING),
      "... and the pipeline is still RUNNING", await text(a, `tr.pipeline[data-id="${env.FA_RUNNING}"]`));

    // ---------------------------------------------------------------- alice stops a running pipeline
    await openRow(a, `tr.pipeline[data-id="${env.FA_RUNNING}"]`);
    const stopBtn = await until(a, 20, () => document.querySelector("#detail[open]") &&
      document.querySelector('#detail-actions button[data-action="stop"]'));
    const acts = await a.$$eval("#detail-actions button[data-action]", (x) => x.map((e) => e.dataset.action).join(","));
    check(stopBtn && acts === "stop", "the RUNNING pipeline's detail offers Stop (only)", acts);
    await click(a, '#detail-actions button[data-action="stop"]');
    const opened = await until(a, 10, () => document.querySelector("#confirm[open]"));
    const what = await text(a, "#confirm-what");
    check(opened && what.includes(env.FA_RUNNING) && /RUNNING/.test(what) && /STOPPED/.test(what),
      "Stop opens a confirmation saying what happens (the pipeline, from RUNNING, ends STOPPED)", what);
    check(await a.evaluate(() => document.activeElement === document.getElementById("confirm-reason") &&
      !!document.getElementById("confirm-reason").labels.length), "... its labelled reason field has the focus");
    const [st1, res1] = await confirmWith(a, env.FA_REASON_STOP);
    check(st1 === "ok" && /Stopped/.test(res1) && /RUNNING → STOPPED/.test(res1), "confirming stops it: the result is shown", res1);
    const stopShown = await until(a, 30, eventBy, "alice@page", env.FA_REASON_STOP, "STOPPED");
    const evStop = await text(a, "#events");
    check(stopShown, "its history shows the STOPPED event by alice@page with the reason, without a reload", evStop);
    check(await a.evaluate(() => window.__sameDocument === true), "... (the same document)");
    check(await until(a, 10, () => !document.querySelector("#detail-actions button[data-action]")),
      "... and no action is offered on the stopped pipeline");
    await a.screenshot({ path: path.join(env.FA_SHOTS, "actions-stopped.png") });
    await click(a, "#confirm-cancel");
    check(await until(a, 5, () => !document.querySelector("#confirm[open]") && document.querySelector("#detail[open]")),
      "the confirmation closes, back to the detail");
    await click(a, "#detail-close");
    await until(a, 5, () => !document.querySelector("#detail[open]"));

    // ---------------------------------------------------------------- a refusal is shown
    await openRow(a, `tr.pipeline[data-id="${env.FA_STALE}"]`);
    await until(a, 20, () => document.querySelector('#detail[open] #detail-actions button[data-action="stop"]'));
    await click(a, '#detail-actions button[data-action="stop"]');
    await until(a, 10, () => document.querySelector("#confirm[open]"));
    execFileSync("bash", ["-c", env.FA_STALE_CMD], { stdio: "inherit" }); // stopped meanwhile, elsewhere
    a.phase = "refused";
    const [st5, res5] = await confirmWith(a, "too late");
    a.phase = "alice";
    console.log("# the refusal shown: " + res5);
    check(st5 === "bad" && /^Refused: HTTP (409|422): \S/.test(res5),
      "a stop the server refuses (the pipeline was stopped elsewhere meanwhile) shows the server's error", res5);
    check(await a.$eval("#confirm-ok", (e) => !e.hidden && !e.disabled) &&
      await a.$eval("#confirm[open] #confirm-cancel", (e) => e.textContent === "Cancel"), "... and the confirmation stays open");
    await a.keyboard.press("Escape");
    check(await until(a, 5, () => !document.querySelector("#confirm[open]") && document.querySelector("#detail[open]")),
      "Escape closes the confirmation");
    check(await until(a, 20, () => (document.getElementById("detail-status") || {}).textContent === "STOPPED" &&
      !document.querySelector("#detail-actions button[data-action]")), "... and the detail shows it STOPPED, with no action left",
    await text(a, "#detail-summary"));
    await click(a, "#detail-close");
    await until(a, 5, () => !document.querySelector("#detail[open]"));

    // ---------------------------------------------------------------- alice releases a manual pipeline
    await openRow(a, `tr.pipeline[data-id="${env.FA_MANUAL}"]`);
    const relBtn = await until(a, 20, () => document.querySelector("#detail[open]") &&
      document.querySelector('#detail-actions button[data-action="release"]'));
    const acts2 = await a.$$eval("#detail-actions button[data-action]", (x) => x.map((e) => e.dataset.action).join(","));
    check(relBtn && acts2 === "stop,release", "the manual BUILD_SUCCEEDED pipeline offers Stop and Release", acts2);
    await click(a, '#detail-actions button[data-action="release"]');
    await until(a, 10, () => document.querySelector("#confirm[open]"));
    const what2 = await text(a, "#confirm-what");
    check(what2.includes(env.FA_MANUAL) && /deploy/.test(what2), "Release opens a confirmation saying it deploys", what2);
    const [st2, res2] = await confirmWith(a, env.FA_REASON_RELEASE);
    check(st2 === "ok" && /Released/.test(res2), "confirming releases it: the result is shown", res2);
    const relShown = await until(a, 30, eventBy, "alice@page", env.FA_REASON_RELEASE, "");
    check(relShown, "its history shows the release by alice@page with the reason, without a reload", await text(a, "#events"));
    await click(a, "#confirm-cancel");
    await click(a, "#detail-close");
    await until(a, 5, () => !document.querySelector("#detail[open]"));

    // ---------------------------------------------------------------- alice overrides a freeze
    await openRow(a, heldSel);
    const ovBtn = await until(a, 20, () => document.querySelector("#detail[open]") &&
      document.querySelector('#detail-actions button[data-action="override"]'));
    check(ovBtn, "the held pipeline's detail offers Override hold", await text(a, "#detail-actions"));
    await click(a, '#detail-actions button[data-action="override"]');
    await until(a, 10, () => document.querySelector("#confirm[open]"));
    const what3 = await text(a, "#confirm-what");
    check(what3.includes(env.FA_HELD) && /freeze/.test(what3), "Override opens a confirmation naming the freeze", what3);
    const posts = () => log.api.filter((r) => r.method === "POST" && r.path.includes(env.FA_HELD)).length;
    const [st0, res0] = await confirmWith(a, "");
    check(st0 === "bad" && /reason is required/i.test(res0) && posts() === 0,
      "... without a reason it is not sent: a reason is required", res0 + " (POSTs: " + posts() + ")");
    const [st3, res3] = await confirmWith(a, env.FA_REASON_OVERRIDE);
    check(st3 === "ok" && /overridden/i.test(res3) && posts() === 1, "with a reason the hold is overridden", res3);
    check(await until(a, 30, eventBy, "alice@page", env.FA_REASON_OVERRIDE, ""),
      "its history shows the override by alice@page with the reason", await text(a, "#events"));
    await click(a, "#confirm-cancel");
    await click(a, "#detail-close");
    await until(a, 5, () => !document.querySelector("#detail[open]"));

    // ---------------------------------------------------------------- the release history, a rollback
    await click(a, `#pipelines button[data-history="${env.FA_APP}"]`);
    const hist = await until(a, 20, (r1, r2) => document.querySelector("#history[open]") &&
      document.querySelector(`#releases tr[data-release="${r2}"][data-live="1"]`) &&
      document.querySelector(`#releases tr[data-release="${r1}"][data-live="0"]`), env.FA_R1, env.FA_R2);
    const histText = await text(a, "#history");
    check(hist && /reg\/web:2/.test(histText) && /reg\/web:1/.test(histText) && /release/.test(histText),
      "the application's name opens its release history: the live one marked, trigger, finished time, artifact", histText);
    const prevBtn = await a.$eval('#history-actions button[data-action="rollback"]', (e) => e.textContent).catch(() => "");
    check(prevBtn.includes(env.FA_R1), "... with Roll back to the previous release (" + env.FA_R1 + ")", prevBtn);
    check(await a.$(`#releases tr[data-release="${env.FA_R1}"] button[data-action="rollback"]`) !== null &&
      await a.$(`#releases tr[data-release="${env.FA_R2}"] button[data-action="rollback"]`) === null,
    "... and Roll back to this on the earlier release, not on the live one");
    await click(a, '#history-actions button[data-action="rollback"]');
    await until(a, 10, () => document.querySelector("#confirm[open]"));
    const what4 = await text(a, "#confirm-what");
    check(what4.includes(env.FA_R1) && what4.includes(env.FA_R2) && /reg\/web:1/.test(what4),
      "Roll back opens a confirmation naming the release, its artifact and the live one", what4);
    const [st4, res4] = await confirmWith(a, env.FA_REASON_ROLLBACK);
    const rb = (/Rollback pipeline ([a-z0-9]+) created/.exec(res4) || [])[1];
    check(st4 === "ok" && rb, "confirming creates the rollback pipeline: the result is shown", res4);
    if (rb) console.log("# rollback-id " + rb);
    await click(a, "#confirm-cancel");
    check(await until(a, 30, (id) => document.querySelector(`#releases tr[data-release="${id}"]`), rb || "none"),
      "the history shows the rollback without a reload", await text(a, "#releases"));
    // the operators' actions here, from the audit log: the refused release
    // with oopsctl's words, and alice's rollback (issue 34)
    const acted = await until(a, 20, (reason) => {
      const rows = [...document.querySelectorAll("#operator-actions tbody tr")].map((r) => r.textContent);
      return rows.some((t) => t.includes(reason) && /refused/.test(t) && /deploys automatically/.test(t)) &&
        rows.some((t) => /alice@page/.test(t) && /rollback/.test(t) && /done/.test(t));
    }, env.FA_REFUSED);
    check(acted, "... and its operators' actions: the refused release with what oopsctl said, and alice's rollback",
      await text(a, "#operator-actions"));
    await a.screenshot({ path: path.join(env.FA_SHOTS, "actions-history.png") });
    await click(a, "#history-close");
    await until(a, 5, () => !document.querySelector("#history[open]"));

    // ---------------------------------------------------------------- a phone
    await a.setViewport({ width: 390, height: 844, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    await sleep(500);
    const overflow = await a.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 1, "on a phone's width the operator's page does not scroll sideways", overflow + " px too wide");
    await a.screenshot({ path: path.join(env.FA_SHOTS, "actions-phone.png"), fullPage: true });
    await click(a, `#pipelines button[data-history="${env.FA_APP}"]`);
    await until(a, 20, () => document.querySelector('#history[open] #releases button[data-action="rollback"]'));
    await click(a, '#releases button[data-action="rollback"]');
    await until(a, 10, () => document.querySelector("#confirm[open]"));
    const fits = await a.evaluate(() => [document.documentElement.scrollWidth - window.innerWidth,
      ...["history", "confirm"].map((id) => { const d = document.getElementById(id); return d.scrollWidth - d.clientWidth; })]);
    check(fits.every((x) => x <= 1), "... nor do its release history and a confirmation (px too wide: page, history, confirmation)",
      fits.join(", "));
    await a.screenshot({ path: path.join(env.FA_SHOTS, "actions-phone-confirm.png") });
    await click(a, "#confirm-cancel");
    await until(a, 5, () => !document.querySelector("#confirm[open]"));
    await click(a, "#history-close");
    await until(a, 5, () => !document.querySelector("#history[open]"));
    await a.setViewport({ width: 1280, height: 900 });

    // ---------------------------------------------------------------- every /api request carried the token
    const bare = log.api.filter((r) => r.phase !== "signin" && r.phase !== "load" &&
      r.auth !== "Bearer " + (r.who === "alice" ? env.FA_ALICE : env.FA_BOB));
    check(bare.length === 0 && log.api.length > 0, "every /api request once signed in carried its user's bearer token (" +
      log.api.length + " requests)", JSON.stringify(bare.slice(0, 5)));

    // ---------------------------------------------------------------- sign out
    await click(a, "#signout");
    const out = await until(a, 10, () => !document.getElementById("signin-wrap").hidden &&
      document.getElementById("fleet").hidden && document.querySelectorAll("tr.pipeline").length === 0 &&
      sessionStorage.getItem("oopsd-token") === null);
    check(out, "sign out forgets the token and the data, and shows the form", await text(a, "body"));
    a.phase = "signin";
    await a.reload({ waitUntil: "load" });
    check(await until(a, 20, () => !document.getElementById("signin-wrap").hidden && document.getElementById("fleet").hidden),
      "... and a reload asks for the token again");

    const bad = unexpected(log.errors);
    check(bad.length === 0, "no console error (but the 401s while signing in and the viewer's 403)",
      bad.map((e) => e.who + "/" + e.phase + ": " + e.text + " " + e.url).join("\n"));
    check(log.foreign.length === 0, "no request left the oopsd the page came from", log.foreign.join(" "));
  } catch (e) {
    check(false, "the browser run ended early", e && e.stack);
  } finally {
    await browser.close();
  }
  end();
})();
