//! One client's session, whatever its transport: opened when a transport accepts the connection,
//! fed its client's frames and the mesh's answers, and driven by its [`SessionMachine`] until it
//! ends. The transports (`quic`, `websocket`) differ only in how they read and write frames; the
//! hub above them binds their listeners.
//!
//! A machine is fed under its session's lock and its actions are carried out under it too, so
//! inputs leave in the order the client sent them, and a seal takes effect between two inputs.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_core::session::machine::{Action, Event, REBIND_WAIT, SessionMachine, rebind_may_go};
use futures_util::{Stream, StreamExt};
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::host::SessionHost;
use super::wire::{ClientFrame, CloseCode, Encoding, ServerFrame};
use super::{Authenticator, SessionId, SessionLimits, SessionOp, SessionRef, SessionSettings};
use crate::ids::{ActorId, NodeId, UnitId};
use crate::mesh::codec::{DecodeError, EncodeError, FrameCodec};
use crate::unit::envelope::{Payload, ReplyTo};

/// How long a bind may wait for the node running its Actor to answer.
const BIND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a fence behind a session's inputs may wait for its answer.
const FENCE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a closing session may take to tell its client why before the connection is cut.
pub(super) const CLOSE_LINGER: Duration = Duration::from_secs(1);
/// How long a shutdown waits for its sessions to say goodbye.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// The live sessions of one gateway, whatever their transport, and their tasks.
pub(crate) struct Sessions {
    pub(super) limits: SessionLimits,
    authenticator: Arc<dyn Authenticator>,
    encoder: FrameCodec<ServerFrame>,
    live: Mutex<HashMap<SessionId, Arc<Live>>>,
    /// Cancelled when the node stops: no more clients are accepted.
    pub(super) stop: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
}

/// One live session.
pub(crate) struct Live {
    pub(super) id: SessionId,
    /// How its client reads and writes application messages.
    encoding: Encoding,
    machine: Mutex<SessionMachine>,
    out: mpsc::Sender<Bytes>,
    /// Why it ended, once it has.
    ending: Mutex<Option<(CloseCode, String)>>,
    pub(super) ended: CancellationToken,
    /// Deadlines may have changed: the session task looks again.
    wake: Notify,
}

impl Live {
    /// Why the session ended, once it has.
    pub(super) fn ending(&self) -> Option<(CloseCode, String)> {
        self.ending.lock().clone()
    }
}

impl Sessions {
    /// No sessions yet, held to the limits of `settings` (already validated).
    pub(super) fn new(settings: &SessionSettings) -> Sessions {
        Sessions {
            limits: settings.limits,
            authenticator: settings.authenticator.clone(),
            encoder: FrameCodec::new(settings.limits.max_frame),
            live: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    /// How many sessions are live now.
    pub(crate) fn count(&self) -> usize {
        self.live.lock().len()
    }

    /// Runs a session's task (or a listener's accept loop) with the others, so shutdown waits
    /// for it.
    pub(super) fn spawn_task(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks.lock();
        // Sessions that ended leave their task in the set until reaped.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Closes every session with `reason` (each client reads it) and waits for them to say so.
    pub(super) async fn close_all<H: SessionHost>(self: &Arc<Self>, node: &H, reason: &str) {
        self.stop.cancel();
        for session in &self.all() {
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
    }

    /// Drops every connection at once, as a crash would.
    pub(super) async fn abort(&self) {
        self.stop.cancel();
        let mut tasks = std::mem::take(&mut *self.tasks.lock());
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }

    /// Forgets every session, so nothing holds their connections any more.
    pub(super) fn forget_all(&self) {
        drop(self.live.lock().drain());
    }

    /// Every live session now.
    pub(super) fn all(&self) -> Vec<Arc<Live>> {
        self.live.lock().values().cloned().collect()
    }

    /// A session for a client whose connection was just accepted, and the queue of what to
    /// write to it.
    pub(super) fn open<H: SessionHost>(
        self: &Arc<Self>,
        node: &H,
        encoding: Encoding,
    ) -> (Arc<Live>, mpsc::Receiver<Bytes>) {
        let (out, out_rx) = mpsc::channel(self.limits.max_outbound);
        let live = {
            let mut sessions = self.live.lock();
            let id = new_session_id(&sessions);
            let now = Instant::now().into_std();
            let machine = SessionMachine::new(id, node.id().clone(), self.limits, now);
            let live = Arc::new(Live {
                id,
                encoding,
                machine: Mutex::new(machine),
                out,
                ending: Mutex::new(None),
                ended: CancellationToken::new(),
                wake: Notify::new(),
            });
            sessions.insert(id, live.clone());
            live
        };
        if self.stop.is_cancelled() {
            let reason = format!(
                "node {} is shutting down; connect to another node",
                node.id()
            );
            self.apply(node, &live, Event::Shutdown { reason });
        }
        (live, out_rx)
    }

    /// Reads the client's frames into the machine until the session ends, then forgets it.
    pub(super) async fn serve<H: SessionHost, S>(
        self: &Arc<Self>,
        node: &H,
        live: &Arc<Live>,
        mut frames: S,
    ) where
        S: Stream<Item = Result<ClientFrame, ReadError>> + Unpin,
    {
        loop {
            let deadline = live.machine.lock().next_deadline().map(Instant::from_std);
            let event = tokio::select! {
                biased;
                () = live.ended.cancelled() => break,
                () = live.wake.notified() => continue,
                () = sleep_until(deadline) => Event::Tick,
                frame = frames.next() => match frame {
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
            self.apply(node, live, event);
        }
        self.live.lock().remove(&live.id);
    }

    fn session(&self, id: SessionId) -> Option<Arc<Live>> {
        self.live.lock().get(&id).cloned()
    }

    /// Feeds an event to a session by id (from the mesh, or a bind's answer).
    pub(super) fn feed<H: SessionHost>(self: &Arc<Self>, node: &H, id: SessionId, event: Event) {
        if let Some(live) = self.session(id) {
            self.apply(node, &live, event);
        }
    }

    /// Feeds an event to a session and carries out what it asks, under the session's lock. On a
    /// node that may have lost its owner lease, whatever the event, the session ends instead
    /// and sends nothing more: the client counts what it sent undelivered and goes elsewhere.
    pub(super) fn apply<H: SessionHost>(self: &Arc<Self>, node: &H, live: &Live, event: Event) {
        let event = if node.fenced() {
            Event::LeaseLost {
                reason: format!(
                    "node {} may have lost its owner lease; connect to another node",
                    node.id()
                ),
            }
        } else {
            event
        };
        let mut machine = live.machine.lock();
        let now = Instant::now().into_std();
        let mut events = VecDeque::from([event]);
        // Once an input could not be made its Actor's message, no later one may overtake it.
        let mut refused = false;
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
                    } => {
                        if refused {
                            continue;
                        }
                        match message(node, live.encoding, machine.type_of(&actor), payload) {
                            Ok(payload) => node.send_encoded(
                                UnitId::Actor(actor),
                                Payload::Encoded(payload),
                                None,
                                Some(&owner),
                            ),
                            Err(why) => {
                                refused = true;
                                events.push_back(Event::BadFrame {
                                    code: CloseCode::BadInput,
                                    reason: format!("an input for {actor} was refused: {why}"),
                                });
                            }
                        }
                    }
                    Action::Fence {
                        actor,
                        owner,
                        epoch,
                        upto,
                    } => self.fence(node, live.id, actor, &owner, (epoch, upto)),
                    Action::RequestBind { actor, epoch } => {
                        self.request_bind(node, live.id, live.encoding, actor, epoch);
                    }
                    Action::RequestRebind { actor, epoch, gone } => {
                        let rebind = self
                            .clone()
                            .rebind(node.clone(), live.id, actor, epoch, gone);
                        tokio::spawn(rebind);
                    }
                    Action::RequestUnbind { actor, epoch, via } => {
                        let op = SessionOp::Unbind(SessionRef {
                            gateway: node.id().clone(),
                            session: live.id,
                            epoch,
                            encoding: live.encoding,
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
        let bytes = match self.encode(live.encoding, frame) {
            Ok(bytes) => bytes,
            Err(reason) => {
                return Some(Event::BadFrame {
                    code: CloseCode::Internal,
                    reason,
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

    /// A frame as its client reads it: a postcard frame, or the UTF-8 text of a JSON message.
    pub(super) fn encode(&self, encoding: Encoding, frame: &ServerFrame) -> Result<Bytes, String> {
        let too_large = |max| {
            format!(
                "the game server sent a push over the {max}-byte frame limit; it must push \
                 smaller messages"
            )
        };
        match encoding {
            Encoding::Postcard => self.encoder.encode_frame(frame).map_err(|e| match e {
                EncodeError::TooLarge { max } => too_large(max),
                other => format!("a frame for the client could not be encoded: {other}"),
            }),
            Encoding::Json => {
                let text = super::json::server_frame(frame).map_err(|e| e.to_string())?;
                if text.len() > self.limits.max_frame {
                    return Err(too_large(self.limits.max_frame));
                }
                Ok(Bytes::from(text))
            }
        }
    }

    /// Sends a bind to the Actor, as a request so that a missing Actor is answered too.
    fn request_bind<H: SessionHost>(
        self: &Arc<Self>,
        node: &H,
        session: SessionId,
        encoding: Encoding,
        actor: ActorId,
        epoch: u32,
    ) {
        let waiting = node.replies().open();
        if let Some(waiting) = &waiting {
            let reply = ReplyTo {
                node: node.id().clone(),
                request: waiting.request,
            };
            let op = SessionOp::Bind(SessionRef {
                gateway: node.id().clone(),
                session,
                epoch,
                encoding,
            });
            node.send_encoded(
                UnitId::Actor(actor.clone()),
                Payload::Session(op),
                Some(reply),
                None,
            );
        }
        let (sessions, node) = (self.clone(), node.clone());
        // The verdict is fed from a task: this runs under the session's lock.
        tokio::spawn(async move {
            // Success arrives as a `Bound` frame ahead of this reply; only failures matter here.
            let failed = match waiting {
                None => format!(
                    "{} requests are already waiting for replies on the gateway",
                    node.replies().limit()
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
            let owner = node.id().clone();
            let event = Event::Bound {
                actor,
                epoch,
                owner,
                verdict: Err(failed),
            };
            sessions.feed(&node, session, event);
        });
    }

    /// Sends a fence to a bound Actor through `owner`, on the path of the inputs before it, and
    /// feeds the session whether it ran there: the lane answers a fence once everything queued
    /// before it has run, so the inputs it follows did too.
    fn fence<H: SessionHost>(
        self: &Arc<Self>,
        node: &H,
        session: SessionId,
        actor: ActorId,
        owner: &NodeId,
        (epoch, upto): (u32, u64),
    ) {
        let waiting = node.replies().open();
        if let Some(waiting) = &waiting {
            let reply = ReplyTo {
                node: node.id().clone(),
                request: waiting.request,
            };
            node.send_encoded(
                UnitId::Actor(actor.clone()),
                Payload::Session(SessionOp::Fence),
                Some(reply),
                Some(owner),
            );
        }
        let (sessions, node) = (self.clone(), node.clone());
        // The answer is fed from a task: this runs under the session's lock.
        tokio::spawn(async move {
            let reached = match waiting {
                None => false,
                Some(mut waiting) => matches!(
                    tokio::time::timeout(FENCE_TIMEOUT, &mut waiting.answer).await,
                    Ok(Ok(Ok(_)))
                ),
            };
            let event = Event::Fenced {
                actor,
                epoch,
                upto,
                reached,
            };
            sessions.feed(&node, session, event);
        });
    }

    /// Binds an Actor again after the node that ran it left the cluster: once its record names
    /// another node (recovery rebuilt it there) or none (it was not rebuilt, and the bind says
    /// so). Recovery writes the record, so it is read again every membership refresh, for at most
    /// `REBIND_WAIT`; then the bind goes anyway, and its answer tells the client.
    async fn rebind<H: SessionHost>(
        self: Arc<Self>,
        node: H,
        session: SessionId,
        actor: ActorId,
        epoch: u32,
        gone: NodeId,
    ) {
        let id = UnitId::Actor(actor.clone());
        let until = Instant::now() + REBIND_WAIT;
        let mut every = tokio::time::interval(node.refresh().max(Duration::from_millis(10)));
        while Instant::now() < until && !node.stopping() {
            every.tick().await;
            match node.owner_of(&id).await {
                Ok(owner) if rebind_may_go(owner.as_ref(), &gone) => break,
                Ok(_) => {}
                Err(error) => debug!(%actor, %error, "record not read; reading again"),
            }
        }
        // Through the machine: the session may have ended, or bound the Actor again, meanwhile.
        self.feed(&node, session, Event::RebindDue { actor, epoch });
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

fn new_session_id(sessions: &HashMap<SessionId, Arc<Live>>) -> SessionId {
    loop {
        let id = SessionId(rand::random());
        if !sessions.contains_key(&id) {
            return id;
        }
    }
}

/// A postcard input is checked against its Actor's message type when this node knows the
/// factory, before the machine sees it. (A JSON input is checked as it is made that type.)
fn checked<H: SessionHost>(node: &H, live: &Live, frame: ClientFrame) -> Event {
    if live.encoding == Encoding::Postcard
        && let ClientFrame::Input { actor, payload } = &frame
    {
        let type_name = live.machine.lock().type_of(actor).map(str::to_owned);
        if let Some(factory) = type_name.and_then(|t| node.factory(&t))
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

/// An input as its Actor takes it: postcard already, or JSON made the Actor's message type by
/// its factory on this node.
fn message<H: SessionHost>(
    node: &H,
    encoding: Encoding,
    type_name: Option<&str>,
    payload: Bytes,
) -> Result<Bytes, String> {
    match encoding {
        Encoding::Postcard => Ok(payload),
        Encoding::Json => {
            let type_name = type_name.ok_or("its Actor's type is not known yet")?;
            let factory = node.factory(type_name).ok_or_else(|| {
                format!("this gateway has no factory {type_name:?} to read JSON inputs with")
            })?;
            factory
                .message_from_json(&payload)
                .map(Bytes::from)
                .map_err(|why| {
                    format!(
                        "it is not the JSON form of a {}: {why}",
                        factory.info().msg_type_name
                    )
                })
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
