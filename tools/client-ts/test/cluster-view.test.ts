// The cluster view in a real headless Chromium, during a drain: served by one `ferry node`, it
// shows every node's rooms, sees the drained node's rooms leave it and arrive on the others, and
// lists each move as the drained node pushes it.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { chromium, type BrowserContext, type Page } from "playwright-core";

import { TestCluster } from "./cluster.js";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

let cluster: TestCluster;
let browser: BrowserContext;
let profile: string;

before(async () => {
  cluster = await TestCluster.start(["n1", "n2", "n3"]);
  profile = mkdtempSync(join(tmpdir(), "ferry-chromium-"));
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 760, height: 380 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
  await cluster?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

/** The rooms the page shows on node `id`. */
async function rooms(page: Page, id: string): Promise<string[]> {
  const text = await page.locator(`tr[data-node="${id}"] .rooms`).innerText();
  return text.split(" ").filter(Boolean);
}

test("the cluster view sees a drained node's rooms leave it and arrive on the others, move by move", async () => {
  const names = ["arena", "bazaar", "crypt"];
  for (const room of names) await cluster.chatRoom("n2", room, [`${room}-player`]);
  const page = await browser.newPage();
  const admins = ["n1", "n2", "n3"].map((id) => cluster.node(id).admin).join(",");
  await page.goto(`http://${cluster.node("n1").admin}/cluster?nodes=${admins}`);

  // Every node's feed is live before the drain starts, so no move goes unseen.
  await page.waitForFunction(() => [...document.querySelectorAll(".feed")].every((c) => c.textContent === "live"), null, {
    timeout: 30_000,
  });
  await page.waitForFunction(() => document.querySelector('tr[data-node="n2"] .rooms')?.textContent === "arena bazaar crypt", null, {
    timeout: 30_000,
  });
  assert.deepEqual(await rooms(page, "n2"), names);
  assert.equal(await page.locator('tr[data-node="n2"] .state').innerText(), "Serving");

  const report = await cluster.drain("n2");
  assert.equal(report.outcome, "Relocated", JSON.stringify(report));
  await page.waitForFunction(() => document.querySelectorAll("#moves li").length >= 3, null, { timeout: 30_000 });
  await page.waitForFunction(() => document.querySelector('tr[data-node="n2"] .rooms')?.textContent === "", null, {
    timeout: 30_000,
  });
  await page.waitForFunction(
    () => ["n1", "n3"].flatMap((id) => document.querySelector(`tr[data-node="${id}"] .rooms`)?.textContent?.split(" ").filter(Boolean) ?? []).length === 3,
    null,
    { timeout: 30_000 },
  );
  const elsewhere = [...(await rooms(page, "n1")), ...(await rooms(page, "n3"))].sort();
  assert.deepEqual(elsewhere, names, "each room arrived on n1 or n3");
  assert.equal(await page.locator('tr[data-node="n2"] .state').innerText(), "Relocated");

  // One move listed per room, each off n2.
  const moves = await page.locator("#moves li").allInnerTexts();
  assert.equal(moves.length, 3, moves.join("\n"));
  for (const room of names) {
    assert.equal(moves.filter((m) => new RegExp(`spot:${room} n2 → n[13]`).test(m)).length, 1, moves.join("\n"));
  }
  if (process.env.FERRY_SCREENSHOT) await page.screenshot({ path: process.env.FERRY_SCREENSHOT });
  await page.close();
});
