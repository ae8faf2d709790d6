// The fleet page's Delivery panel (issue 39) in a real browser (Debian's
// chromium, headless, through puppeteer-core). Run by
// tests/integration/stats_page.sh, which writes the history of
// tests/integration/stats.sh (its figures are known) and starts one oopsd
// with --http-users. Prints TAP ("ok N - ...", "not ok N - ...", "#" lines,
// "1..N").
//
// Environment: SP_URL (the page), SP_TOKEN (a viewer's token, typed into the
// sign-in form: the panel's requests carry it as the page's other ones do),
// SP_SHOTS (the directory for the screenshots), CHROMIUM.
"use strict";
const puppeteer = require("puppeteer-core");
const { check, end, until, sleep } = require("./tap");
const path = require("path");

const env = process.env;
const origin = new URL(env.SP_URL).origin;
const text = (page, sel) => page.$eval(sel, (e) => e.innerText.replace(/\s+/g, " ").trim())
  .catch(() => "(" + sel + " not found)");

// What a card shows: its big number, the line below, and its chart as data.
function card(page, id) {
  return page.$eval("#" + id, (c) => {
    const svg = c.querySelector("svg");
    const days = svg ? [...svg.querySelectorAll(":scope > g")] : []; // a <g> per day
    return {
      figure: (c.querySelector(".figure") || {}).textContent || "",
      sub: ((c.querySelector(".figure + p") || {}).textContent || "").replace(/\s+/g, " ").trim(),
      role: svg && svg.getAttribute("role"),
      label: svg && svg.getAttribute("aria-label"),
      title: svg && svg.querySelector(":scope > title") ? svg.querySelector(":scope > title").textContent : null,
      slots: days.length,
      bars: days.filter((g) => g.querySelector("rect.bar")).length,
      tips: days.map((g) => (g.querySelector("title") || {}).textContent || ""),
    };
  }).catch((e) => ({ figure: "(#" + id + ": " + e.message + ")", sub: "", tips: [] }));
}
const show = (c) => JSON.stringify({ figure: c.figure, sub: c.sub, label: c.label, slots: c.slots, bars: c.bars });
// The four cards against their expected figure and line (regexes of the line).
async function figures(page, win, want) {
  for (const [id, figure, sub] of want) {
    const c = await card(page, id);
    check(c.figure === figure && sub.test(c.sub), win + ": #" + id + " shows " + figure + " (" + sub.source + ")", show(c));
  }
}
const pressed = (page) => page.$$eval("#delivery-window button[data-window]", (bs) =>
  bs.map((b) => b.dataset.window + "=" + b.getAttribute("aria-pressed")).join(" "));

(async () => {
  const browser = await puppeteer.launch({
    executablePath: env.CHROMIUM || "/usr/bin/chromium", headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  const errors = [], foreign = [], statsRequests = [];
  try {
    const page = await browser.newPage();
    // The sign-in's 401 is logged by chromium as a failed resource: expected.
    page.on("console", (m) => { if (m.type() === "error" && !/status of 401/.test(m.text())) errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push("page error: " + String(e)));
    page.on("request", (r) => {
      if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) foreign.push(r.url());
      if (new URL(r.url()).pathname === "/api/stats") statsRequests.push({ at: Date.now(), auth: r.headers().authorization || "" });
    });
    const answers = [];
    page.on("response", (r) => { if (new URL(r.url()).pathname === "/api/stats") answers.push(r.status()); });
    await page.setViewport({ width: 1280, height: 900 });
    await page.goto(env.SP_URL, { waitUntil: "load" });
    await until(page, 20, () => !document.getElementById("signin-wrap").hidden);
    await page.type("#signin-token", env.SP_TOKEN);
    await page.click("#signin-submit");

    // The panel, the 30-day window first.
    const shown = await until(page, 40, () => !!document.querySelector("#delivery-frequency .figure"));
    check(shown, "the Delivery panel shows its figures after signing in", await text(page, "#delivery-section"));
    console.log("# /api/stats answers so far: " + answers.join(" "));
    const order = await page.$$eval("main > *", (l) => l.map((e) => e.id || e.className).join(","));
    check(/pipelines-section,delivery-section,columns/.test(order), "... after the Pipelines, before the restarts and alerts",
      order);
    check(await pressed(page) === "7d=false 30d=true 90d=false", "the 30-day window is selected by default (aria-pressed)",
      await pressed(page));
    check(/^Delivery/.test(await text(page, "#delivery-section h2")), "the section is titled Delivery");
    await figures(page, "30d", [
      ["delivery-frequency", "0.20 / day", /^6 releases live$/],
      ["delivery-lead", "3h 30m", /^p90 6h$/],
      ["delivery-failure", "37.5 %", /^3 of 8 deployments$/],
      ["delivery-restore", "1h 15m", /^2 failures restored, 1 open$/],
    ]);
    const f30 = await card(page, "delivery-frequency");
    check(f30.role === "img" && f30.label === "releases live per day, last 30 days" && f30.title === f30.label &&
      f30.slots === 30, "its frequency chart: role img, labelled, a slot per day of the 30", show(f30));
    const age = await text(page, "#delivery-age");
    check(/^computed at \d\d:\d\d:\d\dZ$/.test(age), "when the figures were computed is shown, without a 'whole " +
      "since' note (nothing was capped)", age);
    check(await page.$eval("#delivery-error", (e) => e.textContent === "" && getComputedStyle(e).display === "none"),
      "no error shown", await text(page, "#delivery-error"));
    await page.screenshot({ path: path.join(env.SP_SHOTS, "stats-laptop.png"), fullPage: true });

    // 7 days.
    await page.click('#delivery-window button[data-window="7d"]');
    const moved = await until(page, 10, () =>
      document.querySelector("#delivery-frequency .figure").textContent === "0.71 / day");
    check(moved, "a click on 7 days shows the 7-day figures", await text(page, "#delivery-frequency"));
    check(await pressed(page) === "7d=true 30d=false 90d=false", "... and aria-pressed moves to it", await pressed(page));
    await figures(page, "7d", [
      ["delivery-frequency", "0.71 / day", /^5 releases live$/],
      ["delivery-lead", "3h", /^p90 5h$/],
      ["delivery-failure", "42.9 %", /^3 of 7 deployments$/],
      ["delivery-restore", "1h 15m", /^2 failures restored, 1 open$/],
    ]);
    const freq = await card(page, "delivery-frequency");
    const counts = freq.tips.map((t) => { const m = / (\d+) releases? live$/.exec(t); return m ? Number(m[1]) : NaN; });
    check(freq.slots === 7 && counts.every((c) => c >= 0), "the 7-day frequency chart has 7 day slots, each titled " +
      "with its count", freq.tips.join(" | "));
    check(counts.filter((c) => c >= 1).length === 5 && counts.reduce((a, c) => a + c, 0) === 5 && freq.bars === 5,
      "... 5 days with a release, 5 releases in all, a bar for each", counts.join(",") + " bars " + freq.bars);
    check(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ: /.test(freq.tips[0] || ""), "... a bar's title starts with its day",
      freq.tips[0]);
    for (const id of ["delivery-frequency", "delivery-lead", "delivery-failure", "delivery-restore"]) {
      const c = await card(page, id);
      check(c.role === "img" && /, last 7 days$/.test(c.label || "") && c.title === c.label && c.slots === 7,
        "#" + id + ": an svg role=img labelled for the 7 days, a <title>, 7 slots", show(c));
    }
    const lead = await card(page, "delivery-lead");
    check(lead.bars === 5 && lead.tips.filter((t) => /Z: no data$/.test(t)).length === 2,
      "the lead-time chart: a bar on the 5 days with a release, none on the 2 without", lead.tips.join(" | "));
    const failure = await card(page, "delivery-failure");
    check(/\b3 of 7\b/.test(failure.sub), "the failure card says 3 of 7", failure.sub);
    check(failure.tips.some((t) => /: 100\.0 %, 1 of 1 deployment$/.test(t)), "... a day's rate in its bar's title",
      failure.tips.join(" | "));
    check(/\b1 open\b/.test((await card(page, "delivery-restore")).sub), "the restore card shows 1 open",
      await text(page, "#delivery-restore"));

    // The figures were asked for with the page's token, and not again within the minute the server keeps them.
    check(statsRequests.length > 0 && statsRequests.every((r) => r.auth === "Bearer " + env.SP_TOKEN),
      "every /api/stats request carried the page's bearer token", statsRequests.length + " requests");
    const oks = [];
    answers.forEach((s, i) => { if (s === 200 && statsRequests[i]) oks.push(statsRequests[i].at); });
    check(oks.length >= 1 && oks.every((t, i) => i === 0 || t - oks[i - 1] >= 59000),
      "the figures are fetched at most once a minute once shown", "answers " + answers.join(" "));

    // A phone: the cards wrap, nothing wider than the section. (Puppeteer
    // reloads the page to emulate a mobile one: the token is kept in the tab.)
    await page.setViewport({ width: 390, height: 844, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    const again = await until(page, 30, () => !!document.querySelector("#delivery-frequency .figure"));
    check(again, "at a phone's width the panel shows its figures", await text(page, "#delivery-section"));
    await sleep(300);
    const phone = await page.evaluate(() => {
      const s = document.getElementById("delivery-section");
      const box = s.getBoundingClientRect();
      const cards = ["delivery-frequency", "delivery-lead", "delivery-failure", "delivery-restore"].map((id) => {
        const r = document.getElementById(id).getBoundingClientRect();
        return { id, w: Math.round(r.width), h: Math.round(r.height), top: Math.round(r.top), left: r.left,
          right: r.right };
      });
      return { scroll: s.scrollWidth, client: s.clientWidth, left: box.left, right: box.right, cards,
        page: document.documentElement.scrollWidth - window.innerWidth };
    });
    check(phone.cards.every((c) => c.w > 0 && c.h > 0 && c.left >= phone.left && c.right <= phone.right + 0.5),
      "on a phone's width the four cards are visible, inside the section", JSON.stringify(phone.cards));
    check(new Set(phone.cards.map((c) => c.top)).size > 1, "... wrapped on more than one row", JSON.stringify(phone.cards));
    check(phone.scroll <= phone.client, "... and the section does not overflow sideways (scrollWidth " + phone.scroll +
      " <= clientWidth " + phone.client + ")", JSON.stringify(phone));
    check(phone.page <= 1, "... nor does the page", phone.page + " px too wide");
    await (await page.$("#delivery-section")).screenshot({ path: path.join(env.SP_SHOTS, "stats-phone.png") });

    check(errors.length === 0, "no console or page error (a CSP refusal would be one)", errors.join("\n"));
    check(foreign.length === 0, "no request left the oopsd the page came from", foreign.join(" "));
  } catch (e) {
    check(false, "the browser run", String((e && e.stack) || e));
  } finally {
    await browser.close();
    end();
  }
})();
