// Opens cadre server's dashboard in headless chromium (Debian's) with puppeteer-core and checks
// what a user sees: sign in with a token, the job in the list, its log lines arriving while it
// runs, its metric curve drawn, and the cancel button stopping another job.
//
//   node dashboard_check.cjs CONFIG.json
// CONFIG: {deps, chromium, url, token, job, release, hold, screenshot, restart, restarted}, or
// {deps, chromium, url, token, screenshot} with `paging` or `deployments` (see each check).
// While the job runs the check writes the file `restart` and waits for the test to restart the
// server (on the same port) and write `restarted`: the page must carry on by itself. Exit 0 when
// all is as expected; otherwise prints what was not and exits 1. Every wait is bounded.
"use strict";
const fs = require("fs");
const path = require("path");

const config = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const puppeteer = require(path.join(config.deps, "node_modules", "puppeteer-core"));
const WAIT = { timeout: 90000 };

async function text(page, selector) {
  return page.$eval(selector, (el) => el.textContent);
}

// The rows' ids as the list shows them.
async function listedIds(page) {
  return page.$$eval("#job-rows a", (links) => links.map((a) => a.textContent));
}

// Waits until the list says `range` and shows the trainings `ids`, in that order.
async function waitForList(page, range, ids) {
  try {
    await page.waitForFunction((range, ids) => {
      const shown = [...document.querySelectorAll("#job-rows a")].map((a) => a.textContent);
      return document.getElementById("jobs-range").textContent === range &&
             JSON.stringify(shown) === JSON.stringify(ids);
    }, WAIT, range, ids);
  } catch (e) {
    const said = await text(page, "#jobs-range");
    throw new Error(`expected "${range}" with ${ids}, the list says "${said}" with ` +
                    `${await listedIds(page)}`);
  }
}

// paging: {ids: every training's id, newest first}. The whole list fits the default page; with
// two a page, older and newer pages are reached by their links, and the list says which it shows.
async function checkPaging(page, paging) {
  const ids = paging.ids;
  const n = ids.length;
  await waitForList(page, `${n} trainings`, ids);
  if (!(await page.$eval("#older", (a) => a.hidden))) throw new Error("an older page of nothing");
  await page.goto(`${config.url}#/?limit=2`, { waitUntil: "load", ...WAIT });
  await waitForList(page, `Newest 2 of ${n} trainings`, ids.slice(0, 2));
  if (!(await page.$eval("#newer", (a) => a.hidden))) throw new Error("a newer page than the newest");
  for (let start = 2; start < n; start += 2) {
    await page.click("#older");
    const last = Math.min(n, start + 2);
    await waitForList(page, `Trainings ${start + 1}\u2013${last} of ${n}, newest first`,
                      ids.slice(start, last));
  }
  if (!(await page.$eval("#older", (a) => a.hidden))) throw new Error("an older page past the oldest");
  await page.click("#newer");
  const start = n % 2 === 0 ? n - 4 : n - 3;
  await waitForList(page, `Trainings ${start + 1}\u2013${start + 2} of ${n}, newest first`,
                    ids.slice(start, start + 2));
}

// The text of each cell of the deployment's row, or null while it is not listed.
async function deploymentRow(page, id) {
  return page.evaluate((id) => {
    const row = document.getElementById(`deployment-${id}`);
    return row ? [...row.cells].map((c) => c.textContent) : null;
  }, id);
}

// deployments: {training, model, failed}. The training's page offers its model; Deploy opens
// the deployments, where the new one turns ready; the failed one shows why; Delete removes it.
// Prints "deployed ID" for the test.
async function checkDeployments(page, d) {
  await page.goto(`${config.url}#/jobs/${d.training}`, { waitUntil: "load", ...WAIT });
  await page.waitForFunction(
    (model) => !document.getElementById("job-model").hidden &&
               document.getElementById("job-model-id").textContent === model, WAIT, d.model);
  await page.click("#deploy");
  await page.waitForFunction(() => location.hash === "#/deployments", WAIT);
  const rowOf = (model) => page.evaluate((model) => {
    const row = [...document.querySelectorAll("#deployment-rows tr")]
      .find((tr) => tr.cells[3].textContent === model);
    return row ? row.id.replace(/^deployment-/, "") : null;
  }, model);
  await page.waitForFunction((model) => [...document.querySelectorAll("#deployment-rows tr")]
    .some((tr) => tr.cells[3].textContent === model), WAIT, d.model);
  const id = await rowOf(d.model);
  try {
    await page.waitForFunction((id) => {
      const row = document.getElementById(`deployment-${id}`);
      return row && row.cells[2].textContent === "ready";
    }, WAIT, id);
  } catch (e) {
    throw new Error(`deployment ${id} not shown ready: ${await deploymentRow(page, id)}`);
  }
  const failed = await deploymentRow(page, d.failed);
  if (!failed || failed[2] !== "failed" || !failed[5].includes("before it was ready")) {
    throw new Error(`the failed deployment is shown as ${failed}`);
  }
  console.log(`deployed ${id}`);
  await page.click(`#deployment-${id} button.delete`);
  await page.waitForFunction((id) => !document.getElementById(`deployment-${id}`), WAIT, id);
  if (!(await deploymentRow(page, d.failed))) throw new Error("the other deployment went too");
}

// A job's name is shown as text, never as markup; a token revoked while the page is open signs
// it out with a message that says so.
async function checkRevoked(page, r) {
  const name = await page.waitForFunction((id) => {
    const link = document.querySelector(`#job-rows a[href="#/jobs/${id}"]`);
    return link && link.closest("tr").children[1].textContent;
  }, WAIT, r.job);
  if ((await name.jsonValue()) !== r.name) throw new Error(`the name shows as ${await name.jsonValue()}`);
  if (await page.$("#job-rows img, #job-rows script")) throw new Error("the name became markup");
  if (await page.evaluate(() => window.injected)) throw new Error("the name's script ran");
  fs.writeFileSync(r.signed_in, "");
  await page.waitForFunction(() => !document.getElementById("sign-in").hidden, WAIT);
  const why = await text(page, "#sign-in-error");
  if (!why.includes("no longer accepted")) throw new Error(`signed out saying '${why}'`);
  // Coming back to the page with the revoked token says the same.
  await page.evaluate((t) => sessionStorage.setItem("cadre-token", t), config.token);
  await page.reload({ waitUntil: "load", ...WAIT });
  await page.waitForFunction(
    () => document.getElementById("sign-in-error").textContent.includes("no longer accepted"),
    WAIT);
}

async function main() {
  const browser = await puppeteer.launch({
    executablePath: config.chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1000, height: 900 });
    page.on("pageerror", (e) => console.error("page error:", e.message));
    page.on("console", (m) => console.error("page console:", m.text()));
    page.on("requestfailed", (r) => console.error("request failed:", r.url(), r.failure()));
    await page.goto(config.url, { waitUntil: "load", ...WAIT });

    // Sign in: a wrong token is refused, the right one shows the job list.
    await page.waitForSelector("#sign-in:not([hidden])", WAIT);
    await page.type("#token", "cadre_wrong_token");
    await page.click("#sign-in-form button");
    await page.waitForFunction(
      () => document.getElementById("sign-in-error").textContent.length > 0, WAIT);
    await page.$eval("#token", (el) => { el.value = ""; });
    await page.type("#token", config.token);
    await page.click("#sign-in-form button");
    if (config.paging) {
      await checkPaging(page, config.paging);
      return;
    }
    if (config.deployments) {
      await checkDeployments(page, config.deployments);
      return;
    }
    if (config.revoked) {
      await checkRevoked(page, config.revoked);
      return;
    }
    const link = `#job-rows a[href="#/jobs/${config.job}"]`;
    await page.waitForSelector(link, WAIT);

    // The job's page: log lines arrive while it runs.
    await page.click(link);
    await page.waitForFunction(
      () => document.getElementById("log").textContent.includes("epoch 1 done"), WAIT);
    const state = await text(page, "#job-state");
    if (state !== "running") throw new Error(`expected the job running while its log streams, got ${state}`);
    // The server is killed and started again while the page follows the job.
    fs.writeFileSync(config.restart, "");
    for (const end = Date.now() + WAIT.timeout; !fs.existsSync(config.restarted);) {
      if (Date.now() > end) throw new Error("the test did not restart the server");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    fs.writeFileSync(config.release, "");  // let the job finish
    await page.waitForFunction(
      () => document.getElementById("job-state").textContent === "completed", WAIT);
    await page.waitForFunction(
      () => document.getElementById("log").textContent.includes("training finished"), WAIT);
    const log = await text(page, "#log");
    if (log.split("epoch 1 done").length !== 2) throw new Error(`a line shown twice:\n${log}`);
    // Its loss curve is drawn through every logged point.
    await page.waitForFunction(() => {
      const line = document.querySelector("#chart polyline.curve-loss");
      return line && line.getAttribute("points").trim().split(" ").length >= 3;
    }, WAIT);
    await page.screenshot({ path: config.screenshot, fullPage: true });

    // Cancel from the dashboard.
    await page.goto(`${config.url}#/jobs/${config.hold}`, { waitUntil: "load", ...WAIT });
    await page.waitForFunction(
      () => document.getElementById("job-state").textContent === "running", WAIT);
    await page.click("#cancel");
    await page.waitForFunction(
      () => document.getElementById("job-state").textContent === "canceled", WAIT);
  } catch (e) {
    // What the page showed when it went wrong, for the test's output.
    const pages = await browser.pages();
    if (pages.length > 0) {
      const page = pages[pages.length - 1];
      await page.screenshot({ path: config.screenshot.replace(/\.png$/, ".failed.png") });
      console.error("page text at the failure:\n" + (await page.evaluate(() => document.body.innerText)));
    }
    throw e;
  } finally {
    await browser.close();
  }
}

main().then(() => { console.log("dashboard check passed"); },
            (e) => { console.error(`dashboard check failed: ${e.stack || e}`); process.exit(1); });
