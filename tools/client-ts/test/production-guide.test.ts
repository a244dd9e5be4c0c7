// docs/production.md followed as a studio follows it, to its end: a new crate outside this
// repository made of the guide's Cargo.toml and Rust files, with the Ferry source tree beside it,
// builds; three of its nodes run on the guide's config (admin endpoints over HTTPS behind the
// admin token), with the per-node keys from the environment as the guide's local recipe sets
// them; the guide's room and player are made; and in headless Chromium the play page binds the
// player with the guide's token and plays on, with every push in order and no reconnect, while
// the operator drains the room's node.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { launch, playedThroughMove, text, until, type Browser } from "./chromium.js";
import { TestCluster } from "./cluster.js";

/** The repository's root, from build-test/test/. */
const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const GUIDE = readFileSync(join(root, "docs/production.md"), "utf8");

/** The bodies of the guide's code blocks of `language`, in order. */
function blocks(language: string): string[] {
  const found: string[] = [];
  const fence = /^```(\S*)\n([\s\S]*?)^```$/gm;
  for (const match of GUIDE.matchAll(fence)) if (match[1] === language) found.push(match[2]);
  return found;
}

/** The one block of `language` that `accept` takes. */
function block(language: string, accept: (body: string) => boolean = () => true): string {
  const found = blocks(language).filter(accept);
  assert.equal(found.length, 1, `the guide shows one ${language} block of its kind`);
  return found[0];
}

/** The shell lines of the guide's blocks that start with `prefix`. */
function shellLines(prefix: string): string[] {
  return blocks("sh").flatMap((body) => body.split("\n").filter((line) => line.startsWith(prefix)));
}

/** Runs `command` to its end; rejects with its exit code. */
function run(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<void> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(command, args, { ...options, stdio: ["ignore", "inherit", "inherit"] });
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolveRun() : reject(new Error(`${command} ${args.join(" ")} exited ${code}`))));
  });
}

let dir: string;
let cluster: TestCluster;
let browser: Browser;

before(async () => {
  // Section 1: the Ferry source tree beside a new crate, and its lock file copied in.
  dir = mkdtempSync(join(tmpdir(), "ferry-studio-"));
  symlinkSync(root, join(dir, "ferry"));
  const crate = join(dir, "my-game");
  mkdirSync(join(crate, "src"), { recursive: true });
  assert.ok(shellLines("cp ferry/Cargo.lock my-game/").length === 1, "the guide copies the lock file");
  copyFileSync(join(root, "Cargo.lock"), join(crate, "Cargo.lock"));
  writeFileSync(join(crate, "Cargo.toml"), block("toml", (body) => body.includes("[package]")));
  // Sections 2 and 3: the game and its host program.
  writeFileSync(join(crate, "src/lib.rs"), block("rust"));
  writeFileSync(join(crate, "src/main.rs"), block("rust,no_run"));
  // Built in a target directory kept between runs: the first build compiles Ferry and its
  // dependencies for this crate.
  const target = process.env.FERRY_GUIDE_TARGET ?? join(root, "target/production-guide");
  await run("cargo", ["build", "--quiet"], { cwd: crate, env: { ...process.env, CARGO_TARGET_DIR: target } });

  // Section 5: the guide's config and tokens file; the admin token file is the cluster's.
  const config = block("toml", (body) => !body.includes("[package]"));
  const tokens = shellLines('echo "').map((line) => /^echo "(.*)" > tokens\.txt$/.exec(line)?.[1]);
  assert.equal(tokens.length, 1);
  assert.ok(tokens[0], "the guide writes tokens.txt");
  cluster = await TestCluster.start(["p1", "p2", "p3"], {
    program: [join(target, "debug/my-game")],
    config,
    tokens: `${tokens[0]}\n`,
    secure: true,
  });
  browser = await launch({ acceptNodeCertificates: true });
});

after(async () => {
  await browser?.close();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The JSON body of the guide's `admin ... -d '<body>' .../units` line that makes a `kind`. */
function unitBody(kind: string): unknown {
  const bodies = shellLines("admin ")
    .map((line) => /-d '(\{.*\})' \S+\/units$/.exec(line)?.[1])
    .filter((body): body is string => body !== undefined)
    .map((body) => JSON.parse(body))
    .filter((body) => body.kind === kind);
  assert.ok(bodies.length >= 1, `the guide makes a ${kind}`);
  return bodies[0];
}

test("the production guide's game is played in a browser through a drain of its room's node", async () => {
  // Sections 5 and 6: the room on p2, and the player the guide's token may bind, in it.
  const room = unitBody("spot") as { id: string };
  const player = unitBody("actor") as { id: string; join: string };
  assert.equal(player.join, room.id);
  await cluster.admin("p2", "POST", "/units", room);
  await cluster.admin("p2", "POST", "/units", player);
  const [token] = shellLines('echo "')[0].slice('echo "'.length).split(" ");

  // The play page as the guide opens it, on p1; the player types the token.
  const shown = block("text", (body) => body.includes("/play?"));
  const query = shown.trim().slice(shown.indexOf("/play?") + "/play?".length);
  const page = await browser.context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(`https://${cluster.node("p1").admin}/play?${query}`);
  assert.equal(await page.locator("#player").inputValue(), player.id);
  await page.locator("#token").fill(token);
  await page.locator("#join button").click();
  await until(page, "state", `v === "playing"`);
  await page.locator("#repeat").check();
  assert.equal(await text(page, "gateway"), "p1");
  const session = await text(page, "session");
  await until(page, "room-node", `v === "p2"`);
  await until(page, "received", "Number(v) >= 10");

  // The operator drains the room's node while the player plays.
  const report = await cluster.drain("p2");
  assert.equal(report.outcome, "Relocated", JSON.stringify(report));
  const host = await until(page, "room-node", `v === "p1" || v === "p3"`);
  const atDrain = Number(await text(page, "received"));
  await until(page, "received", `Number(v) >= ${atDrain + 10}`);

  // What the player sees: the move, the same session, every push once and in order, and the
  // room's count going on from where it was, now on the node it moved to.
  const reports = await playedThroughMove<{ count: number; node: string }>(page, "p2", host, session);
  const counts = reports.map((r) => r.count);
  assert.deepEqual(counts, [...counts].sort((a, b) => a - b), "the count only grows");
  assert.equal(new Set(counts).size, counts.length, "each push is a new count");
  assert.equal(reports[0].node, "p2");
  assert.equal(reports.at(-1)!.node, host);
  assert.deepEqual(errors, []);
  await page.close();
});
