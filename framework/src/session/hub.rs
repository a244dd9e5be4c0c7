//! The async shell of sessions: the client listener, a task per session that reads the client's
//! frames and feeds them to its [`SessionMachine`], a writer per session, and the mesh side of
//! bindings (binds, pushes, seals and releases), all fed to the same machines.
//!
//! A machine is fed under its session's lock and its actions are carried out under it too, so
//! inputs leave in the order the client sent them, and a seal takes effect between two inputs.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use parking_lot::Mutex;
use quinn::{Connection, Endpoint, RecvStream, SendStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::codec::{Decoder, FramedRead};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::SessionSettings;
use super::frames::{BoundActor, SessionFrame};
use super::machine::{Action, Event, SessionMachine};
use super::wire::{ClientFrame, CloseCode, ServerFrame};
use super::{Authenticator, SessionError, SessionId, SessionLimits, SessionOp, SessionRef};
use crate::ids::{ActorId, NodeId, UnitId};
use crate::mesh::OsSockets;
use crate::mesh::codec::{DecodeError, EncodeError, FrameCodec};
use crate::mesh::socket::bind_endpoint;
use crate::node::{Node, Payload, ReplyTo};
use crate::relocation::protocol::SourceEvent;

/// How long a bind may wait for the node running its Actor to answer.
const BIND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a binding to an Actor whose node left the cluster waits for recovery to rebuild it.
const REBIND_WAIT: Duration = Duration::from_secs(30);
/// How long a closing session may take to tell its client why before the connection is cut.
const CLOSE_LINGER: Duration = Duration::from_secs(1);
/// How long a shutdown waits for its sessions to say goodbye.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);
/// The longest close reason put in a QUIC close frame (it must fit one packet).
const MAX_REASON: usize = 400;
/// How many kinds of client frame this gateway knows (the enum tags 0..KINDS).
const CLIENT_FRAME_KINDS: u32 = 5;

/// The client listener of one node and its live sessions.
pub(crate) struct Hub {
    limits: SessionLimits,
    authenticator: Arc<dyn Authenticator>,
    encoder: FrameCodec<ServerFrame>,
    local_addr: SocketAddr,
    endpoint: Mutex<Option<Endpoint>>,
    sessions: Mutex<HashMap<SessionId, Arc<Live>>>,
    stop: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
    socket_released: Mutex<Option<oneshot::Receiver<()>>>,
}

/// One live session.
struct Live {
    id: SessionId,
    machine: Mutex<SessionMachine>,
    out: mpsc::Sender<Bytes>,
    /// Why it ended, once it has.
    ending: Mutex<Option<(CloseCode, String)>>,
    ended: CancellationToken,
    /// Deadlines may have changed: the session task looks again.
    wake: Notify,
}

impl Hub {
    /// Binds the listener; nothing is accepted until [`Hub::start`].
    pub async fn bind(settings: &SessionSettings) -> Result<Hub, SessionError> {
        settings.limits.validate()?;
        let limits = settings.limits;
        let idle = crate::mesh::idle_timeout(limits.idle_timeout).map_err(SessionError::Limits)?;
        let mut transport = quinn::TransportConfig::default();
        transport
            .max_idle_timeout(Some(idle))
            // One frame stream each way, opened by the client; nothing else.
            .max_concurrent_bidi_streams(quinn::VarInt::from_u32(1))
            .max_concurrent_uni_streams(quinn::VarInt::from_u32(0));
        let mut server =
            quinn::ServerConfig::with_crypto(Arc::new(settings.tls.quic_server_config()?));
        server.transport_config(Arc::new(transport));
        let bind_err = |source| SessionError::Bind {
            addr: settings.listen,
            source,
        };
        let (endpoint, local_addr, socket_released) =
            bind_endpoint(&OsSockets, settings.listen, server)
                .await
                .map_err(bind_err)?;
        Ok(Hub {
            limits,
            authenticator: settings.authenticator.clone(),
            encoder: FrameCodec::new(limits.max_frame),
            local_addr,
            endpoint: Mutex::new(Some(endpoint)),
            sessions: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            tasks: Mutex::new(JoinSet::new()),
            socket_released: Mutex::new(Some(socket_released)),
        })
    }

    /// Where the listener is bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts accepting clients.
    pub fn start(&self, node: &Node) {
        let Some(endpoint) = self.endpoint.lock().clone() else {
            return;
        };
        info!(node = %node.id(), addr = %self.local_addr, "client listener open");
        self.tasks
            .lock()
            .spawn(accept_loop(node.clone(), endpoint, self.stop.clone()));
    }

    /// Closes every session with `reason` (each client reads it), waits for them to say so, and
    /// releases the port.
    pub async fn shutdown(&self, node: &Node, reason: &str) {
        self.stop.cancel();
        let live: Vec<Arc<Live>> = self.sessions.lock().values().cloned().collect();
        for session in &live {
            self.apply(
                node,
                session,
                Event::Shutdown {
                    reason: reason.to_owned(),
                },
            );
        }
        let mut tasks = std::mem::take(&mut *self.tasks.lock());
        let all_done = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(SHUTDOWN_WAIT, all_done).await.is_err() {
            warn!(node = %node.id(), "sessions did not close in time; cutting their connections");
        }
        self.close_endpoint().await;
    }

    /// Drops every connection at once, as a crash would.
    pub async fn abort(&self) {
        self.stop.cancel();
        let mut tasks = std::mem::take(&mut *self.tasks.lock());
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        self.close_endpoint().await;
    }

    async fn close_endpoint(&self) {
        let endpoint = self.endpoint.lock().take();
        if let Some(endpoint) = endpoint {
            endpoint.close(
                quinn::VarInt::from_u32(CloseCode::Shutdown.to_u32()),
                b"node stopped",
            );
            endpoint.wait_idle().await;
        }
        let released = self.socket_released.lock().take();
        if let Some(released) = released {
            drop(self.sessions.lock().drain());
            let _ = released.await;
        }
    }

    fn session(&self, id: SessionId) -> Option<Arc<Live>> {
        self.sessions.lock().get(&id).cloned()
    }

    /// Feeds an event to a session by id (from the mesh, or a bind's answer).
    fn feed(&self, node: &Node, id: SessionId, event: Event) {
        if let Some(live) = self.session(id) {
            self.apply(node, &live, event);
        }
    }

    /// Feeds an event to a session and carries out what it asks, under the session's lock.
    fn apply(&self, node: &Node, live: &Live, event: Event) {
        let mut machine = live.machine.lock();
        let now = Instant::now();
        let mut events = VecDeque::from([event]);
        while let Some(event) = events.pop_front() {
            for action in machine.on(event, now) {
                match action {
                    Action::Send(frame) => {
                        if let Some(next) = self.send(live, &frame) {
                            events.push_back(next);
                        }
                    }
                    Action::Authenticate { token } => {
                        let verdict = self.authenticator.authenticate(&token);
                        events.push_back(Event::Authenticated(verdict));
                    }
                    Action::Authorize { actor } => {
                        let verdict = match machine.identity() {
                            Some(identity) => self.authenticator.authorize_bind(identity, &actor),
                            None => Err("the session is not authenticated".to_owned()),
                        };
                        events.push_back(Event::Authorized { actor, verdict });
                    }
                    Action::Forward {
                        actor,
                        owner,
                        payload,
                    } => node.send_encoded(
                        UnitId::Actor(actor),
                        Payload::Encoded(payload),
                        None,
                        Some(&owner),
                    ),
                    Action::RequestBind { actor, epoch } => {
                        self.request_bind(node, live.id, actor, epoch);
                    }
                    Action::RequestRebind { actor, epoch, gone } => {
                        tokio::spawn(rebind(node.clone(), live.id, actor, epoch, gone));
                    }
                    Action::RequestUnbind { actor, epoch, via } => {
                        let op = SessionOp::Unbind(SessionRef {
                            gateway: node.id().clone(),
                            session: live.id,
                            epoch,
                        });
                        node.send_encoded(
                            UnitId::Actor(actor),
                            Payload::Session(op),
                            None,
                            via.as_ref(),
                        );
                    }
                    Action::Close { code, reason } => {
                        debug!(session = %live.id, ?code, %reason, "session closing");
                        *live.ending.lock() = Some((code, reason));
                        live.ended.cancel();
                    }
                }
            }
        }
        drop(machine);
        live.wake.notify_one();
    }

    /// Queues a frame for the client; an event if it cannot be.
    fn send(&self, live: &Live, frame: &ServerFrame) -> Option<Event> {
        let bytes = match self.encoder.encode_frame(frame) {
            Ok(bytes) => bytes,
            Err(EncodeError::TooLarge { max }) => {
                return Some(Event::BadFrame {
                    code: CloseCode::Internal,
                    reason: format!(
                        "the game server sent a push over the {max}-byte frame limit; it must \
                         push smaller messages"
                    ),
                });
            }
            Err(error) => {
                return Some(Event::BadFrame {
                    code: CloseCode::Internal,
                    reason: format!("a frame for the client could not be encoded: {error}"),
                });
            }
        };
        match live.out.try_send(bytes) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(_)) => Some(Event::SlowReader),
            // The writer is gone with the connection.
            Err(mpsc::error::TrySendError::Closed(_)) => None,
        }
    }

    /// Tells every session that `gone` left the cluster: bindings to Actors it ran are made again
    /// once recovery has rebuilt them.
    pub fn owner_left(&self, node: &Node, gone: &NodeId) {
        let live: Vec<Arc<Live>> = self.sessions.lock().values().cloned().collect();
        for session in &live {
            let event = Event::OwnerLeft { node: gone.clone() };
            self.apply(node, session, event);
        }
    }

    /// Sends a bind to the Actor, as a request so that a missing Actor is answered too.
    fn request_bind(&self, node: &Node, session: SessionId, actor: ActorId, epoch: u32) {
        let waiting = node.core.replies.open();
        if let Some(waiting) = &waiting {
            let reply = ReplyTo {
                node: node.id().clone(),
                request: waiting.request,
            };
            let op = SessionOp::Bind(SessionRef {
                gateway: node.id().clone(),
                session,
                epoch,
            });
            node.send_encoded(
                UnitId::Actor(actor.clone()),
                Payload::Session(op),
                Some(reply),
                None,
            );
        }
        let node = node.clone();
        // The verdict is fed from a task: this runs under the session's lock.
        tokio::spawn(async move {
            // Success arrives as a `Bound` frame ahead of this reply; only failures matter here.
            let failed = match waiting {
                None => format!(
                    "{} requests are already waiting for replies on the gateway",
                    node.core.replies.limit()
                ),
                Some(mut waiting) => {
                    match tokio::time::timeout(BIND_TIMEOUT, &mut waiting.answer).await {
                        Ok(Ok(Ok(_))) => return,
                        Ok(Ok(Err(error))) => error.to_string(),
                        Ok(Err(_)) => "the bind was dropped".to_owned(),
                        Err(_) => format!("the Actor did not answer within {BIND_TIMEOUT:?}"),
                    }
                }
            };
            if let Some(hub) = node.core.sessions.as_ref() {
                let owner = node.id().clone();
                let event = Event::Bound {
                    actor,
                    epoch,
                    owner,
                    verdict: Err(failed),
                };
                hub.feed(&node, session, event);
            }
        });
    }

    /// A session frame from a node running bound Actors (or from this one).
    pub fn on_frame(&self, node: &Node, from: NodeId, frame: SessionFrame) {
        match frame {
            SessionFrame::Bound {
                session,
                actor,
                epoch,
                verdict,
            } => self.feed(
                node,
                session,
                Event::Bound {
                    actor,
                    epoch,
                    owner: from,
                    verdict,
                },
            ),
            SessionFrame::Unbound {
                session,
                actor,
                epoch,
                reason,
            } => self.feed(
                node,
                session,
                Event::Unbound {
                    actor,
                    epoch,
                    reason,
                },
            ),
            SessionFrame::Push {
                session,
                actor,
                epoch,
                seq,
                payload,
            } => self.feed(
                node,
                session,
                Event::Push {
                    actor,
                    epoch,
                    seq,
                    payload,
                },
            ),
            SessionFrame::Seal { rel, actors, hold } => {
                for BoundActor {
                    actor,
                    session,
                    epoch,
                } in actors
                {
                    let seal = Event::Seal {
                        rel,
                        actor,
                        epoch,
                        hold,
                    };
                    self.feed(node, session, seal);
                }
            }
            SessionFrame::Release { rel, actors, owner } => {
                for BoundActor {
                    actor,
                    session,
                    epoch,
                } in actors
                {
                    let owner = owner.clone();
                    let event = Event::Release {
                        rel,
                        actor,
                        epoch,
                        owner,
                    };
                    self.feed(node, session, event);
                }
            }
            SessionFrame::SealAck { .. } => {}
        }
    }
}

impl Node {
    /// Where this node accepts game clients, if it does.
    pub fn session_addr(&self) -> Option<SocketAddr> {
        self.core.sessions.as_ref().map(Hub::local_addr)
    }

    /// How many client sessions this node holds now.
    pub fn session_count(&self) -> usize {
        self.core
            .sessions
            .as_ref()
            .map_or(0, |hub| hub.sessions.lock().len())
    }

    /// Sends a session frame to a gateway node (this one included).
    pub(crate) fn to_gateway(
        &self,
        gateway: &NodeId,
        frame: SessionFrame,
    ) -> Result<(), crate::mesh::MeshError> {
        if gateway == self.id() {
            self.on_session_frame(self.id().clone(), frame);
            Ok(())
        } else {
            self.mesh_send(gateway, crate::cluster::frames::Frame::Session(frame))
        }
    }

    /// A session frame arrived from `from` (or from this node itself).
    pub(crate) fn on_session_frame(&self, from: NodeId, frame: SessionFrame) {
        match frame {
            SessionFrame::SealAck { rel } => {
                if let Some(waiting) = self.core.moves.outgoing.lock().get(&rel) {
                    let _ = waiting.events.send(SourceEvent::GatewaySealed(from));
                }
            }
            SessionFrame::Seal { rel, actors, hold } => {
                if let Some(hub) = &self.core.sessions {
                    let seal = SessionFrame::Seal { rel, actors, hold };
                    hub.on_frame(self, from.clone(), seal);
                }
                // Every input this gateway sent before is queued ahead of this answer.
                if let Err(error) = self.to_gateway(&from, SessionFrame::SealAck { rel }) {
                    debug!(%from, %error, "seal acknowledgement not sent");
                }
            }
            other => {
                if let Some(hub) = &self.core.sessions {
                    hub.on_frame(self, from, other);
                }
            }
        }
    }
}

/// Binds an Actor again after the node that ran it left the cluster: once its record names
/// another node (recovery rebuilt it there) or none (it was not rebuilt, and the bind says so).
/// Recovery writes the record, so it is read again every membership refresh, for at most
/// `REBIND_WAIT`; then the bind goes anyway, and its answer tells the client.
async fn rebind(node: Node, session: SessionId, actor: ActorId, epoch: u32, gone: NodeId) {
    let id = UnitId::Actor(actor.clone());
    let until = Instant::now() + REBIND_WAIT;
    let mut every = tokio::time::interval(node.config().refresh.max(Duration::from_millis(10)));
    while Instant::now() < until && !node.core.stop.is_cancelled() {
        every.tick().await;
        match node.read_record(&id).await {
            Ok(Some(record)) if record.owner == gone => {}
            Ok(_) => break,
            Err(error) => debug!(%actor, %error, "record not read; reading again"),
        }
    }
    if let Some(hub) = node.core.sessions.as_ref() {
        hub.request_bind(&node, session, actor, epoch);
    }
}

/// Accepts clients until the node stops.
async fn accept_loop(node: Node, endpoint: Endpoint, stop: CancellationToken) {
    loop {
        let incoming = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => break,
            },
        };
        let Some(hub) = node.core.sessions.as_ref() else {
            break;
        };
        let mut tasks = hub.tasks.lock();
        // Sessions that ended leave their task in the set until reaped.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(run_session(node.clone(), incoming, stop.clone()));
    }
}

/// What a session's reader can meet.
pub(crate) enum ReadError {
    /// The stream or connection failed: the client is gone.
    Io(std::io::Error),
    /// The client sent something unusable.
    Bad { code: CloseCode, reason: String },
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

impl From<DecodeError> for ReadError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Io(e) => ReadError::Io(e),
            DecodeError::TooLarge { len, max } => ReadError::Bad {
                code: CloseCode::TooLarge,
                reason: format!(
                    "a frame of {len} bytes is over the {max}-byte limit; send smaller inputs"
                ),
            },
            DecodeError::Truncated { buffered } => ReadError::Io(std::io::Error::other(format!(
                "the stream ended inside a frame ({buffered} bytes of it received)"
            ))),
            other => ReadError::Bad {
                code: CloseCode::Malformed,
                reason: format!("malformed frame: {other}"),
            },
        }
    }
}

/// Client frames, told apart: unknown kinds from malformed ones.
pub(crate) struct ClientDecoder(FrameCodec<ClientFrame>);

impl ClientDecoder {
    /// A decoder refusing frames over `max_frame` bytes.
    pub(crate) fn new(max_frame: usize) -> Self {
        ClientDecoder(FrameCodec::new(max_frame))
    }

    fn frame(body: &BytesMut) -> Result<ClientFrame, ReadError> {
        if let Ok((kind, _)) = postcard::take_from_bytes::<u32>(body)
            && kind >= CLIENT_FRAME_KINDS
        {
            return Err(ReadError::Bad {
                code: CloseCode::UnknownFrame,
                reason: format!(
                    "frame type {kind} is unknown; this gateway speaks client protocol version {}",
                    super::wire::PROTOCOL_VERSION
                ),
            });
        }
        match postcard::take_from_bytes::<ClientFrame>(body) {
            Ok((frame, [])) => Ok(frame),
            Ok((_, rest)) => Err(ReadError::Bad {
                code: CloseCode::Malformed,
                reason: format!(
                    "malformed frame: {} bytes after its value; the client speaks another version",
                    rest.len()
                ),
            }),
            Err(e) => Err(ReadError::Bad {
                code: CloseCode::Malformed,
                reason: format!("malformed frame of {} bytes: {e}", body.len()),
            }),
        }
    }
}

impl Decoder for ClientDecoder {
    type Item = ClientFrame;
    type Error = ReadError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<ClientFrame>, ReadError> {
        match self.0.decode_body(src)? {
            Some(body) => Self::frame(&body).map(Some),
            None => Ok(None),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<ClientFrame>, ReadError> {
        match self.0.decode_body_eof(src)? {
            Some(body) => Self::frame(&body).map(Some),
            None => Ok(None),
        }
    }
}

fn new_session_id(sessions: &HashMap<SessionId, Arc<Live>>) -> SessionId {
    loop {
        let id = SessionId(rand::random());
        if !sessions.contains_key(&id) {
            return id;
        }
    }
}

fn close_connection(conn: &Connection, code: CloseCode, reason: &str) {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    conn.close(
        quinn::VarInt::from_u32(code.to_u32()),
        &reason.as_bytes()[..end],
    );
}

/// Runs one client's session from its TLS handshake to its end.
async fn run_session(node: Node, incoming: quinn::Incoming, stop: CancellationToken) {
    let Some(hub) = node.core.sessions.as_ref() else {
        return;
    };
    let remote = incoming.remote_address();
    let limits = hub.limits;
    let conn = match incoming.await {
        Ok(conn) => conn,
        Err(error) => {
            debug!(%remote, %error, "client refused: TLS handshake failed");
            return;
        }
    };
    let stream = tokio::select! {
        () = stop.cancelled() => return close_connection(&conn, CloseCode::Shutdown, "node shutting down"),
        stream = tokio::time::timeout(limits.auth_timeout, conn.accept_bi()) => stream,
    };
    let (send, recv) = match stream {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            debug!(%remote, %error, "client left before opening its stream");
            return;
        }
        Err(_) => {
            let reason = format!(
                "no stream within {:?}; open one and send Hello",
                limits.auth_timeout
            );
            return close_connection(&conn, CloseCode::Unauthenticated, &reason);
        }
    };
    let (out, out_rx) = mpsc::channel(limits.max_outbound);
    let live = {
        let mut sessions = hub.sessions.lock();
        let id = new_session_id(&sessions);
        let machine = SessionMachine::new(id, node.id().clone(), limits, Instant::now());
        let live = Arc::new(Live {
            id,
            machine: Mutex::new(machine),
            out,
            ending: Mutex::new(None),
            ended: CancellationToken::new(),
            wake: Notify::new(),
        });
        sessions.insert(id, live.clone());
        live
    };
    debug!(session = %live.id, %remote, "client connected");
    if stop.is_cancelled() {
        let reason = format!(
            "node {} is shutting down; connect to another node",
            node.id()
        );
        hub.apply(&node, &live, Event::Shutdown { reason });
    }
    let writer = tokio::spawn(write_frames(
        conn.clone(),
        send,
        out_rx,
        live.clone(),
        hub.encoder.clone(),
    ));
    read_frames(&node, hub, &live, recv).await;
    hub.sessions.lock().remove(&live.id);
    let _ = writer.await;
    debug!(session = %live.id, "session ended");
}

/// Reads the client's frames into the machine until the session ends.
async fn read_frames(node: &Node, hub: &Hub, live: &Arc<Live>, recv: RecvStream) {
    let mut reader = FramedRead::new(recv, ClientDecoder::new(hub.limits.max_frame));
    loop {
        let deadline = live.machine.lock().next_deadline();
        let event = tokio::select! {
            biased;
            () = live.ended.cancelled() => return,
            () = live.wake.notified() => continue,
            () = sleep_until(deadline) => Event::Tick,
            frame = reader.next() => match frame {
                Some(Ok(frame)) => checked(node, live, frame),
                Some(Err(ReadError::Bad { code, reason })) => Event::BadFrame { code, reason },
                Some(Err(ReadError::Io(error))) => Event::ClientGone {
                    reason: format!("the connection ended: {error}"),
                },
                None => Event::ClientGone {
                    reason: "the client closed its stream".to_owned(),
                },
            },
        };
        hub.apply(node, live, event);
    }
}

/// An input is checked against its Actor's message type, when this node knows the factory.
fn checked(node: &Node, live: &Live, frame: ClientFrame) -> Event {
    if let ClientFrame::Input { actor, payload } = &frame {
        let type_name = live.machine.lock().type_of(actor).map(str::to_owned);
        if let Some(factory) = type_name.and_then(|t| node.core.factory(&t))
            && let Err(why) = factory.check_message(payload)
        {
            let expected = factory.info().msg_type_name;
            return Event::BadFrame {
                code: CloseCode::BadInput,
                reason: format!("an input for {actor} is not a {expected}: {why}"),
            };
        }
    }
    Event::Client(frame)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Writes queued frames to the client; once the session ends, tells the client why and closes.
async fn write_frames(
    conn: Connection,
    mut send: SendStream,
    mut out: mpsc::Receiver<Bytes>,
    live: Arc<Live>,
    encoder: FrameCodec<ServerFrame>,
) {
    let mut whole = true;
    loop {
        let bytes = tokio::select! {
            biased;
            bytes = out.recv() => match bytes {
                Some(bytes) => bytes,
                None => break,
            },
            () = live.ended.cancelled() => break,
        };
        tokio::select! {
            written = send.write_all(&bytes) => if written.is_err() { return },
            () = live.ended.cancelled() => {
                // Cut off mid-frame (a client that does not read): only the close frame tells why.
                whole = false;
                break;
            }
        }
    }
    let Some((code, reason)) = live.ending.lock().clone() else {
        return;
    };
    let goodbye = async {
        if whole {
            while let Ok(bytes) = out.try_recv() {
                send.write_all(&bytes).await?;
            }
            let closing = ServerFrame::Closing {
                code,
                reason: reason.clone(),
            };
            if let Ok(bytes) = encoder.encode_frame(&closing) {
                send.write_all(&bytes).await?;
            }
            let _ = send.finish();
            let _ = send.stopped().await;
        }
        Ok::<_, quinn::WriteError>(())
    };
    let _ = tokio::time::timeout(CLOSE_LINGER, goodbye).await;
    close_connection(&conn, code, &reason);
}
