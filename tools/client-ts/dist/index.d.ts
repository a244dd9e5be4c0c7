/** A JSON value, as application messages are written (serde's JSON form of a Rust type). */
export type Json = null | boolean | number | string | Json[] | {
    [key: string]: Json;
};
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
export type CloseCode = "normal" | "shutdown" | "unauthenticated" | "malformed" | "too_large" | "unknown_frame" | "bad_input" | "protocol" | "rate_limited" | "too_many_held" | "seal_timeout" | "slow_reader" | "internal";
/** Something the gateway told the client. */
export type ClientEvent = 
/** A bound Actor pushed a message; `seq` counts its pushes from 0 since it was bound. */
{
    type: "push";
    actor: string;
    seq: number;
    message: Json;
}
/** An Actor is no longer bound to this client. */
 | {
    type: "unbound";
    actor: string;
    reason: string;
}
/**
 * `inputs` inputs sent to `actor` may not have reached it, and are not sent again: the gateway had
 * not confirmed them when the session ended or the Actor was unbound (this comes just before the
 * `reconnected`, `unbound` or `closed` that follows), or the node running the Actor crashed (the
 * session stays open).
 */
 | {
    type: "undelivered";
    actor: string;
    inputs: number;
    reason: string;
}
/**
 * The node running `actor` crashed, and the gateway bound it again, in this same session, where
 * it runs now: what it had pushed that had not arrived is lost, and its pushes count from `seq` 0
 * again. An `undelivered` before this names the inputs the crash left in doubt.
 */
 | {
    type: "rebound";
    actor: string;
}
/** The session ended for the server's reasons; the client is connected again, its Actors bound. */
 | {
    type: "reconnected";
    reason: string;
    session: SessionInfo;
}
/** The session ended and the client will not reconnect. */
 | {
    type: "closed";
    code: CloseCode | null;
    reason: string;
};
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
export declare class FerryError extends Error {
    /** The gateway's close code, if the error is a session's end. */
    readonly code: CloseCode | null;
    constructor(message: string, 
    /** The gateway's close code, if the error is a session's end. */
    code?: CloseCode | null);
}
/** A frame from the gateway. */
export type ServerFrame = {
    type: "welcome";
    session: string;
    node: string;
    limits: Limits;
} | {
    type: "bound";
    actor: string;
} | {
    type: "bind_refused";
    actor: string;
    reason: string;
} | {
    type: "unbound";
    actor: string;
    reason: string;
} | {
    type: "push";
    actor: string;
    seq: number;
    message: Json;
} | {
    type: "delivered";
    actor: string;
    inputs: number;
} | {
    type: "undelivered";
    actor: string;
    inputs: number;
} | {
    type: "closing";
    code: CloseCode;
    retryable: boolean;
    reason: string;
};
/** A frame the client sends. */
export type ClientFrame = {
    type: "hello";
    version: number;
    token: string;
} | {
    type: "bind";
    actor: string;
} | {
    type: "unbind";
    actor: string;
} | {
    type: "input";
    actor: string;
    message: Json;
} | {
    type: "bye";
};
/** The protocol version this client speaks: 3 adds `undelivered`. */
export declare const PROTOCOL_VERSION = 3;
/** The close codes, each at its number. */
export declare const CLOSE_CODES: readonly CloseCode[];
/** Whether a session that ended with `code` is worth connecting again for: the server's reasons, not the client's. */
export declare function isRetryable(code: CloseCode): boolean;
/** How a WebSocket close status without a `closing` frame before it ends a session. */
export declare function closeStatus(status: number): {
    code: CloseCode | null;
    retryable: boolean;
};
/** The frame each call writes. */
export declare const frames: {
    hello: (token: string) => ClientFrame;
    bind: (actor: string) => ClientFrame;
    unbind: (actor: string) => ClientFrame;
    input: (actor: string, message: Json) => ClientFrame;
    bye: () => ClientFrame;
};
/**
 * Reads one gateway frame from a WebSocket message. A frame that is not JSON, lacks a field its type
 * needs, or has a type this client does not know throws a `malformed` FerryError: it ends the session
 * (the next gateway would send the same, so the client is what needs updating).
 */
export declare function readServerFrame(data: unknown): ServerFrame;
/**
 * A connected game client. Events (pushes, unbinds, reconnects, the end) come from `next()` in
 * order, or go to `onEvent` once it is set.
 */
export declare class FerryClient {
    private readonly options;
    private readonly WebSocketImpl;
    private readonly reconnect;
    /** Receives every event once set; until then they wait for `next()`. */
    onEvent: ((event: ClientEvent) => void) | null;
    private link;
    private info;
    /** Actors the application bound: bound again on every new session. */
    private readonly wanted;
    /** Binds waiting for their answer on the current session. */
    private readonly binding;
    /**
     * `bind` frames sent on the current session that no `bound` or `bind_refused` answered yet, per
     * Actor: a `bound` beyond them is the gateway's own rebind after a crash.
     */
    private readonly asked;
    /** Inputs sent while no session was open, per Actor, in order. */
    private readonly pending;
    /**
     * Inputs written to the current session per Actor, and how many of them the gateway settled:
     * confirmed, or reported undelivered.
     */
    private readonly inputs;
    private readonly events;
    private readonly waiters;
    private reconnecting;
    private closed;
    private constructor();
    /** Connects to the first gateway that takes the token, trying each in turn. */
    static connect(options: ClientOptions): Promise<FerryClient>;
    /** The session held now. */
    get session(): SessionInfo;
    /** Binds an Actor to this client: its pushes come here, and `send` reaches it. */
    bind(actor: string): Promise<void>;
    /** Stops being bound to an Actor. */
    unbind(actor: string): void;
    /** Sends a message to a bound Actor; while the client reconnects it is queued and sent after. */
    send(actor: string, message: Json): void;
    /** Writes an input to the current session and counts it until the gateway confirms it. */
    private write;
    /** Reports the inputs to `actor` (every Actor when `null`) the gateway had not confirmed. */
    private undelivered;
    /** The next event. */
    next(): Promise<ClientEvent>;
    /** Says goodbye and closes the session; no reconnect follows. */
    close(): Promise<void>;
    private emit;
    /** Connects from gateway `start` on, with backoff, until one takes the token. */
    private open;
    private adopt;
    private frame;
    /** The connection ended: reconnect and bind again, or report the end. */
    private lost;
    private sendBind;
    /** Takes an answer to a `bind` of `actor` this session sent; false if none waited for one. */
    private answered;
    private finish;
}
