// A gateway that reports inputs a crashed node may not have run: the client tells the application
// of those no `delivered` had covered, once, and keeps its session; the gateway's own rebind that
// follows is reported too. A scripted `ws` server stands in, so the counts the gateway sends are the
// test's own.

import assert from "node:assert/strict";
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { WebSocketServer } from "ws";

import { FerryClient } from "@ferry/client";

const welcome = {
  type: "welcome",
  session: "00000000000000ab",
  node: "gw",
  limits: { max_frame: 65536, rate_per_second: 200, rate_burst: 400 },
};

test("an `undelivered` frame reports the inputs no `delivered` covered, once, the rebind after it is reported, and the session stays open", async () => {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await once(server, "listening");
  server.on("connection", (socket) => {
    let inputs = 0;
    const send = (frame: object) => socket.send(JSON.stringify(frame));
    socket.on("message", (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === "hello") send(welcome);
      if (frame.type === "bind") send({ type: "bound", actor: frame.actor });
      if (frame.type === "input" && ++inputs === 10) {
        // Alice's first two ran, then her node crashed with the next two on it, and the rebuilt
        // alice ran the fifth; carol's node crashed with her first three on it, none confirmed.
        send({ type: "delivered", actor: "alice", inputs: 2 });
        send({ type: "undelivered", actor: "bob", inputs: 3 });
        send({ type: "undelivered", actor: "alice", inputs: 4 });
        send({ type: "undelivered", actor: "carol", inputs: 3 });
        // The gateway binds alice again where she was rebuilt, and bob, whom this client never bound.
        send({ type: "bound", actor: "alice" });
        send({ type: "bound", actor: "bob" });
        send({ type: "push", actor: "alice", seq: 0, message: "rebuilt" });
        send({ type: "delivered", actor: "alice", inputs: 5 });
        socket.close(4000, "the test is over");
      }
    });
  });
  try {
    const port = (server.address() as AddressInfo).port;
    const client = await FerryClient.connect({ urls: [`ws://127.0.0.1:${port}/`], token: "t", reconnect: false });
    await client.bind("alice");
    // Binds of an Actor bound already are answered, and are no rebind.
    await Promise.all([client.bind("alice"), client.bind("alice")]);
    await client.bind("carol");
    for (let i = 0; i < 6; i++) client.send("alice", { Say: `line-${i}` });
    for (let i = 0; i < 4; i++) client.send("carol", { Say: `line-${i}` });
    const crashed = "the node running it crashed";
    // Nothing for bob, to whom this client sent nothing.
    assert.deepEqual(await client.next(), { type: "undelivered", actor: "alice", inputs: 2, reason: crashed });
    assert.deepEqual(await client.next(), { type: "undelivered", actor: "carol", inputs: 3, reason: crashed });
    assert.deepEqual(await client.next(), { type: "rebound", actor: "alice" });
    assert.deepEqual(await client.next(), { type: "push", actor: "alice", seq: 0, message: "rebuilt" });
    // When the session ends, only the inputs settled by neither frame are reported: alice's sixth
    // (the later `delivered` counts on from the crash) and carol's fourth.
    const over = "the test is over";
    assert.deepEqual(await client.next(), { type: "undelivered", actor: "alice", inputs: 1, reason: over });
    assert.deepEqual(await client.next(), { type: "undelivered", actor: "carol", inputs: 1, reason: over });
    assert.deepEqual(await client.next(), { type: "closed", code: "normal", reason: over });
  } finally {
    server.close();
  }
});
