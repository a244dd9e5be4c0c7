// A real Ferry cluster for the tests: a redis-server of its own and node processes (`ferry node`,
// or a game's own host program) on loopback, each a gateway with a WebSocket listener, started
// from config files as an operator would, and stopped (or killed) by the test. By default the
// admin endpoints speak plain HTTP without a token and the WebSocket is plain ws://; `secure`
// runs the setup docs/production.md recommends instead: HTTPS admin endpoints that listen beyond
// loopback behind a token, and wss://.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository's root, from build-test/test/. */
const root = resolve(here, "../../../..");

/** The `ferry` binary: FERRY_BIN, or the workspace's debug build. */
export const FERRY = process.env.FERRY_BIN ?? join(root, "target/debug/ferry");

/** The token the test clients present. */
export const TOKEN = "test-token";

/** The admin token of a `secure` cluster's nodes. */
export const ADMIN_TOKEN = "admin-s3cret-7f2e";

/** How a cluster's nodes run. */
export interface ClusterOptions {
  /** The node program and the arguments before `--config FILE` (default `ferry node`). */
  program?: [string, ...string[]];
  /** The game's players' tokens file (default one line: TOKEN tester). */
  tokens?: string;
  /** HTTPS admin endpoints on 0.0.0.0 behind ADMIN_TOKEN, and wss:// for the players. */
  secure?: boolean;
  /**
   * One config file for every node instead of the cluster's own, with the per-node keys (id,
   * addresses, store) in the environment, as docs/production.md runs its nodes; its admin
   * endpoints are reached as `secure` says.
   */
  config?: string;
}

/** What a node's ready line says. */
export interface Ready {
  id: string;
  admin: string;
  websocket: string;
}

async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolvePort(address.port) : reject(new Error("no port"))));
    });
  });
}

/** Waits for a line of `child`'s stdout that `accept` takes. */
function line(child: ChildProcess, what: string, accept: (line: string) => boolean): Promise<string> {
  return new Promise((resolveLine, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error(`${what}: no line within 60 s`)), 60_000);
    lines.on("line", (text) => {
      if (accept(text)) {
        clearTimeout(timer);
        resolveLine(text);
      }
    });
    child.once("exit", (code) => reject(new Error(`${what}: exited (${code}) before it was ready`)));
  });
}

/** A cluster of `ferry node` processes on one redis-server. */
export class TestCluster {
  readonly nodes = new Map<string, { child: ChildProcess; ready: Ready }>();
  private redis: ChildProcess | null = null;

  private constructor(
    readonly dir: string,
    private readonly redisUrl: string,
    readonly options: ClusterOptions,
  ) {}

  /** Starts redis-server and the nodes `ids`. */
  static async start(ids: string[], options: ClusterOptions = {}): Promise<TestCluster> {
    const dir = mkdtempSync(join(tmpdir(), "ferry-client-ts-"));
    const certs = spawnSync(FERRY, ["certs", "--out", join(dir, "certs"), "--nodes", ids.join(","), "--gateway", "localhost"], {
      encoding: "utf8",
    });
    if (certs.status !== 0) throw new Error(`ferry certs failed: ${certs.stderr}`);
    writeFileSync(join(dir, "tokens.txt"), options.tokens ?? `${TOKEN} tester\n`);
    writeFileSync(join(dir, "admin.token"), `${ADMIN_TOKEN}\n`);
    const port = await freePort();
    const cluster = new TestCluster(dir, `redis://127.0.0.1:${port}/`, options);
    const redis = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    cluster.redis = redis;
    await line(redis, "redis-server", (text) => text.includes("Ready to accept connections"));
    for (const id of ids) await cluster.startNode(id);
    return cluster;
  }

  /** Starts one more node. */
  async startNode(id: string): Promise<Ready> {
    const config = join(this.dir, `${id}.toml`);
    const secure = this.options.secure ?? false;
    const admin = secure ? [`admin = "0.0.0.0:0"`, `admin_tls = true`, `admin_token_file = "admin.token"`] : [`admin = "127.0.0.1:0"`];
    writeFileSync(
      config,
      [
        `id = "${id}"`,
        `mesh_listen = "127.0.0.1:0"`,
        `certs = "certs"`,
        `store = "${this.redisUrl}"`,
        `store_prefix = "ts"`,
        `lease_ttl_ms = 10000`,
        `refresh_ms = 200`,
        ...admin,
        `sessions_listen = "127.0.0.1:0"`,
        `sessions_cert = "certs/gateway.pem"`,
        `sessions_key = "certs/gateway.key"`,
        `sessions_tokens = "tokens.txt"`,
        `sessions_websocket = "127.0.0.1:0"`,
        `sessions_websocket_plain = ${!secure}`,
        "",
      ].join("\n"),
    );
    const env: Record<string, string> = { RUST_LOG: "warn" };
    if (this.options.config !== undefined) {
      writeFileSync(config, this.options.config);
      Object.assign(env, {
        FERRY_ID: id,
        FERRY_MESH_LISTEN: "127.0.0.1:0",
        FERRY_ADMIN: "127.0.0.1:0",
        FERRY_SESSIONS_LISTEN: "127.0.0.1:0",
        FERRY_SESSIONS_WEBSOCKET: "127.0.0.1:0",
        FERRY_STORE: this.redisUrl,
      });
    }
    const [program, ...args] = this.options.program ?? [FERRY, "node"];
    const child = spawn(program, [...args, "--config", config], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, ...env },
    });
    const text = await line(child, `node ${id}`, (text) => text.startsWith(`ready ${id} `));
    const parts = new Map(
      text
        .split(" ")
        .slice(2)
        .map((part) => part.split("=") as [string, string]),
    );
    // An endpoint on 0.0.0.0 is reached on loopback.
    const adminAddr = parts.get("admin")!.replace(/^0\.0\.0\.0:/, "127.0.0.1:");
    const scheme = secure ? "wss" : "ws";
    const ready = { id, admin: adminAddr, websocket: `${scheme}://${parts.get("websocket")!}/` };
    this.nodes.set(id, { child, ready });
    return ready;
  }

  /** The node `id`'s ready line. */
  node(id: string): Ready {
    return this.nodes.get(id)!.ready;
  }

  /** The scheme of the admin endpoints' URLs. */
  get adminScheme(): string {
    return this.options.secure ? "https" : "http";
  }

  /** A request to node `id`'s admin endpoint (with the token, over HTTPS checked against the
   * cluster CA, when `secure`); the JSON answer. */
  async admin(id: string, method: string, path: string, body?: unknown): Promise<any> {
    const headers: Record<string, string> = body === undefined ? {} : { "content-type": "application/json" };
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let status: number;
    let text: string;
    if (this.options.secure) {
      headers.authorization = `Bearer ${ADMIN_TOKEN}`;
      ({ status, text } = await this.https(this.node(id).admin, method, path, headers, payload));
    } else {
      const response = await fetch(`http://${this.node(id).admin}${path}`, { method, headers, body: payload });
      status = response.status;
      text = await response.text();
    }
    if (status < 200 || status > 299) throw new Error(`${method} ${path} on ${id}: ${status} ${text}`);
    return text ? JSON.parse(text) : null;
  }

  /** One HTTPS request, the node's certificate checked against the cluster CA (its name is the
   * node's, not the loopback address the test reaches it on). */
  private https(addr: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; text: string }> {
    const [host, port] = addr.split(":");
    const ca = readFileSync(join(this.dir, "certs", "ca.pem"));
    return new Promise((resolveResponse, reject) => {
      const request = httpsRequest({ host, port: Number(port), method, path, headers, ca, checkServerIdentity: () => undefined }, (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk) => (text += chunk));
        response.on("end", () => resolveResponse({ status: response.statusCode ?? 0, text }));
      });
      request.on("error", reject);
      request.end(body);
    });
  }

  /** A chat room on node `id` with `players` in it. */
  async chatRoom(id: string, room: string, players: string[]): Promise<void> {
    await this.admin(id, "POST", "/units", { kind: "spot", factory: "chat-room", id: room });
    for (const player of players) {
      await this.admin(id, "POST", "/units", { kind: "actor", factory: "chatter", id: player, join: room });
    }
  }

  /** Drains node `id`: every unit moves off it. */
  async drain(id: string): Promise<any> {
    return this.admin(id, "POST", "/relocate", { mode: "maintenance", deadline_ms: 20000 });
  }

  /** How many units node `id` hosts now. */
  async units(id: string): Promise<number> {
    return (await this.admin(id, "GET", "/status")).units;
  }

  /** Kills node `id` at once (SIGKILL), as a crash would. */
  async kill(id: string): Promise<void> {
    await this.signal(id, "SIGKILL");
  }

  /** Stops node `id` cleanly (SIGTERM): its clients are told to go elsewhere. */
  async terminate(id: string): Promise<void> {
    await this.signal(id, "SIGTERM");
  }

  private async signal(id: string, signal: NodeJS.Signals): Promise<void> {
    const node = this.nodes.get(id);
    if (!node) return;
    this.nodes.delete(id);
    if (node.child.exitCode !== null || node.child.signalCode !== null) return;
    const exited = new Promise((resolveExit) => node.child.once("exit", resolveExit));
    node.child.kill(signal);
    await exited;
  }

  /** Stops every node and the redis-server, and removes the files. */
  async stop(): Promise<void> {
    for (const id of [...this.nodes.keys()]) await this.terminate(id);
    if (this.redis && this.redis.exitCode === null) {
      const exited = new Promise((resolveExit) => this.redis!.once("exit", resolveExit));
      this.redis.kill("SIGTERM");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
