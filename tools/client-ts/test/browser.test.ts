// The play page in a real headless Chromium: served by a `ferry node`, it plays the chat sample
// through that node's WebSocket gateway while the room's node is drained, and shows the room
// moving with no reconnect and no line lost, doubled or out of order.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { chromium, type BrowserContext, type Page } from "playwright-core";

import { TestCluster, TOKEN } from "./cluster.js";

/** Debian's Chromium; never a downloaded one. */
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

let cluster: TestCluster;
let browser: BrowserContext;
let profile: string;

before(async () => {
  cluster = await TestCluster.start(["n1", "n2", "n3"]);
  profile = mkdtempSync(join(tmpdir(), "ferry-chromium-"));
  // A fresh profile: Playwright passes it to Chromium as --user-data-dir.
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
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

const text = (page: Page, id: string) => page.locator(`#${id}`).innerText();

/** Waits until the page's `id` field, as `v`, passes the JavaScript condition `condition`. */
async function until(page: Page, id: string, condition: string): Promise<string> {
  const field = `document.getElementById(${JSON.stringify(id)})?.textContent ?? ""`;
  await page.waitForFunction(`((v) => ${condition})(${field})`, null, { timeout: 30_000, polling: 50 });
  return text(page, id);
}

test("the play page keeps its session and every line while its room is drained to another node", async () => {
  await cluster.chatRoom("n2", "cafe", ["carol"]);
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on("pageerror", (error) => errors.push(error.message));
  const admin = cluster.node("n1").admin;
  await page.goto(`http://${admin}/play?token=${TOKEN}&room=cafe&player=carol&create=0&auto=1`);

  await until(page, "state", `v === "playing"`);
  assert.equal(await text(page, "gateway"), "n1");
  const session = await text(page, "session");
  await until(page, "room-node", `v === "n2"`);
  await until(page, "received", "Number(v) >= 20");

  await cluster.drain("n2");
  const host = await until(page, "room-node", `v === "n1" || v === "n3"`);
  assert.equal(await cluster.units("n2"), 0);
  const atDrain = Number(await text(page, "received"));
  await until(page, "received", `Number(v) >= ${atDrain + 20}`);

  // What the person sees: the move listed, the same session, nothing lost, doubled or reordered.
  assert.equal(await page.locator("#moves li").count(), 1);
  assert.match(await page.locator("#moves li").innerText(), new RegExp(`n2 → ${host}`));
  assert.equal(await text(page, "session"), session);
  assert.equal(await text(page, "reconnects"), "0");
  assert.equal(await text(page, "lost"), "0");
  assert.equal(await text(page, "disorder"), "0");
  // Every line shown once, numbered from the first on.
  const lines = await page.locator("#lines div").allInnerTexts();
  const seqs = lines.map((line) => Number(/^#(\d+) /.exec(line)?.[1]));
  assert.deepEqual(seqs, Array.from({ length: seqs.length }, (_, i) => seqs[0] + i));
  assert.deepEqual(errors, []);
  await page.close();
});
