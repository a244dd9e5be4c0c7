// The shared protocol vectors (docs/client-protocol-vectors.json), checked against this client's
// frame reader and writer, as the Rust gateway's and the C# client's tests check them.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  CLOSE_CODES,
  FerryError,
  closeStatus,
  frames,
  isRetryable,
  readServerFrame,
  type CloseCode,
  type Json,
} from "@ferry/client";

/** The repository's root, from build-test/test/. */
const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const vectors = JSON.parse(readFileSync(join(root, "docs/client-protocol-vectors.json"), "utf8"));

test("the close codes are the vectors'", () => {
  assert.equal(vectors.close_codes.length, CLOSE_CODES.length);
  for (const row of vectors.close_codes as { code: CloseCode; n: number; retryable: boolean }[]) {
    assert.equal(CLOSE_CODES[row.n], row.code);
    assert.equal(isRetryable(row.code), row.retryable, row.code);
  }
});

test("close statuses end a session as the vectors say", () => {
  for (const row of vectors.close_statuses as { status: number; code: CloseCode | null; retryable: boolean }[]) {
    assert.deepEqual(closeStatus(row.status), { code: row.code, retryable: row.retryable }, String(row.status));
  }
});

test("each call writes the frame of the vectors", () => {
  for (const row of vectors.client_frames as { call: string; token: string; actor: string; message: Json; frame: Json }[]) {
    const written =
      row.call === "hello"
        ? frames.hello(row.token)
        : row.call === "bind"
          ? frames.bind(row.actor)
          : row.call === "unbind"
            ? frames.unbind(row.actor)
            : row.call === "input"
              ? frames.input(row.actor, row.message)
              : row.call === "bye"
                ? frames.bye()
                : assert.fail(`a vector calls ${row.call}`);
    // As it goes on the wire.
    assert.deepEqual(JSON.parse(JSON.stringify(written)), row.frame);
  }
});

test("gateway frames read as the vectors say, and malformed ones are refused", () => {
  let read = 0;
  let refused = 0;
  for (const row of vectors.server_frames as { text: string; frame?: Json; malformed?: boolean }[]) {
    if (row.malformed) {
      assert.throws(
        () => readServerFrame(row.text),
        (error: FerryError) => error.code === "malformed" && error.message.includes("cannot read"),
        row.text,
      );
      refused++;
    } else {
      assert.deepEqual(readServerFrame(row.text), row.frame, row.text);
      read++;
    }
  }
  assert.ok(read > 0 && refused > 0);
});
