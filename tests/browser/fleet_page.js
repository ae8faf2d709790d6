// The fleet page in a real browser (Debian's chromium, headless, through
// puppeteer-core: no downloaded browser). Run by tests/integration/fleet_page.sh,
// which starts MariaDB and three oopsd servers and prepares the pipelines;
// this prints one line per check: "PASS desc" or "FAIL desc<TAB>diagnostic".
//
// Environment: FLEET_URL (the page of the first server), FLEET_EXPECT (JSON:
// pipeline id -> status it sits in), FLEET_HOLD (a RUNNING pipeline),
// FLEET_WATCH (a ROLLING_OUT pipeline the script releases with
// FLEET_RELEASE_CMD, to watch it change to SUCCEEDED), FLEET_DETAIL (a
// finished pipeline whose history is opened), FLEET_KILL_PID and
// FLEET_KILL_NAME (the server killed with SIGKILL), FLEET_SHOTS (the directory
// for the screenshots), FLEET_SERVERS (names, comma-separated), FLEET_DB_PID
// (the MariaDB the servers use: frozen with SIGSTOP at the end, and thawed).
"use strict";
const puppeteer = require("puppeteer-core");
const { until } = require("./tap");
const { execFileSync } = require("child_process");
const path = require("path");

const env = process.env;
const expect = JSON.parse(env.FLEET_EXPECT);
const servers = env.FLEET_SERVERS.split(",");
let failures = 0;
function check(ok, desc, diag) {
  if (ok) console.log("PASS " + desc);
  else {
    failures++;
    console.log("FAIL " + desc + "\t" + String(diag || "").replace(/\s+/g, " ").slice(0, 400));
  }
}

(async () => {
  const browser = await puppeteer.launch({
    executablePath: env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  const errors = [], foreign = [];
  try {
    const page = await browser.newPage();
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    const origin = new URL(env.FLEET_URL).origin;
    page.on("request", (r) => { if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) foreign.push(r.url()); });
    if (env.FLEET_TOKEN) await page.setExtraHTTPHeaders({ Authorization: "Bearer " + env.FLEET_TOKEN });
    await page.setViewport({ width: 1280, height: 900 });
    const resp = await page.goto(env.FLEET_URL, { waitUntil: "load" });
    check(resp.status() === 200, "the page loads (HTTP " + resp.status() + ")");
    await page.evaluate(() => { window.__sameDocument = true; });

    // Servers: three, live and healthy.
    const live = await until(page, 30, (names) => names.every((n) =>
      document.querySelector(`tr[data-server="${n}"] [data-state="healthy"]`)), servers);
    check(live, "the page shows the three servers, healthy", await page.$eval("#servers", (t) => t.innerText));
    const leaders = await page.$$eval("#servers tbody tr", (rows) => rows.map((r) => r.cells[5].innerText).join(" "));
    check(/restart/.test(leaders), "one of them shows the restart leader lock", leaders);

    // Pipelines: every one, in the status it sits in.
    const ids = Object.keys(expect);
    const shown = await until(page, 30, (exp) => Object.entries(exp).every(([id, st]) =>
      document.querySelector(`tr.pipeline[data-id="${id}"][data-status="${st}"]`)), expect);
    const seen = await page.$$eval("tr.pipeline", (rows) => rows.map((r) => r.dataset.id + "=" + r.dataset.status).join(" "));
    check(shown, "the page shows the " + ids.length + " pipelines in their statuses (" +
      [...new Set(Object.values(expect))].sort().join(", ") + ")", seen);
    const bar = await page.$eval(`tr.pipeline[data-id="${env.FLEET_HOLD}"] .steps`, (e) =>
      [...e.children].map((s) => s.textContent + ":" + s.className).join(" "));
    check(/build:step active/.test(bar), "a RUNNING pipeline's step bar shows the build active", bar);
    const failedBar = await page.$$eval('tr.pipeline[data-status="ERROR"] .step.failed', (e) => e.length);
    check(failedBar > 0, "an ERROR pipeline's step bar marks the failed step", failedBar);
    const driver = await page.$eval(`tr.pipeline[data-id="${env.FLEET_HOLD}"]`, (r) => r.cells[3].innerText);
    check(servers.includes(driver.trim()), "the running pipeline names the server driving it", driver);
    const timerText = await page.$eval(`tr.pipeline[data-id="${env.FLEET_HOLD}"] .timer`, (e) => e.innerText);
    check(/\/ 2h/.test(timerText), "its time in status is shown against its timeout (2h)", timerText);
    const restarts = await page.$eval("#restarts", (t) => t.innerText);
    check(/\*\/30 \* \* \* \* \*/.test(restarts), "the restart schedule and its next occurrence are shown", restarts);
    const alerts = await page.$eval("#alerts", (t) => t.innerText);
    check(/memory/.test(alerts), "the firing alert is shown", alerts);
    const routes = await page.$eval("#routes", (t) => t.innerText);
    check(/log/.test(routes), "the notification route and its backlog are shown", routes);
    await page.screenshot({ path: path.join(env.FLEET_SHOTS, "fleet-laptop.png"), fullPage: true });

    // A status changes without a reload.
    execFileSync("bash", ["-c", env.FLEET_RELEASE_CMD], { stdio: "inherit" });
    const changed = await until(page, 40, (id) => {
      const r = document.querySelector(`tr.pipeline[data-id="${id}"]`);
      return r && r.dataset.status === "SUCCEEDED";
    }, env.FLEET_WATCH);
    const now = await page.$eval(`tr.pipeline[data-id="${env.FLEET_WATCH}"]`, (r) => r.dataset.status).catch(() => "?");
    check(changed, "the released rollout's status changes on the page: ROLLING_OUT → " + now, now);
    check(await page.evaluate(() => window.__sameDocument === true), "... without a reload of the page");

    // An event history, with the server of each transition.
    // the first cell (the id): the application's name is a button of its own (its release history)
    await page.click(`tr.pipeline[data-id="${env.FLEET_DETAIL}"] td:first-child`);
    const opened = await until(page, 20, () => document.querySelector("#detail[open]") &&
      document.querySelectorAll("#events tbody tr[data-event]").length >= 4);
    const events = await page.$eval("#events", (t) => t.innerText);
    check(opened, "a click opens the pipeline's event history", events);
    check(/INITIALIZED → RUNNING/.test(events) && /ROLLING_OUT → SUCCEEDED/.test(events),
      "... with its transitions", events);
    check(servers.some((s) => events.includes(s)), "... and the server that made each", events);
    await page.screenshot({ path: path.join(env.FLEET_SHOTS, "fleet-history.png") });
    await page.click("#detail-close");
    check(await until(page, 5, () => !document.querySelector("#detail[open]")), "the history closes");

    // A phone.
    await page.setViewport({ width: 390, height: 844, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    await new Promise((r) => setTimeout(r, 500));
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 1, "on a phone's width the page does not scroll sideways", overflow + " px too wide");
    await page.screenshot({ path: path.join(env.FLEET_SHOTS, "fleet-phone.png") });
    await page.setViewport({ width: 1280, height: 900 });

    // A server killed with SIGKILL shows as gone.
    const t0 = Date.now();
    process.kill(Number(env.FLEET_KILL_PID), "SIGKILL");
    const gone = await until(page, 30, (n) =>
      document.querySelector(`tr[data-server="${n}"] [data-state="gone"]`), env.FLEET_KILL_NAME);
    const took = ((Date.now() - t0) / 1000).toFixed(1);
    console.log("# the killed server showed as gone after " + took + " s");
    check(gone, env.FLEET_KILL_NAME + ", killed with SIGKILL, shows as gone (after " + took + " s)",
      await page.$eval("#servers", (t) => t.innerText));

    // The database freezes: the page keeps its data but says it is stale, how old, and why.
    const liveText = await page.$eval("#live", (e) => e.dataset.state + ": " + e.textContent);
    check(/^live: live · updated/.test(liveText), "before the freeze the page says it is live", liveText);
    process.kill(Number(env.FLEET_DB_PID), "SIGSTOP");
    let staleText = "";
    try {
      const stale = await until(page, 40, () => {
        const e = document.querySelector("#live");
        return e.dataset.state === "stale" && /reading the fleet failed: .+/.test(e.textContent);
      });
      staleText = await page.$eval("#live", (e) => e.textContent);
      check(stale, "with the database frozen the page says its data is stale, and why", staleText);
      check(/data \d+s old/.test(staleText), "... and how old it is", staleText);
      const rows = await page.$$eval("tr.pipeline", (r) => r.length);
      check(rows > 0, "... still showing the last data (" + rows + " pipelines)", rows);
      await page.screenshot({ path: path.join(env.FLEET_SHOTS, "fleet-stale.png") });
    } finally {
      process.kill(Number(env.FLEET_DB_PID), "SIGCONT");
    }
    const back = await until(page, 60, () => document.querySelector("#live").dataset.state === "live");
    check(back, "after the thaw it is live again", await page.$eval("#live", (e) => e.textContent));

    check(errors.length === 0, "no console error", errors.join(" | "));
    check(foreign.length === 0, "no request left the oopsd the page came from", foreign.join(" "));
  } catch (e) {
    check(false, "the browser run ended early", e && e.stack);
  } finally {
    await browser.close();
  }
  process.exit(failures ? 1 : 0);
})();
