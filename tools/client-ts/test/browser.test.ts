// The play page in a real headless Chromium: served by a `ferry node`, it plays the chat sample
// through that node's WebSocket gateway while the room's node is drained, and shows the room
// moving with no reconnect and no push lost, doubled or out of order; and while the room's node is
// killed, it shows its player bound again on the same session, its pushes numbered afresh.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import type { Page } from "playwright-core";

import { launch, playedThroughMove, text, until, type Browser } from "./chromium.js";
import { TestCluster, TOKEN } from "./cluster.js";

let cluster: TestCluster;
let browser: Browser;

before(async () => {
  cluster = await TestCluster.start(["n1", "n2", "n3"]);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await cluster?.stop();
});

/** Opens the play page on n1 as `player` of `room`, saying hello every 200 ms; collects its errors. */
async function play(room: string, player: string): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (error) => errors.push(error.message));
  const admin = cluster.node("n1").admin;
  const input = encodeURIComponent(JSON.stringify({ Say: "hello" }));
  await page.goto(`http://${admin}/play?token=${TOKEN}&room=${room}&player=${player}&input=${input}&auto=1`);
  return { page, errors };
}

test("the play page keeps its session and every push while its room is drained to another node", async () => {
  await cluster.chatRoom("n2", "cafe", ["carol"]);
  const { page, errors } = await play("cafe", "carol");

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
  const lines = await playedThroughMove<{ seq: number; text: string }>(page, "n2", host, session);
  assert.deepEqual(
    lines.map((l) => l.seq),
    lines.map((_, i) => lines[0].seq + i),
  );
  assert.ok(lines.every((l) => l.text === "hello"));
  assert.deepEqual(errors, []);
  await page.close();
});

test("the play page plays on through a crash of its room's node: its player bound again on the same session, its pushes numbered afresh", async () => {
  await cluster.chatRoom("n3", "diner", ["dave"]);
  const { page, errors } = await play("diner", "dave");

  await until(page, "state", `v === "playing"`);
  const session = await text(page, "session");
  await until(page, "room-node", `v === "n3"`);
  await until(page, "received", "Number(v) >= 10");

  await cluster.kill("n3");
  // The survivors take n3 for dead once its lease runs out, rebuild the room, and the gateway binds
  // dave again there.
  await until(page, "rebinds", `v === "1"`);
  await until(page, "room-node", `v !== "n3"`);
  const atRebind = Number(await text(page, "received"));
  await until(page, "received", `Number(v) >= ${atRebind + 10}`);

  // What the person sees: the same session, no reconnect, and the new binding's pushes in order.
  assert.equal(await text(page, "session"), session);
  assert.equal(await text(page, "reconnects"), "0");
  assert.equal(await text(page, "lost"), "0");
  assert.equal(await text(page, "disorder"), "0");
  assert.deepEqual(errors, []);
  await page.close();
});
