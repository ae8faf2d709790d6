// A canary on the fleet page (issue 38) in a real browser (Debian's chromium,
// headless, through puppeteer-core). Run by tests/integration/canary_page.sh,
// once per phase. Prints TAP ("ok N - ...", "not ok N - ...", "#" lines,
// "1..N").
//
// Environment: CP_URL (the page), CP_ALICE / CP_BOB (an operator's and a
// viewer's tokens), CP_PHASE ("promote": the paused canary CP_ID is checked,
// bob's view too, then promoted by alice; "abort": CP_ID aborted by alice;
// "approve": the release CP_ID waiting for one approval, bob's view, then
// approved by alice; "promote_now": the live staging release CP_ID promoted to prod by alice, issue 39),
// CP_PROMOTE / CP_ABORT / CP_APPROVE / CP_PROMOTE_NOW (the reasons typed), CP_SHOTS (screenshots), CHROMIUM.
"use strict";
const puppeteer = require("puppeteer-core");
const { check, end, until, click, post: postJSON } = require("./tap");

const env = process.env;
const origin = new URL(env.CP_URL).origin;
const ID = env.CP_ID;
const text = (page, sel) => page.$eval(sel, (e) => e.innerText).catch(() => "(" + sel + " not found)");
// A POST as the page would send it, from outside any browser.
const post = (path, token, body) => postJSON(origin + path,
  { Authorization: "Bearer " + token, Origin: origin, "Sec-Fetch-Site": "same-origin" }, body);
// A page signed in with token, the pipeline's detail open (#pipeline=ID).
async function open(browser, token, errors, section) {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  page.on("pageerror", (e) => errors.push("page error: " + String(e)));
  page.on("console", (m) => { if (m.type() === "error" && !/status of 40[13]/.test(m.text())) errors.push(m.text()); });
  await page.setViewport({ width: 1280, height: 900 });
  await page.goto(env.CP_URL + "#pipeline=" + ID, { waitUntil: "load" });
  await until(page, 20, () => !document.getElementById("signin-wrap").hidden);
  await page.type("#signin-token", token);
  await click(page, "#signin-submit");
  await until(page, 30, (id) => !!document.getElementById(id), section || "canary");
  return page;
}
async function act(page, action, reason) {
  await click(page, '#detail-actions button[data-action="' + action + '"]');
  await until(page, 10, () => document.getElementById("confirm").open);
  await page.type("#confirm-reason", reason);
  await click(page, "#confirm-ok");
  await until(page, 20, () => ["ok", "bad"].includes(document.getElementById("confirm-result").dataset.state));
  return page.$eval("#confirm-result", (e) => [e.dataset.state, e.textContent]);
}

(async () => {
  const browser = await puppeteer.launch({
    executablePath: env.CHROMIUM || "/usr/bin/chromium", headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  const errors = [];
  try {
    if (env.CP_PHASE === "promote") {
      // bob, a viewer: the section, no button; a forged POST 403.
      const b = await open(browser, env.CP_BOB, errors);
      check(!!(await b.$("#canary")), "a viewer sees the canary section", await text(b, "#detail-summary"));
      check((await b.$$("#detail-actions button[data-action]")).length === 0, "... and no action button",
        await text(b, "#detail-actions"));
      const [code] = await post("/api/pipeline/" + ID + "/promote", env.CP_BOB, JSON.stringify({ reason: "forged" }));
      check(code === 403, "a promotion POSTed with the viewer's token is 403", String(code));
      await b.browserContext().close();

      const a = await open(browser, env.CP_ALICE, errors);
      const shown = await until(a, 20, () => {
        const cur = document.querySelector("#canary-steps li.current");
        return cur && cur.dataset.step === "2" && /10%/.test(document.getElementById("canary-weight").textContent) &&
          /paused until an operator/.test((document.getElementById("canary-paused") || {}).textContent || "");
      });
      check(shown, "the section shows step 2 of 3 current, weight 10 %, paused until an operator",
        await text(a, "#canary"));
      const chips = await a.$$eval("#canary-steps li", (l) => l.map((e) => e.textContent + (e.className.includes("done") ? "+" : "")));
      check(chips.join("|") === "10%+|pause (operator)|100%", "the step bar: 10% (done), pause (operator), 100%",
        chips.join("|"));
      const verdicts = await a.$$eval("#canary-measurements tbody tr", (l) => l.map((r) => r.dataset.verdict));
      check(verdicts.join(",") === "pass,inconclusive", "each measurement with its verdict", verdicts.join(","));
      check(/strategy = "canary"/.test(await text(a, "#canary .help")), "the section says how to write a canary");
      const labels = await a.$$eval("#detail-actions button[data-action]", (l) => l.map((e) => e.dataset.action));
      check(["promote", "promote_full", "abort"].every((x) => labels.includes(x)),
        "an operator has Promote, Promote fully and Abort", labels.join(","));
      await a.screenshot({ path: env.CP_SHOTS + "/canary-paused.png", fullPage: true });
      const [state, said] = await act(a, "promote", env.CP_PROMOTE);
      check(state === "ok" && /Promotion of .* requested/.test(said), "Promote with a reason is accepted", said);
      await a.keyboard.press("Escape");
      const done = await until(a, 40, () => /SUCCEEDED/.test(document.getElementById("detail-status").textContent));
      check(done, "the page shows the canary SUCCEEDED without a reload", await text(a, "#detail-summary"));
      const ev = await until(a, 20, (reason) => [...document.querySelectorAll("#events tbody tr")].some((r) =>
        r.dataset.event === "CANARY_PROMOTE" && r.dataset.actor === "alice@page" &&
        r.querySelector("td.reason").textContent === reason), env.CP_PROMOTE);
      check(ev, "its history shows the promotion by alice@page with the reason (as text)");
    } else if (env.CP_PHASE === "approve") {
      // A release waiting for one approval (issue 39): bob sees it, alice approves it.
      const b = await open(browser, env.CP_BOB, errors, "detail-approvals");
      check(/^0 of 1$/.test(await text(b, "#detail-approvals")), "a viewer sees its approvals: 0 of 1",
        await text(b, "#detail-summary"));
      check((await b.$$("#detail-actions button[data-action]")).length === 0, "... and no action button",
        await text(b, "#detail-actions"));
      const [code] = await post("/api/pipeline/" + ID + "/approve", env.CP_BOB, JSON.stringify({ reason: "forged" }));
      check(code === 403, "an approval POSTed with the viewer's token is 403", String(code));
      await b.browserContext().close();
      const a = await open(browser, env.CP_ALICE, errors, "detail-approvals");
      await until(a, 20, () => !!document.querySelector('#detail-actions button[data-action="approve"]'));
      const labels = await a.$$eval("#detail-actions button[data-action]", (l) => l.map((e) => e.dataset.action));
      check(labels.includes("approve") && labels.includes("reject"), "an operator has Approve and Reject",
        labels.join(","));
      check(/approval/.test(await text(a, "#detail-status")), "the release is shown held for approval",
        await text(a, "#detail-status"));
      const [state, said] = await act(a, "approve", env.CP_APPROVE);
      check(state === "ok" && said.includes("Approved " + ID + ": 1 approval (alice)"), "Approve with a reason is " +
        "accepted, saying who approved", said);
      await a.keyboard.press("Escape");
      const done = await until(a, 40, () => /SUCCEEDED/.test(document.getElementById("detail-status").textContent));
      check(done, "the approved release deploys: the page shows it SUCCEEDED", await text(a, "#detail-summary"));
      const counted = await until(a, 20, () => /^1 of 1 \(alice\)$/.test(
        (document.getElementById("detail-approvals") || {}).textContent || ""));
      check(counted, "... with 1 of 1 (alice)", await text(a, "#detail-summary"));
      const ev = await until(a, 20, (reason) => [...document.querySelectorAll("#events tbody tr")].some((r) =>
        r.dataset.event === "APPROVED" && r.dataset.actor === "alice@page" &&
        r.querySelector("td.reason").textContent === reason), env.CP_APPROVE);
      check(ev, "its history shows the approval by alice@page with the reason");
      await a.screenshot({ path: env.CP_SHOTS + "/approved.png", fullPage: true });
    } else if (env.CP_PHASE === "promote_now") {
      // A live staging release its policy promotes to prod in an hour (issue 39): bob sees no button;
      // alice promotes it now.
      const b = await open(browser, env.CP_BOB, errors, "detail-status");
      await until(b, 20, () => /SUCCEEDED/.test(document.getElementById("detail-status").textContent));
      check((await b.$$("#detail-actions button[data-action]")).length === 0, "a viewer has no Promote button",
        await text(b, "#detail-actions"));
      const [code] = await post("/api/pipeline/" + ID + "/promote_now", env.CP_BOB,
        JSON.stringify({ reason: "forged", to: "prod" }));
      check(code === 403, "a promotion POSTed with the viewer's token is 403", String(code));
      await b.browserContext().close();
      const a = await open(browser, env.CP_ALICE, errors, "detail-status");
      const shown = await until(a, 20, () => !!document.querySelector('#detail-actions button[data-action="promote_now"]'));
      check(shown && /Promote to prod/.test(await text(a, "#detail-actions")), "an operator has Promote to prod",
        await text(a, "#detail-actions"));
      const [wrong] = await post("/api/pipeline/" + ID + "/promote_now", env.CP_ALICE,
        JSON.stringify({ reason: "elsewhere", to: "qa" }));
      check(wrong === 422, "a promotion to an environment its policy does not name is 422", String(wrong));
      const [state, said] = await act(a, "promote_now", env.CP_PROMOTE_NOW);
      check(state === "ok" && /^Promoted to prod: [a-z0-9]+\.$/.test(said), "Promote with a reason is accepted, " +
        "naming the new pipeline", said);
      await a.screenshot({ path: env.CP_SHOTS + "/promoted.png", fullPage: true });
      // the new prod release's detail names the release it came from, as a link
      const made = (said.match(/: ([a-z0-9]+)\.$/) || [])[1];
      await a.keyboard.press("Escape");
      await a.evaluate((id) => { location.hash = "#pipeline=" + id; }, made);
      const from = await until(a, 20, (id, was) => {
        const dd = document.getElementById("detail-promoted-from");
        return !!dd && document.getElementById("detail-title").textContent.endsWith(id) &&
          dd.textContent === was && dd.querySelector("a").getAttribute("href") === "#pipeline=" + was;
      }, made, ID);
      check(from, "the promoted release's detail says promoted from " + ID + ", a link to it",
        await text(a, "#detail-summary"));
    } else {
      const a = await open(browser, env.CP_ALICE, errors);
      await until(a, 20, () => !!document.querySelector('#detail-actions button[data-action="abort"]'));
      const [state, said] = await act(a, "abort", env.CP_ABORT);
      check(state === "ok" && /Abort of .* requested/.test(said), "Abort with a reason is accepted", said);
      await a.keyboard.press("Escape");
      const failed = await until(a, 40, () => /ERROR/.test(document.getElementById("detail-status").textContent));
      check(failed, "the page shows the aborted canary ERROR", await text(a, "#detail-summary"));
      check(/0%/.test(await text(a, "#canary-weight")), "... with its weight back at 0 %", await text(a, "#canary"));
      await a.screenshot({ path: env.CP_SHOTS + "/canary-aborted.png", fullPage: true });
    }
    check(errors.length === 0, "no unexpected console or page error", errors.join("\n"));
  } catch (e) {
    check(false, "the browser run", String(e && e.stack || e));
  } finally {
    await browser.close();
    end();
  }
})();
