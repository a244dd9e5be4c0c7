// The TypeScript client against live `ferry node` processes, playing the chat sample: connect,
// bind, play, the room drained off its node mid-play with nothing lost, doubled or reordered, and
// a gateway killed with the client on it, which connects to the next gateway, binds again and
// plays on.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { FerryClient, FerryError, type ClientEvent } from "@ferry/client";

import { TestCluster, TOKEN } from "./cluster.js";

let cluster: TestCluster;

before(async () => {
  cluster = await TestCluster.start(["n1", "n2", "n3"]);
});

after(async () => {
  await cluster?.stop();
});

interface Line {
  seq: number;
  text: string;
}

/** The next push of `actor`, as a chat line with its push number; any other event fails. */
async function nextLine(client: FerryClient, actor: string): Promise<Line> {
  const event: ClientEvent = await client.next();
  assert.equal(event.type, "push", JSON.stringify(event));
  if (event.type !== "push") throw new Error("unreachable");
  assert.equal(event.actor, actor);
  const message = event.message as { seq: number; from: string; text: string };
  assert.equal(message.from, actor);
  return { seq: event.seq, text: message.text };
}

/** Says lines `from..to`, a window of them under way, and returns their pushes; `progress` hears each. */
async function say(
  client: FerryClient,
  actor: string,
  from: number,
  to: number,
  progress: (received: number) => void = () => {},
): Promise<Line[]> {
  const window = 16;
  const lines: Line[] = [];
  let sent = from;
  while (lines.length < to - from) {
    while (sent < to && sent < from + lines.length + window) {
      client.send(actor, { Say: `line-${sent}` });
      sent++;
    }
    lines.push(await nextLine(client, actor));
    progress(from + lines.length);
  }
  return lines;
}

const expected = (from: number, to: number, seq0: number): Line[] =>
  Array.from({ length: to - from }, (_, i) => ({ seq: seq0 + i, text: `line-${from + i}` }));

test("a client binds, plays, and keeps its session and every line while its room is drained off its node", async () => {
  await cluster.chatRoom("n2", "lobby", ["alice"]);
  const client = await FerryClient.connect({ urls: [cluster.node("n1").websocket], token: TOKEN });
  const first = client.session;
  assert.equal(first.node, "n1");
  await client.bind("alice");

  let drain: Promise<unknown> | null = null;
  const lines = await say(client, "alice", 0, 400, (received) => {
    if (received === 50) drain = cluster.drain("n2");
  });
  assert.ok(drain, "the drain started mid-play");
  await drain;
  assert.equal(await cluster.units("n2"), 0, "the room and its player left n2");

  // Counted per message: each line once, in order, its push number the next one.
  assert.deepEqual(lines, expected(0, 400, 0));
  assert.equal(client.session.session, first.session, "the same session throughout");
  assert.equal(client.session.connects, 1, "never reconnected");
  await client.close();
});

test("a client whose gateway is killed connects to the next one, binds again and plays on", async () => {
  await cluster.chatRoom("n3", "den", ["bob"]);
  const urls = [cluster.node("n1").websocket, cluster.node("n3").websocket];
  const client = await FerryClient.connect({
    urls,
    token: TOKEN,
    reconnect: { minBackoffMs: 20, maxBackoffMs: 200, attempts: 20 },
  });
  assert.equal(client.session.node, "n1");
  await client.bind("bob");
  assert.deepEqual(await say(client, "bob", 0, 30), expected(0, 30, 0));

  await cluster.kill("n1");
  // Every line came back, so at most those whose confirmation was still on its way are reported.
  let event = await client.next();
  let undelivered = 0;
  while (event.type === "undelivered") {
    assert.equal(event.actor, "bob");
    undelivered += event.inputs;
    event = await client.next();
  }
  assert.ok(undelivered <= 30, `${undelivered} reported`);
  assert.equal(event.type, "reconnected", JSON.stringify(event));
  if (event.type !== "reconnected") throw new Error("unreachable");
  assert.equal(event.session.node, "n3");
  assert.equal(event.session.connects, 2);

  // A new session: the pushes of its binding count from 0 again, and the room goes on.
  assert.deepEqual(await say(client, "bob", 30, 60), expected(30, 60, 0));
  await client.close();
});

test("a refused token ends the connect with its close code", async () => {
  await assert.rejects(
    FerryClient.connect({ urls: [cluster.node("n3").websocket], token: "wrong", reconnect: { attempts: 5, minBackoffMs: 1000 } }),
    (error: FerryError) => error.code === "unauthenticated" && error.message.includes("token"),
  );
});
