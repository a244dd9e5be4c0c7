// The cluster view in a real headless Chromium, on the setup docs/production.md recommends:
// every admin endpoint speaks HTTPS only (`admin_tls`) and listens beyond loopback behind the
// admin token. Served by one `ferry node`, the page asks for the token once, then shows every
// node's rooms and their standbys, sees a drained node's rooms leave it and arrive on the others,
// lists each move as the drained node pushes it, and shows the node as it is once it is resumed.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import type { Page } from "playwright-core";

import { launch, type Browser } from "./chromium.js";
import { ADMIN_TOKEN, FERRY, TestCluster } from "./cluster.js";

let cluster: TestCluster;
let browser: Browser;

before(async () => {
  // The chat rooms keep a confirmed standby, so the view has standbys to show.
  cluster = await TestCluster.start(["n1", "n2", "n3"], { secure: true, program: [FERRY, "node", "--standby", "confirmed"] });
  browser = await launch({ acceptNodeCertificates: true, viewport: { width: 760, height: 380 } });
});

after(async () => {
  await browser?.close();
  await cluster?.stop();
});

/** The rooms the page shows on node `id`. */
async function rooms(page: Page, id: string): Promise<string[]> {
  const text = await page.locator(`tr[data-node="${id}"] .rooms`).innerText();
  return text.split(" ").filter(Boolean);
}

/** Waits until `condition`, a JavaScript expression on the page, holds. */
async function until(page: Page, condition: string): Promise<void> {
  await page.waitForFunction(condition, null, { timeout: 30_000, polling: 50 });
}

test("behind HTTPS and the admin token, the cluster view follows a drain move by move and a resume", async () => {
  const names = ["arena", "bazaar", "crypt"];
  for (const room of names) await cluster.chatRoom("n2", room, [`${room}-player`]);
  const page = await browser.context.newPage();
  const urls: string[] = [];
  page.on("request", (request) => urls.push(request.url()));
  const admins = ["n1", "n2", "n3"].map((id) => cluster.node(id).admin).join(",");
  await page.goto(`https://${cluster.node("n1").admin}/cluster?nodes=${admins}`);

  // Without the token every node, this one included, says it needs it; the page asks for it.
  await until(page, `[...document.querySelectorAll(".state")].every((c) => c.textContent === "needs the admin token")`);
  await page.locator("#token").fill(ADMIN_TOKEN);
  await page.locator("#login button").click();
  assert.equal(await page.locator("#login").isHidden(), true);

  // Every node's feed is live before the drain starts, so no move goes unseen.
  await until(page, `[...document.querySelectorAll(".feed")].every((c) => c.textContent === "live")`);
  await until(page, `document.querySelector('tr[data-node="n2"] .rooms')?.textContent === "arena bazaar crypt"`);
  assert.deepEqual(await rooms(page, "n2"), names);
  assert.equal(await page.locator('tr[data-node="n2"] .state').innerText(), "Serving");
  assert.equal(await page.locator('tr[data-node="n2"] .drain').innerText(), "-");
  // Each chat room keeps a confirmed standby: once each has its first checkpoint
  // held, the row says all three have a current one, and how long the oldest change not yet held
  // has waited.
  await until(page, `/^3\\/3 current, /.test(document.querySelector('tr[data-node="n2"] .standby')?.textContent ?? "")`);
  const standby = await page.locator('tr[data-node="n2"] .standby').innerText();
  assert.match(standby, /^3\/3 current, (all held|oldest unheld \d+ ms)$/);

  const report = await cluster.drain("n2");
  assert.equal(report.outcome, "Relocated", JSON.stringify(report));
  await until(page, `document.querySelectorAll("#moves li").length >= 3`);
  await until(page, `document.querySelector('tr[data-node="n2"] .rooms')?.textContent === ""`);
  await until(
    page,
    `["n1", "n3"].flatMap((id) => document.querySelector(\`tr[data-node="\${id}"] .rooms\`)?.textContent?.split(" ").filter(Boolean) ?? []).length === 3`,
  );
  const elsewhere = [...(await rooms(page, "n1")), ...(await rooms(page, "n3"))].sort();
  assert.deepEqual(elsewhere, names, "each room arrived on n1 or n3");
  assert.equal(await page.locator('tr[data-node="n2"] .state').innerText(), "Relocated");
  // A node that owns no room keeps no standby of its own.
  await until(page, `document.querySelector('tr[data-node="n2"] .standby')?.textContent === "-"`);
  // Three rooms and their three players: six units, in three moves (a room moves with its
  // players).
  assert.equal(await page.locator('tr[data-node="n2"] .drain').innerText(), "6/6 (0 failed)");

  // One move listed per room, each off n2.
  const moves = await page.locator("#moves li").allInnerTexts();
  assert.equal(moves.length, 3, moves.join("\n"));
  for (const room of names) {
    assert.equal(moves.filter((m) => new RegExp(`spot:${room} n2 → n[13]`).test(m)).length, 1, moves.join("\n"));
  }
  if (process.env.FERRY_SCREENSHOT) await page.screenshot({ path: process.env.FERRY_SCREENSHOT });

  // Resumed, the node serves again, and its finished drain is no longer shown as its state.
  await cluster.admin("n2", "POST", "/resume");
  await until(page, `document.querySelector('tr[data-node="n2"] .state')?.textContent === "Serving"`);
  assert.equal(await page.locator('tr[data-node="n2"] .drain').innerText(), "-");

  // Everything went over HTTPS, and the token never appeared in a URL.
  assert.ok(urls.length > 0);
  for (const url of urls) {
    assert.ok(url.startsWith("https://"), url);
    assert.ok(!url.includes(ADMIN_TOKEN), url);
  }
  await page.close();
});
