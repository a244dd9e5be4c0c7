// A gateway that sends a malformed frame: the client ends the session as `malformed` with a reason,
// reports the inputs it had not confirmed, and tells the gateway why; no exception reaches the
// application. A Ferry node cannot be made to send such a frame, so a `ws` server stands in.

import assert from "node:assert/strict";
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { WebSocketServer } from "ws";

import { FerryClient } from "@ferry/client";

const welcome = {
  type: "welcome",
  session: "00000000000000ab",
  node: "bad",
  limits: { max_frame: 65536, rate_per_second: 200, rate_burst: 400 },
};

test("a malformed frame from a gateway ends the session with a reason, not an exception", async () => {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await once(server, "listening");
  const closedWith = new Promise<number>((resolveClose) => {
    server.on("connection", (socket) => {
      let frames = 0;
      socket.on("message", () => {
        frames++;
        if (frames === 1) socket.send(JSON.stringify(welcome));
        if (frames === 2) socket.send(JSON.stringify({ type: "bound", actor: "alice" }));
        if (frames === 3) {
          socket.send(JSON.stringify({ type: "push", actor: "alice", seq: 0, message: { text: "hi" } }));
          socket.send('{"type":"push","actor":"alice","seq":"one"');
        }
      });
      socket.on("close", (code) => resolveClose(code));
    });
  });
  try {
    const port = (server.address() as AddressInfo).port;
    const client = await FerryClient.connect({ urls: [`ws://127.0.0.1:${port}/`], token: "t" });
    await client.bind("alice");
    client.send("alice", { Say: "hi" });
    assert.deepEqual(await client.next(), { type: "push", actor: "alice", seq: 0, message: { text: "hi" } });
    const undelivered = await client.next();
    assert.equal(undelivered.type, "undelivered", JSON.stringify(undelivered));
    if (undelivered.type === "undelivered") assert.equal(undelivered.inputs, 1);
    const closed = await client.next();
    assert.equal(closed.type, "closed", JSON.stringify(closed));
    if (closed.type === "closed") {
      assert.equal(closed.code, "malformed");
      assert.ok(closed.reason.includes("cannot read"), closed.reason);
    }
    assert.equal(await closedWith, 4003, "the gateway was told why");
  } finally {
    server.close();
  }
});
