//! The game client library: connect to a gateway, authenticate, bind Actors, send them typed
//! messages and receive their typed pushes, and ride out a gateway that goes away.
//!
//! A [`Client`] owns one connection at a time, driven by a background task. When the gateway
//! ends the session for its own reasons (it shuts down, or a move of a bound Actor took too
//! long), or dies (nothing heard from it for [`ClientConfig::idle_timeout`], a few seconds: QUIC
//! keep-alives flow every [`ClientConfig::keep_alive`] while it lives), the client connects to
//! the next gateway in its list with backoff, authenticates again, binds its Actors again, and
//! reports [`ClientEvent::Reconnected`]. The gateway confirms inputs once they ran at their Actor
//! (a dead gateway loses none of those); inputs it had not confirmed when the connection ended,
//! when their Actor was unbound, or when the node running their Actor crashed, may never have
//! reached it: the client reports them ([`ClientEvent::Undelivered`]) rather than guess, and does
//! not send them again (some may have run). When the node running a bound Actor crashes, the
//! gateway binds it again where recovery put it, in the same session, and the client says so
//! ([`ClientEvent::Rebound`]): what it had pushed on the way is lost. When the session ends
//! because of what this client sent, it does not reconnect: [`Client::recv`] returns the reason.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use ferry::client::{Client, ClientConfig, ClientEvent};
//! let ca_pem = std::fs::read_to_string("gateway-ca.pem")?;
//! let gateways = vec!["10.0.0.1:4433".parse()?, "10.0.0.2:4433".parse()?];
//! let config = ClientConfig::new(gateways, "play.example.com", ca_pem, b"token".to_vec());
//! let mut client = Client::connect(config).await?;
//! let me = ferry::ActorId::new("player-1")?;
//! client.bind(&me).await?;
//! client.send(&me, &"hello")?;
//! loop {
//!     match client.recv::<String>().await? {
//!         ClientEvent::Push { msg, .. } => println!("{msg}"),
//!         ClientEvent::Unbound { actor, reason } => println!("lost {actor}: {reason}"),
//!         ClientEvent::Undelivered { actor, inputs, .. } => {
//!             println!("{inputs} inputs to {actor} may not have arrived")
//!         }
//!         ClientEvent::Rebound { actor } => println!("{actor} runs elsewhere now: catch up"),
//!         ClientEvent::Reconnected { session, .. } => println!("now on {}", session.node),
//!     }
//! }
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use parking_lot::Mutex;
use quinn::{Connection, ConnectionError, Endpoint, RecvStream, SendStream};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;

use crate::ids::{ActorId, NodeId};
use crate::mesh::codec::{DecodeError, EncodeError, FrameCodec};
use crate::session::SessionId;
use crate::session::tls::client_quic_config;
use crate::session::wire::{ClientFrame, CloseCode, PROTOCOL_VERSION, ServerFrame};

/// How a client reconnects after its gateway ended the session for the server's reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// The first wait after a failed attempt; it doubles each time.
    pub min_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
    /// Attempts before giving up (each tries the next server in the list).
    pub attempts: u32,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            min_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
            attempts: 10,
        }
    }
}

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Gateway addresses; the first is tried first, the next ones on reconnects.
    pub servers: Vec<SocketAddr>,
    /// The DNS name the gateways' certificate names.
    pub server_name: String,
    /// The CA certificate (or the gateways' self-signed certificate) to trust, as PEM.
    pub ca_pem: String,
    /// The token the application's authenticator checks.
    pub token: Vec<u8>,
    /// How long connecting and authenticating may take, per attempt.
    pub connect_timeout: Duration,
    /// How often an idle connection is pinged, so the gateway keeps it: well under the
    /// gateway's idle timeout and this client's.
    pub keep_alive: Duration,
    /// How long the connection may hear nothing from the gateway (not even a keep-alive's
    /// acknowledgement) before the client takes it for dead and fails over to the next gateway.
    /// The shorter of this and the gateway's own idle timeout applies.
    pub idle_timeout: Duration,
    /// The largest frame accepted from the gateway, in bytes.
    pub max_frame: usize,
    /// Whether and how to reconnect; `None` ends the client with the first session.
    pub reconnect: Option<Reconnect>,
}

impl ClientConfig {
    /// A config with defaults: 5 s to connect, keep-alive every second, a dead gateway noticed
    /// within 5 s, frames up to 1 MiB, reconnects on.
    pub fn new(
        servers: Vec<SocketAddr>,
        server_name: impl Into<String>,
        ca_pem: impl Into<String>,
        token: impl Into<Vec<u8>>,
    ) -> Self {
        ClientConfig {
            servers,
            server_name: server_name.into(),
            ca_pem: ca_pem.into(),
            token: token.into(),
            connect_timeout: Duration::from_secs(5),
            keep_alive: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(5),
            max_frame: 1024 * 1024,
            reconnect: Some(Reconnect::default()),
        }
    }
}

/// The session a client holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session's id on its gateway.
    pub session: SessionId,
    /// The gateway node.
    pub node: NodeId,
    /// The gateway's address this session connected to.
    pub server: SocketAddr,
    /// How many sessions this client has held so far (1 until it reconnects).
    pub connects: u64,
}

/// Something the gateway told the client.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent<P> {
    /// A bound Actor pushed a message.
    Push {
        /// The Actor that pushed it.
        actor: ActorId,
        /// The pushed message, decoded as the type the client receives.
        msg: P,
    },
    /// An Actor is no longer bound to this client.
    Unbound {
        /// The Actor that was bound.
        actor: ActorId,
        /// Why the gateway unbound it: another session bound it, the client asked, or the Actor
        /// stopped.
        reason: String,
    },
    /// Inputs to `actor` the gateway had not confirmed (as run at the Actor) when the session
    /// ended, when the Actor was unbound (this comes just before the `Reconnected`, `Unbound`
    /// or the end that follows), or when the node running the Actor crashed (the session goes
    /// on): they may not have reached it, and are not sent again.
    Undelivered {
        /// The Actor the inputs were sent to.
        actor: ActorId,
        /// How many inputs.
        inputs: u64,
        /// Why they are in doubt.
        reason: String,
    },
    /// The node running `actor` crashed, and the gateway bound it again, in this same session,
    /// where it runs now: what it had pushed that had not arrived yet is lost, and what it pushes
    /// from here on comes from its new binding. An `Undelivered` before this names the inputs the
    /// crash left in doubt.
    Rebound {
        /// The Actor bound again.
        actor: ActorId,
    },
    /// The session ended for the server's reasons and the client is connected again, its Actors
    /// bound again (pushes made meanwhile are lost; inputs sent meanwhile were queued and sent).
    Reconnected {
        /// Why the last session ended.
        reason: String,
        /// The new session.
        session: SessionInfo,
    },
}

/// What went wrong, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The config lists no server.
    #[error("no gateway address given; list at least one in ClientConfig::servers")]
    NoServers,
    /// The trust settings could not be used.
    #[error(
        "the TLS settings were refused: {0}; pass the PEM of the CA the gateways' certificate chains to"
    )]
    Tls(String),
    /// The keep-alive and idle timeout do not fit together.
    #[error(
        "keep_alive ({keep_alive:?}) must be above zero and shorter than idle_timeout \
         ({idle_timeout:?}); ping well within the idle timeout"
    )]
    Timeouts {
        /// The keep-alive asked for.
        keep_alive: Duration,
        /// The idle timeout asked for.
        idle_timeout: Duration,
    },
    /// No gateway could be reached.
    #[error(
        "no gateway could be reached after {attempts} attempts (last: {last}); check the \
         addresses, the server name and CA, and that the nodes accept clients"
    )]
    Unreachable {
        /// How many attempts were made.
        attempts: u32,
        /// What the last one met.
        last: String,
    },
    /// The gateway refused the token.
    #[error("the gateway refused the token: {reason}; get a fresh token and connect again")]
    Rejected {
        /// Why the gateway refused it, for people.
        reason: String,
    },
    /// The bind was refused.
    #[error("binding {actor} was refused: {reason}")]
    BindRefused {
        /// The Actor the client asked to bind.
        actor: ActorId,
        /// Why the gateway or the application refused it.
        reason: String,
    },
    /// A message for an Actor this client has not bound.
    #[error("{actor} is not bound to this client; bind it first")]
    NotBound {
        /// The Actor the message was for.
        actor: ActorId,
    },
    /// A message over the gateway's frame limit; nothing was sent.
    #[error("the message is over the gateway's {max}-byte frame limit; send smaller messages")]
    TooLarge {
        /// The gateway's largest frame body, in bytes, as its Welcome announced.
        max: usize,
    },
    /// A message could not be encoded; nothing was sent.
    #[error("the message could not be encoded with postcard: {0}")]
    Encode(String),
    /// A push was not of the type asked for.
    #[error(
        "a push from {actor} is not a {expected} ({reason}); receive the type the Actor pushes"
    )]
    Decode {
        /// The Actor that pushed it.
        actor: ActorId,
        /// The type asked for.
        expected: &'static str,
        /// What postcard said.
        reason: String,
    },
    /// The session ended and the client will not reconnect.
    #[error("the session ended: {reason}")]
    Closed {
        /// The gateway's close code, if it gave one.
        code: Option<CloseCode>,
        /// Why the session ended, as the gateway or the connection said.
        reason: String,
    },
}

enum Command {
    Bind {
        actor: ActorId,
        done: oneshot::Sender<Result<(), ClientError>>,
    },
    Unbind {
        actor: ActorId,
    },
    Frame {
        actor: ActorId,
        bytes: Bytes,
    },
    Close {
        done: oneshot::Sender<()>,
    },
}

enum Incoming {
    Push {
        actor: ActorId,
        payload: Bytes,
    },
    Unbound {
        actor: ActorId,
        reason: String,
    },
    Undelivered {
        actor: ActorId,
        inputs: u64,
        reason: String,
    },
    Rebound {
        actor: ActorId,
    },
    Reconnected {
        reason: String,
        session: SessionInfo,
    },
    Ended(ClientError),
}

/// What the client and its driver share.
struct Shared {
    info: Mutex<SessionInfo>,
    /// Actors the application bound or is binding: their inputs are accepted.
    wanted: Mutex<BTreeSet<ActorId>>,
    /// The encoder of outgoing frames, with the gateway's announced limit.
    encoder: Mutex<FrameCodec<ClientFrame>>,
    ended: Mutex<Option<ClientError>>,
}

/// A connected game client. Dropping it closes the session.
pub struct Client {
    commands: mpsc::UnboundedSender<Command>,
    events: mpsc::UnboundedReceiver<Incoming>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session", &*self.shared.info.lock())
            .finish_non_exhaustive()
    }
}

/// One established session.
struct Link {
    conn: Connection,
    send: SendStream,
    reader: FramedRead<RecvStream, FrameCodec<ServerFrame>>,
    session: SessionId,
    node: NodeId,
    server: SocketAddr,
    max_frame: usize,
}

/// Why a connection attempt failed.
enum AttemptError {
    /// Worth trying again (elsewhere).
    Retry(String),
    /// Not: the token was refused.
    Fatal(ClientError),
}

struct Connector {
    config: ClientConfig,
    endpoint: Endpoint,
    quic: quinn::ClientConfig,
}

impl Connector {
    fn new(config: ClientConfig) -> Result<Connector, ClientError> {
        let first = config.servers.first().ok_or(ClientError::NoServers)?;
        let mut quic =
            client_quic_config(&config.ca_pem).map_err(|e| ClientError::Tls(e.to_string()))?;
        let timeouts = ClientError::Timeouts {
            keep_alive: config.keep_alive,
            idle_timeout: config.idle_timeout,
        };
        if config.keep_alive.is_zero() || config.keep_alive >= config.idle_timeout {
            return Err(timeouts);
        }
        let idle = quinn::IdleTimeout::try_from(config.idle_timeout).map_err(|_| timeouts)?;
        let mut transport = quinn::TransportConfig::default();
        transport
            .keep_alive_interval(Some(config.keep_alive))
            .max_idle_timeout(Some(idle));
        quic.transport_config(Arc::new(transport));
        let bind: SocketAddr = if first.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let endpoint = Endpoint::client(bind).map_err(|e| ClientError::Unreachable {
            attempts: 0,
            last: format!("no local UDP socket: {e}"),
        })?;
        Ok(Connector {
            config,
            endpoint,
            quic,
        })
    }

    /// Connects to `server` and authenticates.
    async fn attempt(&self, server: SocketAddr) -> Result<Link, AttemptError> {
        let timeout = self.config.connect_timeout;
        let retry = |what: &str, e: &dyn std::fmt::Display| {
            AttemptError::Retry(format!("{what} {server}: {e}"))
        };
        let connecting = self
            .endpoint
            .connect_with(self.quic.clone(), server, &self.config.server_name)
            .map_err(|e| retry("connecting to", &e))?;
        let conn = match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(retry("connecting to", &e)),
            Err(_) => {
                return Err(retry(
                    "connecting to",
                    &format!("no answer within {timeout:?}"),
                ));
            }
        };
        let (mut send, recv) = conn
            .open_bi()
            .await
            .map_err(|e| retry("opening a stream to", &e))?;
        let hello = ClientFrame::Hello {
            version: PROTOCOL_VERSION,
            token: Bytes::from(self.config.token.clone()),
        };
        let bytes = FrameCodec::<ClientFrame>::new(usize::MAX)
            .encode_frame(&hello)
            .map_err(|e| AttemptError::Fatal(ClientError::Encode(e.to_string())))?;
        send.write_all(&bytes)
            .await
            .map_err(|e| retry("writing to", &e))?;
        let mut reader =
            FramedRead::new(recv, FrameCodec::<ServerFrame>::new(self.config.max_frame));
        let first = match tokio::time::timeout(timeout, reader.next()).await {
            Ok(first) => first,
            Err(_) => {
                return Err(retry(
                    "authenticating at",
                    &format!("no answer within {timeout:?}"),
                ));
            }
        };
        match first {
            Some(Ok(ServerFrame::Welcome {
                session,
                node,
                limits,
            })) => Ok(Link {
                conn,
                send,
                reader,
                session,
                node,
                server,
                max_frame: limits.max_frame as usize,
            }),
            Some(Ok(ServerFrame::Closing { code, reason })) => Err(refusal(code, reason)),
            Some(Ok(other)) => Err(retry("authenticating at", &format!("unexpected {other:?}"))),
            Some(Err(_)) | None => match close_reason(&conn).await {
                (Some(code), reason) => Err(refusal(code, reason)),
                (None, reason) => Err(retry("authenticating at", &reason)),
            },
        }
    }

    /// Tries the servers from `start` on, with backoff, until one takes the client.
    async fn connect(
        &self,
        start: usize,
        attempts: u32,
        policy: Reconnect,
    ) -> Result<Link, ClientError> {
        let servers = &self.config.servers;
        let mut backoff = policy.min_backoff;
        let mut last = String::new();
        for attempt in 0..attempts.max(1) {
            let server = servers[(start + attempt as usize) % servers.len()];
            match self.attempt(server).await {
                Ok(link) => return Ok(link),
                Err(AttemptError::Fatal(error)) => return Err(error),
                Err(AttemptError::Retry(why)) => last = why,
            }
            if attempt + 1 < attempts {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(policy.max_backoff);
            }
        }
        Err(ClientError::Unreachable {
            attempts: attempts.max(1),
            last,
        })
    }
}

fn refusal(code: CloseCode, reason: String) -> AttemptError {
    match code {
        CloseCode::Unauthenticated => AttemptError::Fatal(ClientError::Rejected { reason }),
        code if code.retryable() => AttemptError::Retry(reason),
        code => AttemptError::Fatal(ClientError::Closed {
            code: Some(code),
            reason,
        }),
    }
}

/// Why the connection closed, from its close frame.
async fn close_reason(conn: &Connection) -> (Option<CloseCode>, String) {
    let error = match tokio::time::timeout(Duration::from_secs(1), conn.closed()).await {
        Ok(error) => error,
        Err(_) => return (None, "the gateway stopped answering".to_owned()),
    };
    match error {
        ConnectionError::ApplicationClosed(close) => (
            CloseCode::from_u64(close.error_code.into_inner()),
            String::from_utf8_lossy(&close.reason).into_owned(),
        ),
        other => (None, format!("the connection was lost: {other}")),
    }
}

impl Client {
    /// Connects to the first gateway that takes the client (trying each server in turn), and
    /// authenticates with the config's token.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        let connector = Connector::new(config)?;
        let attempts = connector.config.servers.len() as u32;
        let policy = Reconnect {
            attempts,
            ..connector.config.reconnect.unwrap_or_default()
        };
        let link = connector.connect(0, attempts, policy).await?;
        let shared = Arc::new(Shared {
            info: Mutex::new(SessionInfo {
                session: link.session,
                node: link.node.clone(),
                server: link.server,
                connects: 1,
            }),
            wanted: Mutex::new(BTreeSet::new()),
            encoder: Mutex::new(FrameCodec::new(link.max_frame)),
            ended: Mutex::new(None),
        });
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let driver = Driver {
            connector,
            shared: shared.clone(),
            commands: commands_rx,
            events: events_tx,
            binds: HashMap::new(),
            asked: HashMap::new(),
            inputs: BTreeMap::new(),
        };
        tokio::spawn(driver.run(link));
        Ok(Client {
            commands,
            events,
            shared,
        })
    }

    /// The session held now.
    pub fn session(&self) -> SessionInfo {
        self.shared.info.lock().clone()
    }

    fn ended(&self) -> ClientError {
        self.shared
            .ended
            .lock()
            .clone()
            .unwrap_or_else(|| ClientError::Closed {
                code: None,
                reason: "the client was closed".to_owned(),
            })
    }

    /// Binds an Actor to this client: its pushes come here, and it takes this client's
    /// messages. Returns once the node running the Actor applied the bind. A session elsewhere
    /// that had the Actor bound is told it lost it.
    pub async fn bind(&self, actor: &ActorId) -> Result<(), ClientError> {
        self.shared.wanted.lock().insert(actor.clone());
        let (done, answer) = oneshot::channel();
        let command = Command::Bind {
            actor: actor.clone(),
            done,
        };
        self.commands.send(command).map_err(|_| self.ended())?;
        answer.await.map_err(|_| self.ended())?
    }

    /// Stops being bound to an Actor.
    pub fn unbind(&self, actor: &ActorId) -> Result<(), ClientError> {
        self.shared.wanted.lock().remove(actor);
        self.commands
            .send(Command::Unbind {
                actor: actor.clone(),
            })
            .map_err(|_| self.ended())
    }

    /// Sends a message to a bound Actor (postcard-encoded; it must be the Actor's message type).
    /// Messages to one Actor are handled in the order sent, exactly once, also while it moves.
    pub fn send<M: Serialize>(&self, actor: &ActorId, msg: &M) -> Result<(), ClientError> {
        if !self.shared.wanted.lock().contains(actor) {
            return Err(ClientError::NotBound {
                actor: actor.clone(),
            });
        }
        let payload = postcard::to_allocvec(msg).map_err(|e| ClientError::Encode(e.to_string()))?;
        let frame = ClientFrame::Input {
            actor: actor.clone(),
            payload: payload.into(),
        };
        let bytes = self
            .shared
            .encoder
            .lock()
            .encode_frame(&frame)
            .map_err(|e| match e {
                EncodeError::TooLarge { max } => ClientError::TooLarge { max },
                other => ClientError::Encode(other.to_string()),
            })?;
        self.commands
            .send(Command::Frame {
                actor: actor.clone(),
                bytes,
            })
            .map_err(|_| self.ended())
    }

    /// The next thing the gateway said: a push (decoded as `P`), an unbind, or a reconnect.
    /// Returns the reason once the session ended for good.
    pub async fn recv<P: DeserializeOwned>(&mut self) -> Result<ClientEvent<P>, ClientError> {
        match self.events.recv().await {
            Some(Incoming::Push { actor, payload }) => match postcard::from_bytes::<P>(&payload) {
                Ok(msg) => Ok(ClientEvent::Push { actor, msg }),
                Err(e) => Err(ClientError::Decode {
                    actor,
                    expected: std::any::type_name::<P>(),
                    reason: e.to_string(),
                }),
            },
            Some(Incoming::Unbound { actor, reason }) => Ok(ClientEvent::Unbound { actor, reason }),
            Some(Incoming::Undelivered {
                actor,
                inputs,
                reason,
            }) => Ok(ClientEvent::Undelivered {
                actor,
                inputs,
                reason,
            }),
            Some(Incoming::Rebound { actor }) => Ok(ClientEvent::Rebound { actor }),
            Some(Incoming::Reconnected { reason, session }) => {
                Ok(ClientEvent::Reconnected { reason, session })
            }
            Some(Incoming::Ended(error)) => {
                *self.shared.ended.lock() = Some(error.clone());
                Err(error)
            }
            None => Err(self.ended()),
        }
    }

    /// Says goodbye and closes the session.
    pub async fn close(self) {
        let (done, closed) = oneshot::channel();
        if self.commands.send(Command::Close { done }).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(2), closed).await;
        }
    }
}

/// How a connection's service ended.
enum Ended {
    /// The application closed the client (or dropped it).
    ByApp(Option<oneshot::Sender<()>>),
    /// The gateway ended the session, or the connection was lost.
    Closed {
        code: Option<CloseCode>,
        reason: String,
    },
}

/// The background task that owns the connection.
struct Driver {
    connector: Connector,
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<Incoming>,
    /// Binds waiting for their answer.
    binds: HashMap<ActorId, Vec<oneshot::Sender<Result<(), ClientError>>>>,
    /// `Bind` frames written on this session that no `Bound` or `BindRefused` answered yet, by
    /// Actor: a `Bound` beyond them is the gateway's own rebind after a crash.
    asked: HashMap<ActorId, u32>,
    /// Inputs written to this session, by Actor, and how many of them the gateway confirmed:
    /// if the session ends now, the others may not have arrived.
    inputs: BTreeMap<ActorId, Sent>,
}

/// Inputs written to one Actor in the current session.
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    written: u64,
    delivered: u64,
}

impl Driver {
    async fn run(mut self, mut link: Link) {
        loop {
            match self.serve(&mut link).await {
                Ended::ByApp(done) => {
                    let bye =
                        FrameCodec::<ClientFrame>::new(usize::MAX).encode_frame(&ClientFrame::Bye);
                    if let Ok(bye) = bye {
                        let _ = link.send.write_all(&bye).await;
                    }
                    let _ = link.send.finish();
                    let _ = tokio::time::timeout(Duration::from_secs(1), link.send.stopped()).await;
                    link.conn
                        .close(quinn::VarInt::from_u32(0), b"client closed");
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                    return;
                }
                Ended::Closed { code, reason } => {
                    self.report_undelivered(None, &reason);
                    let retry = code.is_none_or(CloseCode::retryable);
                    let policy = self.connector.config.reconnect.filter(|_| retry);
                    let Some(policy) = policy else {
                        self.end(ClientError::Closed { code, reason });
                        return;
                    };
                    let servers = self.connector.config.servers.len();
                    let next = self
                        .connector
                        .config
                        .servers
                        .iter()
                        .position(|s| *s == link.server)
                        .map_or(0, |i| (i + 1) % servers);
                    match self.connector.connect(next, policy.attempts, policy).await {
                        Ok(new) => {
                            link = new;
                            self.resumed(&mut link, reason).await;
                        }
                        Err(error) => {
                            self.end(error);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Takes an answer to a `Bind` of `actor` this session wrote; false if none waited for one.
    fn answered(&mut self, actor: &ActorId) -> bool {
        let Some(asked) = self.asked.get_mut(actor) else {
            return false;
        };
        *asked -= 1;
        if *asked == 0 {
            self.asked.remove(actor);
        }
        true
    }

    /// Tells the application of the inputs to `actor` (every Actor if `None`) that the gateway
    /// had not confirmed: an ended session or binding may have swallowed them.
    fn report_undelivered(&mut self, actor: Option<&ActorId>, reason: &str) {
        let ended = match actor {
            Some(actor) => self.inputs.remove_entry(actor).into_iter().collect(),
            None => std::mem::take(&mut self.inputs),
        };
        for (actor, sent) in ended {
            let inputs = sent.written.saturating_sub(sent.delivered);
            if inputs > 0 {
                let reason = reason.to_owned();
                let _ = self.events.send(Incoming::Undelivered {
                    actor,
                    inputs,
                    reason,
                });
            }
        }
    }

    fn end(&mut self, error: ClientError) {
        for (_, waiting) in self.binds.drain() {
            for done in waiting {
                let _ = done.send(Err(error.clone()));
            }
        }
        *self.shared.ended.lock() = Some(error.clone());
        let _ = self.events.send(Incoming::Ended(error));
    }

    /// A new session: bind again what was bound (or being bound), then report it.
    async fn resumed(&mut self, link: &mut Link, reason: String) {
        let session = {
            let mut info = self.shared.info.lock();
            info.session = link.session;
            info.node = link.node.clone();
            info.server = link.server;
            info.connects += 1;
            info.clone()
        };
        *self.shared.encoder.lock() = FrameCodec::new(link.max_frame);
        let actors: Vec<ActorId> = self.shared.wanted.lock().iter().cloned().collect();
        self.asked.clear();
        for actor in actors {
            *self.asked.entry(actor.clone()).or_default() += 1;
            let _ = write(link, &ClientFrame::Bind { actor }).await;
        }
        let _ = self.events.send(Incoming::Reconnected { reason, session });
    }

    /// Serves one connection until it ends.
    async fn serve(&mut self, link: &mut Link) -> Ended {
        loop {
            tokio::select! {
                command = self.commands.recv() => {
                    let written = match command {
                        None => return Ended::ByApp(None),
                        Some(Command::Close { done }) => return Ended::ByApp(Some(done)),
                        Some(Command::Bind { actor, done }) => {
                            self.binds.entry(actor.clone()).or_default().push(done);
                            *self.asked.entry(actor.clone()).or_default() += 1;
                            write(link, &ClientFrame::Bind { actor }).await
                        }
                        Some(Command::Unbind { actor }) => write(link, &ClientFrame::Unbind { actor }).await,
                        Some(Command::Frame { actor, bytes }) => {
                            self.inputs.entry(actor).or_default().written += 1;
                            link.send.write_all(&bytes).await.map_err(|e| e.to_string())
                        }
                    };
                    if let Err(why) = written {
                        return self.lost(link, why).await;
                    }
                }
                frame = link.reader.next() => match frame {
                    Some(Ok(frame)) => {
                        if let Some(ended) = self.on_frame(frame) {
                            return ended;
                        }
                    }
                    Some(Err(DecodeError::Io(error))) => return self.lost(link, error.to_string()).await,
                    Some(Err(error)) => return refuse(link, &error),
                    None => return self.lost(link, "the gateway closed the stream".to_owned()).await,
                },
            }
        }
    }

    /// The connection failed: find out why from its close frame, if it has one.
    async fn lost(&mut self, link: &Link, why: String) -> Ended {
        match close_reason(&link.conn).await {
            (Some(code), reason) => Ended::Closed {
                code: Some(code),
                reason,
            },
            (None, reason) => Ended::Closed {
                code: None,
                reason: format!("{why}; {reason}"),
            },
        }
    }

    fn on_frame(&mut self, frame: ServerFrame) -> Option<Ended> {
        match frame {
            ServerFrame::Push { actor, payload, .. } => {
                let _ = self.events.send(Incoming::Push { actor, payload });
            }
            ServerFrame::Bound { actor } => {
                let answer = self.answered(&actor);
                for done in self.binds.remove(&actor).unwrap_or_default() {
                    let _ = done.send(Ok(()));
                }
                if !answer && self.shared.wanted.lock().contains(&actor) {
                    let _ = self.events.send(Incoming::Rebound { actor });
                }
            }
            ServerFrame::Delivered { actor, inputs } => {
                if let Some(sent) = self.inputs.get_mut(&actor) {
                    sent.delivered = sent.delivered.max(inputs);
                }
            }
            ServerFrame::Undelivered { actor, inputs } => {
                if let Some(sent) = self.inputs.get_mut(&actor) {
                    let settled = inputs.min(sent.written);
                    let unconfirmed = settled.saturating_sub(sent.delivered);
                    sent.delivered = sent.delivered.max(settled);
                    if unconfirmed > 0 {
                        let _ = self.events.send(Incoming::Undelivered {
                            actor,
                            inputs: unconfirmed,
                            reason: "the node running it crashed".to_owned(),
                        });
                    }
                }
            }
            ServerFrame::BindRefused { actor, reason } => {
                self.shared.wanted.lock().remove(&actor);
                self.answered(&actor);
                self.report_undelivered(Some(&actor), &reason);
                let waiting = self.binds.remove(&actor).unwrap_or_default();
                if waiting.is_empty() {
                    // A bind made again after a reconnect: the application hears of it here.
                    let _ = self.events.send(Incoming::Unbound { actor, reason });
                } else {
                    for done in waiting {
                        let error = ClientError::BindRefused {
                            actor: actor.clone(),
                            reason: reason.clone(),
                        };
                        let _ = done.send(Err(error));
                    }
                }
            }
            ServerFrame::Unbound { actor, reason } => {
                if self.shared.wanted.lock().remove(&actor) {
                    self.report_undelivered(Some(&actor), &reason);
                } else {
                    // The application unbound it: what it sent before goes on to the Actor.
                    self.inputs.remove(&actor);
                }
                let _ = self.events.send(Incoming::Unbound { actor, reason });
            }
            ServerFrame::Closing { code, reason } => {
                return Some(Ended::Closed {
                    code: Some(code),
                    reason,
                });
            }
            ServerFrame::Welcome { .. } => {}
        }
        None
    }
}

/// The gateway sent what this client cannot read: end the session here, without reconnecting
/// (the next gateway would send the same).
fn refuse(link: &Link, error: &DecodeError) -> Ended {
    let (code, reason) = match error {
        DecodeError::TooLarge { len, max } => (
            CloseCode::TooLarge,
            format!(
                "the gateway sent a {len}-byte frame, over this client's {max}-byte limit; \
                 raise ClientConfig::max_frame"
            ),
        ),
        other => (
            CloseCode::Malformed,
            format!(
                "the gateway sent a frame this client cannot read ({other}); update the client"
            ),
        ),
    };
    link.conn
        .close(quinn::VarInt::from_u32(code.to_u32()), reason.as_bytes());
    Ended::Closed {
        code: Some(code),
        reason,
    }
}

async fn write(link: &mut Link, frame: &ClientFrame) -> Result<(), String> {
    let bytes = FrameCodec::<ClientFrame>::new(link.max_frame)
        .encode_frame(frame)
        .map_err(|e| e.to_string())?;
    link.send.write_all(&bytes).await.map_err(|e| e.to_string())
}
