// What the browser tests share (canary_page.js, fleet_actions.js,
// stats_panel.js; fleet_page.js, which prints its own PASS/FAIL lines, takes
// until alone): TAP lines (check, end), polling a page
// (until), a click that tries again while the page redraws (click), and a
// POST from outside any browser (post, node's http module).
"use strict";
const http = require("http");

let n = 0, failures = 0;
// "ok N - desc", or "not ok N - desc" with diag as "#" lines (at most 1500 characters).
function check(ok, desc, diag) {
  n++;
  if (ok) console.log("ok " + n + " - " + desc);
  else {
    failures++;
    console.log("not ok " + n + " - " + desc);
    if (diag !== undefined) for (const l of String(diag).slice(0, 1500).split("\n")) console.log("#   " + l);
  }
}
// The plan line, and the exit: 1 when a check failed.
function end() {
  console.log("1.." + n);
  process.exit(failures ? 1 : 0);
}
// Polls fn in the page until it returns true (a bound that only stops a hung test).
async function until(page, seconds, fn, ...args) {
  try {
    await page.waitForFunction(fn, { timeout: seconds * 1000, polling: 200 }, ...args);
    return true;
  } catch (e) {
    return false;
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Clicks sel once it is visible; a node the page replaced meanwhile is tried again (5 times).
async function click(page, sel) {
  for (let i = 0; ; i++) {
    try {
      await page.waitForSelector(sel, { visible: true, timeout: 10000 });
      return await page.click(sel);
    } catch (e) {
      if (i >= 4 || !/not clickable|detached|not an Element|Node is/i.test(String(e))) throw e;
      await sleep(200);
    }
  }
}

// A JSON POST to url with headers as given: [status, body] ([0, error] when it could not be sent).
function post(url, headers, body) {
  return new Promise((resolve) => {
    const u = new URL(url);
    const req = http.request({ hostname: u.hostname, port: u.port, path: u.pathname, method: "POST",
      headers: Object.assign({ "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) }, headers),
    }, (r) => {
      let d = "";
      r.on("data", (c) => { d += c; });
      r.on("end", () => resolve([r.statusCode, d]));
    });
    req.on("error", (e) => resolve([0, String(e)]));
    req.end(body);
  });
}

module.exports = { check, end, until, sleep, click, post };
