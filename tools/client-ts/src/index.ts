// The Ferry game client for browsers and Node: connects to a gateway over WebSocket, authenticates,
// binds Actors, sends them inputs and receives their pushes in order, and rides out a gateway that
// goes away by connecting to the next one and binding its Actors again. It follows
// docs/client-protocol.md; the frames here are that page's, field for field.

/** A JSON value, as application messages are written (serde's JSON form of a Rust type). */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The limits a gateway announces in its welcome. */
export interface Limits {
  max_frame: number;
  rate_per_second: number;
  rate_burst: number;
}

/** The session a client holds now. */
export interface SessionInfo {
  /** The session's id on its gateway (16 hex digits). */
  session: string;
  /** The gateway node's id. */
  node: string;
  /** The gateway's URL. */
  url: string;
  /** How many sessions this client has held so far (1 until it reconnects). */
  connects: number;
  /** The limits the session is held to. */
  limits: Limits;
}

/** Why a session ended, as its gateway said (docs/client-protocol.md, "Close codes"). */
export type CloseCode =
  | "normal"
  | "shutdown"
  | "unauthenticated"
  | "malformed"
  | "too_large"
  | "unknown_frame"
  | "bad_input"
  | "protocol"
  | "rate_limited"
  | "too_many_held"
  | "seal_timeout"
  | "slow_reader"
  | "internal";

/** Something the gateway told the client. */
export type ClientEvent =
  /** A bound Actor pushed a message; `seq` counts its pushes from 0 since it was bound. */
  | { type: "push"; actor: string; seq: number; message: Json }
  /** An Actor is no longer bound to this client. */
  | { type: "unbound"; actor: string; reason: string }
  /**
   * `inputs` inputs sent to `actor` may not have reached it, and are not sent again: the gateway had
   * not confirmed them when the session ended or the Actor was unbound (this comes just before the
   * `reconnected`, `unbound` or `closed` that follows), or the node running the Actor crashed (the
   * session stays open).
   */
  | { type: "undelivered"; actor: string; inputs: number; reason: string }
  /**
   * The node running `actor` crashed, and the gateway bound it again, in this same session, where
   * it runs now: what it had pushed that had not arrived is lost, and its pushes count from `seq` 0
   * again. An `undelivered` before this names the inputs the crash left in doubt.
   */
  | { type: "rebound"; actor: string }
  /** The session ended for the server's reasons; the client is connected again, its Actors bound. */
  | { type: "reconnected"; reason: string; session: SessionInfo }
  /** The session ended and the client will not reconnect. */
  | { type: "closed"; code: CloseCode | null; reason: string };

/** How a client reconnects after its gateway ended the session for the server's reasons. */
export interface Reconnect {
  /** The first wait after a failed attempt; it doubles each time (default 50 ms). */
  minBackoffMs: number;
  /** The longest wait (default 5000 ms). */
  maxBackoffMs: number;
  /** Attempts before giving up, each at the next gateway in the list (default 10). */
  attempts: number;
}

/** The WebSocket class to use: the browser's, or the `ws` package's in Node. */
export type WebSocketClass = new (url: string) => WebSocket;

/** How a client connects. */
export interface ClientOptions {
  /** Gateway URLs (`wss://host:port/`); the first is tried first, the next ones on reconnects. */
  urls: string[];
  /** The token the application's authenticator checks. */
  token: string;
  /** How long connecting and authenticating may take, per attempt (default 5000 ms). */
  connectTimeoutMs?: number;
  /** Whether and how to reconnect (default on); `false` ends the client with the first session. */
  reconnect?: Partial<Reconnect> | false;
  /** The WebSocket class; by default the global one, else the `ws` package's. */
  WebSocket?: WebSocketClass;
}

/** What went wrong, and what to do about it. */
export class FerryError extends Error {
  constructor(
    message: string,
    /** The gateway's close code, if the error is a session's end. */
    readonly code: CloseCode | null = null,
  ) {
    super(message);
    this.name = "FerryError";
  }
}

/** A frame from the gateway. */
export type ServerFrame =
  | { type: "welcome"; session: string; node: string; limits: Limits }
  | { type: "bound"; actor: string }
  | { type: "bind_refused"; actor: string; reason: string }
  | { type: "unbound"; actor: string; reason: string }
  | { type: "push"; actor: string; seq: number; message: Json }
  | { type: "delivered"; actor: string; inputs: number }
  | { type: "undelivered"; actor: string; inputs: number }
  | { type: "closing"; code: CloseCode; retryable: boolean; reason: string };

/** A frame the client sends. */
export type ClientFrame =
  | { type: "hello"; version: number; token: string }
  | { type: "bind"; actor: string }
  | { type: "unbind"; actor: string }
  | { type: "input"; actor: string; message: Json }
  | { type: "bye" };

/** The protocol version this client speaks: 3 adds `undelivered`. */
export const PROTOCOL_VERSION = 3;

/** The WebSocket close codes of the protocol are 4000 plus the session's. */
const CLOSE_BASE = 4000;
/** The close codes, each at its number. */
export const CLOSE_CODES: readonly CloseCode[] = [
  "normal",
  "shutdown",
  "unauthenticated",
  "malformed",
  "too_large",
  "unknown_frame",
  "bad_input",
  "protocol",
  "rate_limited",
  "too_many_held",
  "seal_timeout",
  "slow_reader",
  "internal",
];
const RETRYABLE: ReadonlySet<CloseCode> = new Set(["shutdown", "seal_timeout", "slow_reader", "internal"]);

/** Whether a session that ended with `code` is worth connecting again for: the server's reasons, not the client's. */
export function isRetryable(code: CloseCode): boolean {
  return RETRYABLE.has(code);
}

/** How a WebSocket close status without a `closing` frame before it ends a session. */
export function closeStatus(status: number): { code: CloseCode | null; retryable: boolean } {
  const code = CLOSE_CODES[status - CLOSE_BASE] ?? null;
  return { code, retryable: code === null || RETRYABLE.has(code) };
}

/** The frame each call writes. */
export const frames = {
  hello: (token: string): ClientFrame => ({ type: "hello", version: PROTOCOL_VERSION, token }),
  bind: (actor: string): ClientFrame => ({ type: "bind", actor }),
  unbind: (actor: string): ClientFrame => ({ type: "unbind", actor }),
  input: (actor: string, message: Json): ClientFrame => ({ type: "input", actor, message }),
  bye: (): ClientFrame => ({ type: "bye" }),
};

/**
 * Reads one gateway frame from a WebSocket message. A frame that is not JSON, lacks a field its type
 * needs, or has a type this client does not know throws a `malformed` FerryError: it ends the session
 * (the next gateway would send the same, so the client is what needs updating).
 */
export function readServerFrame(data: unknown): ServerFrame {
  const refuse = (why: string) =>
    new FerryError(`the gateway sent a frame this client cannot read (${why}); update the client`, "malformed");
  if (typeof data !== "string") throw refuse("a binary message, not a JSON frame");
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch (error) {
    throw refuse(`not JSON: ${(error as Error).message}`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw refuse("a frame must be a JSON object");
  const frame = parsed as { [key: string]: Json };
  const kind = frame.type;
  const needs = (where: { [key: string]: Json }, field: string, what: string): never => {
    throw refuse(`${where === frame ? `a \`${String(kind)}\` frame` : "limits"} needs \`${field}\`, ${what}`);
  };
  const text = (field: string, where = frame): string =>
    typeof where[field] === "string" ? (where[field] as string) : needs(where, field, "a string");
  const count = (field: string, where = frame): number => {
    const value = where[field];
    return typeof value === "number" && Number.isSafeInteger(value) && value >= 0
      ? value
      : needs(where, field, "a whole number of 0 or more");
  };
  if (typeof kind !== "string") throw refuse("a frame needs `type`, a string");
  switch (kind) {
    case "welcome": {
      const limits = frame.limits;
      if (typeof limits !== "object" || limits === null || Array.isArray(limits)) return needs(frame, "limits", "an object");
      return {
        type: kind,
        session: text("session"),
        node: text("node"),
        limits: {
          max_frame: count("max_frame", limits),
          rate_per_second: count("rate_per_second", limits),
          rate_burst: count("rate_burst", limits),
        },
      };
    }
    case "bound":
      return { type: kind, actor: text("actor") };
    case "bind_refused":
    case "unbound":
      return { type: kind, actor: text("actor"), reason: text("reason") };
    case "push":
      if (!("message" in frame)) return needs(frame, "message", "a JSON value");
      return { type: kind, actor: text("actor"), seq: count("seq"), message: frame.message };
    case "delivered":
    case "undelivered":
      return { type: kind, actor: text("actor"), inputs: count("inputs") };
    case "closing": {
      const code = text("code") as CloseCode;
      if (!CLOSE_CODES.includes(code)) throw refuse(`a \`closing\` frame has the unknown code "${code}"`);
      if (typeof frame.retryable !== "boolean") return needs(frame, "retryable", "true or false");
      return { type: kind, code, retryable: frame.retryable, reason: text("reason") };
    }
    default:
      throw refuse(`the frame type "${kind}" is unknown`);
  }
}

/** How one connection ended. */
interface End {
  code: CloseCode | null;
  reason: string;
  /** Whether to connect again: the server's reasons, or a connection lost without a word. */
  retryable: boolean;
}

async function webSocketClass(options: ClientOptions): Promise<WebSocketClass> {
  if (options.WebSocket) return options.WebSocket;
  const global = (globalThis as { WebSocket?: WebSocketClass }).WebSocket;
  if (global) return global;
  // Node 20 has no global WebSocket: the `ws` package stands in.
  const ws = (await import("ws")) as unknown as { WebSocket: WebSocketClass };
  return ws.WebSocket;
}

/** One open WebSocket to a gateway, after its welcome. */
class Link {
  private ended: End | null = null;
  private closing: End | null = null;

  constructor(
    readonly socket: WebSocket,
    readonly welcome: Extract<ServerFrame, { type: "welcome" }>,
    readonly url: string,
  ) {}

  send(frame: ClientFrame): void {
    this.socket.send(JSON.stringify(frame));
  }

  /** Notes a `closing` frame: its code wins over the close frame's. */
  sawClosing(frame: Extract<ServerFrame, { type: "closing" }>): void {
    this.closing = { code: frame.code, reason: frame.reason, retryable: frame.retryable };
  }

  /** How the connection ended, from the `closing` frame or the close frame. */
  end(event: { code: number; reason: string }): End {
    if (this.ended) return this.ended;
    this.ended = this.closing ?? {
      ...closeStatus(event.code),
      reason: event.reason || `the connection closed (${event.code})`,
    };
    return this.ended;
  }

  /** Ends a session whose gateway sent what this client cannot read, saying why. */
  refuse(error: FerryError): void {
    this.closing = { code: "malformed", reason: error.message, retryable: false };
    this.socket.onmessage = null;
    refuse(this.socket, error);
  }
}

/** Closes a WebSocket whose gateway sent what this client cannot read, with the reason (at most 123 bytes). */
function refuse(socket: WebSocket, error: FerryError): void {
  let said = error.message;
  while (new TextEncoder().encode(said).length > 123) said = said.slice(0, -1);
  socket.close(CLOSE_BASE + CLOSE_CODES.indexOf("malformed"), said);
}

/** Opens a WebSocket to `url`, says hello and waits for the welcome. */
function attempt(
  WebSocketImpl: WebSocketClass,
  url: string,
  token: string,
  timeoutMs: number,
): Promise<Link> {
  return new Promise((resolve, reject) => {
    let socket: WebSocket;
    try {
      socket = new WebSocketImpl(url);
    } catch (error) {
      reject(new FerryError(`cannot open ${url}: ${String(error)}`));
      return;
    }
    let settled = false;
    let closing: Extract<ServerFrame, { type: "closing" }> | null = null;
    const fail = (error: FerryError) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.close();
      reject(error);
    };
    const timer = setTimeout(
      () => fail(new FerryError(`no welcome from ${url} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.onopen = () => {
      socket.send(JSON.stringify(frames.hello(token)));
    };
    socket.onmessage = (event: MessageEvent) => {
      let frame: ServerFrame;
      try {
        frame = readServerFrame(event.data);
      } catch (error) {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        refuse(socket, error as FerryError);
        reject(error);
        return;
      }
      if (frame.type === "welcome" && !settled) {
        settled = true;
        clearTimeout(timer);
        resolve(new Link(socket, frame, url));
      } else if (frame.type === "closing") {
        closing = frame;
      }
    };
    socket.onerror = () => fail(new FerryError(`cannot reach ${url}`));
    socket.onclose = (event: CloseEvent) => {
      const code = closing?.code ?? closeStatus(event.code).code;
      const reason = closing?.reason ?? (event.reason || `the connection to ${url} closed`);
      fail(new FerryError(reason, code));
    };
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A connected game client. Events (pushes, unbinds, reconnects, the end) come from `next()` in
 * order, or go to `onEvent` once it is set.
 */
export class FerryClient {
  /** Receives every event once set; until then they wait for `next()`. */
  onEvent: ((event: ClientEvent) => void) | null = null;

  private link!: Link;
  private info!: SessionInfo;
  /** Actors the application bound: bound again on every new session. */
  private readonly wanted = new Set<string>();
  /** Binds waiting for their answer on the current session. */
  private readonly binding = new Map<string, { resolve: () => void; reject: (e: FerryError) => void }>();
  /**
   * `bind` frames sent on the current session that no `bound` or `bind_refused` answered yet, per
   * Actor: a `bound` beyond them is the gateway's own rebind after a crash.
   */
  private readonly asked = new Map<string, number>();
  /** Inputs sent while no session was open, per Actor, in order. */
  private readonly pending: { actor: string; message: Json }[] = [];
  /**
   * Inputs written to the current session per Actor, and how many of them the gateway settled:
   * confirmed, or reported undelivered.
   */
  private readonly inputs = new Map<string, { sent: number; delivered: number }>();
  private readonly events: ClientEvent[] = [];
  private readonly waiters: ((event: ClientEvent) => void)[] = [];
  private reconnecting = false;
  private closed: ClientEvent | null = null;

  private constructor(
    private readonly options: ClientOptions,
    private readonly WebSocketImpl: WebSocketClass,
    private readonly reconnect: Reconnect | null,
  ) {}

  /** Connects to the first gateway that takes the token, trying each in turn. */
  static async connect(options: ClientOptions): Promise<FerryClient> {
    if (options.urls.length === 0) throw new FerryError("no gateway URL given; list at least one in `urls`");
    const reconnect =
      options.reconnect === false
        ? null
        : { minBackoffMs: 50, maxBackoffMs: 5000, attempts: 10, ...options.reconnect };
    const client = new FerryClient(options, await webSocketClass(options), reconnect);
    await client.open(0, 0);
    return client;
  }

  /** The session held now. */
  get session(): SessionInfo {
    return this.info;
  }

  /** Binds an Actor to this client: its pushes come here, and `send` reaches it. */
  bind(actor: string): Promise<void> {
    if (this.closed) return Promise.reject(new FerryError("the client is closed"));
    this.wanted.add(actor);
    return new Promise((resolve, reject) => {
      // A bind of the same Actor still waiting is answered with this one.
      const earlier = this.binding.get(actor);
      this.binding.set(actor, {
        resolve: () => (earlier?.resolve(), resolve()),
        reject: (e) => (earlier?.reject(e), reject(e)),
      });
      if (!this.reconnecting) this.sendBind(actor);
    });
  }

  /** Stops being bound to an Actor. */
  unbind(actor: string): void {
    this.wanted.delete(actor);
    if (!this.reconnecting && !this.closed) this.link.send(frames.unbind(actor));
  }

  /** Sends a message to a bound Actor; while the client reconnects it is queued and sent after. */
  send(actor: string, message: Json): void {
    if (this.closed) throw new FerryError("the client is closed");
    if (!this.wanted.has(actor)) throw new FerryError(`${actor} is not bound to this client; bind it first`);
    if (this.reconnecting) {
      this.pending.push({ actor, message });
    } else {
      this.write(actor, message);
    }
  }

  /** Writes an input to the current session and counts it until the gateway confirms it. */
  private write(actor: string, message: Json): void {
    const counts = this.inputs.get(actor) ?? { sent: 0, delivered: 0 };
    counts.sent += 1;
    this.inputs.set(actor, counts);
    this.link.send(frames.input(actor, message));
  }

  /** Reports the inputs to `actor` (every Actor when `null`) the gateway had not confirmed. */
  private undelivered(actor: string | null, reason: string): void {
    const actors = actor === null ? [...this.inputs.keys()] : [actor];
    for (const a of actors) {
      const counts = this.inputs.get(a);
      this.inputs.delete(a);
      if (counts && counts.sent > counts.delivered) {
        this.emit({ type: "undelivered", actor: a, inputs: counts.sent - counts.delivered, reason });
      }
    }
  }

  /** The next event. */
  next(): Promise<ClientEvent> {
    const event = this.events.shift();
    if (event) return Promise.resolve(event);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Says goodbye and closes the session; no reconnect follows. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = { type: "closed", code: "normal", reason: "the client closed" };
    const socket = this.link.socket;
    if (socket.readyState === 1) {
      const gone = new Promise((resolve) => socket.addEventListener("close", resolve));
      this.link.send(frames.bye());
      await Promise.race([gone, sleep(1000)]);
    }
    socket.close();
  }

  private emit(event: ClientEvent): void {
    if (this.onEvent) {
      this.onEvent(event);
      return;
    }
    const waiter = this.waiters.shift();
    if (waiter) waiter(event);
    else this.events.push(event);
  }

  /** Connects from gateway `start` on, with backoff, until one takes the token. */
  private async open(start: number, connects: number): Promise<void> {
    const urls = this.options.urls;
    const tries = this.reconnect ? Math.max(1, this.reconnect.attempts) : urls.length;
    let backoff = this.reconnect?.minBackoffMs ?? 0;
    let last = "";
    for (let n = 0; n < tries; n++) {
      const url = urls[(start + n) % urls.length];
      try {
        const link = await attempt(this.WebSocketImpl, url, this.options.token, this.options.connectTimeoutMs ?? 5000);
        this.adopt(link, connects + 1);
        return;
      } catch (error) {
        const e = error as FerryError;
        if (e.code !== null && !RETRYABLE.has(e.code)) throw e;
        last = e.message;
      }
      if (n + 1 < tries && this.reconnect) {
        await sleep(backoff);
        backoff = Math.min(backoff * 2, this.reconnect.maxBackoffMs);
      }
    }
    throw new FerryError(
      `no gateway could be reached after ${tries} attempts (last: ${last}); check the URLs and that the nodes accept WebSocket clients`,
    );
  }

  private adopt(link: Link, connects: number): void {
    this.link = link;
    this.info = {
      session: link.welcome.session,
      node: link.welcome.node,
      url: link.url,
      connects,
      limits: link.welcome.limits,
    };
    link.socket.onmessage = (event: MessageEvent) => {
      let frame: ServerFrame;
      try {
        frame = readServerFrame(event.data);
      } catch (error) {
        link.refuse(error as FerryError);
        return;
      }
      this.frame(link, frame);
    };
    link.socket.onclose = (event: CloseEvent) => void this.lost(link, link.end(event));
    link.socket.onerror = () => {};
  }

  private frame(link: Link, frame: ServerFrame): void {
    switch (frame.type) {
      case "push":
        this.emit({ type: "push", actor: frame.actor, seq: frame.seq, message: frame.message });
        break;
      case "bound": {
        const answer = this.answered(frame.actor);
        this.binding.get(frame.actor)?.resolve();
        this.binding.delete(frame.actor);
        if (!answer && this.wanted.has(frame.actor)) this.emit({ type: "rebound", actor: frame.actor });
        break;
      }
      case "delivered": {
        const counts = this.inputs.get(frame.actor);
        if (counts) counts.delivered = Math.max(counts.delivered, frame.inputs);
        break;
      }
      case "undelivered": {
        // The node running the Actor crashed: of the first `inputs` sent, those no `delivered`
        // covered may not have run, and no later one covers them.
        const counts = this.inputs.get(frame.actor);
        if (!counts) break;
        const settled = Math.min(frame.inputs, counts.sent);
        const unconfirmed = settled - counts.delivered;
        counts.delivered = Math.max(counts.delivered, settled);
        if (unconfirmed > 0) {
          this.emit({ type: "undelivered", actor: frame.actor, inputs: unconfirmed, reason: "the node running it crashed" });
        }
        break;
      }
      case "bind_refused": {
        this.answered(frame.actor);
        this.wanted.delete(frame.actor);
        this.undelivered(frame.actor, frame.reason);
        const waiting = this.binding.get(frame.actor);
        this.binding.delete(frame.actor);
        const error = new FerryError(`binding ${frame.actor} was refused: ${frame.reason}`);
        if (waiting) waiting.reject(error);
        else this.emit({ type: "unbound", actor: frame.actor, reason: frame.reason });
        break;
      }
      case "unbound":
        this.wanted.delete(frame.actor);
        this.undelivered(frame.actor, frame.reason);
        this.emit({ type: "unbound", actor: frame.actor, reason: frame.reason });
        break;
      case "closing":
        link.sawClosing(frame);
        break;
      case "welcome":
        break;
    }
  }

  /** The connection ended: reconnect and bind again, or report the end. */
  private async lost(link: Link, end: End): Promise<void> {
    if (link !== this.link) return;
    if (this.closed) {
      this.emit(this.closed);
      return;
    }
    this.undelivered(null, end.reason);
    if (!end.retryable || !this.reconnect) {
      this.finish({ type: "closed", code: end.code, reason: end.reason });
      return;
    }
    this.reconnecting = true;
    const start = this.options.urls.indexOf(link.url) + 1;
    try {
      await this.open(start, this.info.connects);
      // Bind again before anything queued goes out: the gateway holds inputs until each is bound.
      this.asked.clear();
      const rebinds = [...this.wanted].map(
        (actor) =>
          new Promise<void>((resolve, reject) => {
            // A bind the application is still waiting for is answered by this one.
            const earlier = this.binding.get(actor);
            this.binding.set(actor, {
              resolve: () => (earlier?.resolve(), resolve()),
              reject: (e) => (earlier?.reject(e), reject(e)),
            });
            this.sendBind(actor);
          }),
      );
      for (const { actor, message } of this.pending.splice(0)) {
        if (this.wanted.has(actor)) this.write(actor, message);
      }
      this.reconnecting = false;
      await Promise.allSettled(rebinds);
      this.emit({ type: "reconnected", reason: end.reason, session: this.info });
    } catch (error) {
      this.reconnecting = false;
      const e = error as FerryError;
      this.finish({ type: "closed", code: e.code, reason: e.message });
    }
  }

  private sendBind(actor: string): void {
    this.asked.set(actor, (this.asked.get(actor) ?? 0) + 1);
    this.link.send(frames.bind(actor));
  }

  /** Takes an answer to a `bind` of `actor` this session sent; false if none waited for one. */
  private answered(actor: string): boolean {
    const asked = this.asked.get(actor) ?? 0;
    if (asked === 0) return false;
    if (asked === 1) this.asked.delete(actor);
    else this.asked.set(actor, asked - 1);
    return true;
  }

  private finish(event: Extract<ClientEvent, { type: "closed" }>): void {
    this.closed = event;
    for (const [, waiting] of this.binding) waiting.reject(new FerryError(event.reason, event.code));
    this.binding.clear();
    this.emit(event);
  }
}
