//! The async shell of the mesh: the QUIC endpoint, the accept loop, one task per peer,
//! and one reader per connection.
//!
//! Each peer task owns everything about one peer: its dial address, its current
//! connection, its outbound queue and its backoff. Connections a peer dials to us are
//! checked by the accept loop (TLS, then the hello) and handed to that peer's task,
//! which applies [`judge_inbound`]; so only one task ever decides about one pair, and
//! the decision itself is a pure function. Frames leave through the peer task, which
//! writes them in order on the connection's main outbound stream; bulk frames leave through
//! a writer of their own per connection, on a second stream below the main one.

use foldhash::HashMap;
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use parking_lot::{Mutex, RwLock};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, ConnectionError, Endpoint, RecvStream, SendStream};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::codec::{Decoder, FramedRead};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::codec::{DecodeError, FrameCodec, coalesce};
use super::handshake::{
    Backoff, CloseCode, Forgotten, Hello, Holding, Refusal, Verdict, Wire, check_hello,
    check_welcome, judge_inbound,
};
use super::outgoing::{Outgoing, OutgoingTx, Refused, Run};
use super::reader::FrameReader;
use super::socket::bind_endpoint;
use super::tls;
use super::{
    Direction, Inbound, LossReason, Lost, MeshConfig, MeshError, MeshFrame, PeerInfo, PeerState,
    Serve,
};
use crate::ids::NodeId;
use ferry_core::delivery::{Inbox, Outbox, Unacked};

/// [`PeerSync::instance`] before any link came up (incarnations are random, so one may be 0 in
/// principle; such a peer is only not refused once taken for dead).
const NEVER_LINKED: u64 = 0;
/// Frames a reader delivers under one hold of the inbox, at most, before it acknowledges them.
const READ_BURST: usize = 256;
/// Longest close reason sent to a peer; QUIC must fit it in one packet.
const MAX_REASON: usize = 200;
/// How long a receiver gathers deliveries before it acknowledges them in one frame.
const ACK_DELAY: Duration = Duration::from_millis(2);
/// The bulk stream's QUIC priority: below the main stream's 0, so whenever both have data to
/// send, the main stream's goes first.
const BULK_PRIORITY: i32 = -1;

type Reader<F> = FramedRead<RecvStream, FrameCodec<Wire<F>>>;
type DialFuture<F> = Pin<Box<dyn Future<Output = Result<Dialled<F>, DialError>> + Send>>;

/// The settings the tasks need after `bind`.
#[derive(Debug, Clone)]
struct Settings {
    max_frame: usize,
    handshake_timeout: Duration,
    reconnect_min: Duration,
    reconnect_max: Duration,
    send_queue: usize,
    unacked_bytes: usize,
}

/// Where readers hand the frames they receive.
pub(crate) enum Sink<F> {
    /// To a bounded queue, read by the receiver [`Mesh::bind`](super::Mesh::bind) returned.
    Queue(mpsc::Sender<Inbound<F>>),
    /// To a function, called on the reader's own task (see [`Mesh::serve`](super::Mesh::serve)).
    Direct(Arc<Serve<F>>),
}

impl<F> Clone for Sink<F> {
    fn clone(&self) -> Self {
        match self {
            Sink::Queue(queue) => Sink::Queue(queue.clone()),
            Sink::Direct(serve) => Sink::Direct(serve.clone()),
        }
    }
}

/// State shared by the [`Mesh`](super::Mesh) handles and every mesh task.
pub(crate) struct Shared<F> {
    local: NodeId,
    local_addr: SocketAddr,
    /// This incarnation, as sent in the hello; acks name it.
    instance: u64,
    /// Frames accepted by `send` that no peer acknowledged before it was dropped or the mesh closed.
    lost: AtomicU64,
    /// Where lost frames are handed back, once someone asked ([`Shared::losses`]).
    losses: Mutex<Option<mpsc::UnboundedSender<Lost<F>>>>,
    settings: Settings,
    client_config: quinn::ClientConfig,
    encoder: FrameCodec<Wire<F>>,
    hello: Bytes,
    welcome: Bytes,
    pub(crate) cancel: CancellationToken,
    endpoint: Mutex<Option<Endpoint>>,
    /// Where frames received go: `None` until [`Shared::serve`] when nothing queues them, and
    /// again once the mesh closed.
    sink: watch::Sender<Option<Sink<F>>>,
    /// Held while a reader hands frames to a [`Sink::Direct`], so that it serves one frame at a
    /// time, as a single task reading a queue would.
    serving: tokio::sync::Mutex<()>,
    peers: RwLock<Peers<F>>,
    /// Peers' incarnations taken for dead, never linked again.
    forgotten: Mutex<Forgotten>,
    /// This node may have lost its owner lease: what it held for a peer is not sent again.
    fenced: AtomicBool,
    tasks: Mutex<JoinSet<()>>,
    runtime: tokio::runtime::Handle,
    socket_released: Mutex<Option<oneshot::Receiver<()>>>,
}

struct Peers<F> {
    map: HashMap<NodeId, PeerHandle<F>>,
    closed: bool,
}

struct PeerHandle<F> {
    ctrl: mpsc::UnboundedSender<PeerCtrl<F>>,
    /// The peer's queue of encoded frames, taken by its task all at once (dropping the last
    /// handle closes it, and the task ends once it has written what was queued).
    out: Arc<OutgoingTx>,
    /// The peer's queue of bulk frames, taken by the writer of the connection up.
    bulk: Arc<OutgoingTx>,
    status: watch::Receiver<PeerStatus>,
    sync: Arc<PeerSync>,
}

impl<F> Clone for PeerHandle<F> {
    fn clone(&self) -> Self {
        Self {
            ctrl: self.ctrl.clone(),
            out: self.out.clone(),
            bulk: self.bulk.clone(),
            status: self.status.clone(),
            sync: self.sync.clone(),
        }
    }
}

/// What a peer task publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerStatus {
    pub(crate) state: PeerState,
    addr: Option<SocketAddr>,
    direction: Option<Direction>,
    pub(crate) links: u64,
}

enum PeerCtrl<F> {
    /// Dial this address (now, or after a loss).
    Dial(SocketAddr),
    /// This node was fenced: end the link up, so that what the connection holds unacknowledged
    /// is not carried over a cut that heals, and the next link starts without it.
    Fenced,
    /// A connection the peer dialled to us, past TLS and the hello.
    Offer(Offer<F>),
}

struct Offer<F> {
    conn: Connection,
    reader: Reader<F>,
    hello: Hello,
}

/// A connection that finished its handshake in either direction.
struct Link {
    conn: Connection,
    send: SendStream,
    dialled_by_us: bool,
    instance: u64,
}

struct Dialled<F> {
    conn: Connection,
    send: SendStream,
    reader: Reader<F>,
    welcome: Hello,
}

#[derive(Debug)]
struct DialError {
    /// The close code the acceptor gave, if it refused us.
    code: Option<CloseCode>,
    /// The TLS handshake failed: a certificate or CA problem, always worth a warning.
    tls: bool,
    detail: String,
}

impl DialError {
    fn other(detail: impl Into<String>) -> Self {
        Self {
            code: None,
            tls: false,
            detail: detail.into(),
        }
    }

    fn connection(e: &ConnectionError) -> Self {
        Self {
            code: CloseCode::of(e),
            tls: match e {
                ConnectionError::TransportError(t) => is_crypto(t.code),
                ConnectionError::ConnectionClosed(c) => is_crypto(c.error_code),
                _ => false,
            },
            detail: e.to_string(),
        }
    }
}

fn is_crypto(code: quinn::TransportErrorCode) -> bool {
    // QUIC carries TLS alerts as transport codes 0x100..=0x1ff.
    (0x100..=0x1ff).contains(&u64::from(code))
}

enum Mode<F> {
    /// No address to dial: wait for the peer to connect.
    Waiting,
    /// Waiting before the next dial.
    Backoff(Pin<Box<tokio::time::Sleep>>),
    Dialling(DialFuture<F>),
    Ready(Link),
    /// The peer took this incarnation for dead: it is never dialled or accepted again.
    Removed,
}

enum Event<F> {
    Cancel,
    Ctrl(Option<PeerCtrl<F>>),
    Lost(ConnectionError),
    /// Frames were taken from the queue; `None`: it is closed and empty.
    Out(Option<Run>),
    Dialled(Result<Dialled<F>, DialError>),
    Wake,
    ReaderDone,
    AckOwed,
    AckDue,
    Acked,
}

fn close(conn: &Connection, code: CloseCode, reason: &str) {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    conn.close(code.to_varint(), &reason.as_bytes()[..end]);
}

/// Closes `conn` for `refusal` and says so in the log.
fn refuse(conn: &Connection, peer: Option<&NodeId>, refusal: &Refusal) {
    let remote = conn.remote_address();
    match peer {
        Some(peer) => warn!(%peer, %remote, code = ?refusal.code, reason = %refusal.reason,
            "closing mesh connection"),
        None => warn!(%remote, code = ?refusal.code, reason = %refusal.reason,
            "refused a mesh peer"),
    }
    close(conn, refusal.code, &refusal.reason);
}

/// What to close a connection with after a decode error; `None` when the stream or
/// connection itself failed, which says nothing about the peer's input.
fn refusal_for(e: &DecodeError) -> Option<Refusal> {
    let code = match e {
        DecodeError::TooLarge { .. } => CloseCode::TooLarge,
        DecodeError::Malformed { .. } | DecodeError::TrailingBytes { .. } => CloseCode::Malformed,
        DecodeError::Truncated { .. } => CloseCode::StreamEnded,
        DecodeError::Io(_) => return None,
    };
    Some(Refusal::new(code, e.to_string()))
}

/// A QUIC idle timeout, or why the duration cannot be one (for the config error of the caller).
pub(crate) fn idle_timeout(d: std::time::Duration) -> Result<quinn::IdleTimeout, String> {
    quinn::IdleTimeout::try_from(d)
        .map_err(|_| format!("idle_timeout {d:?} is too long for QUIC; use at most a few minutes"))
}

fn transport(config: &MeshConfig) -> Result<quinn::TransportConfig, MeshError> {
    let idle = idle_timeout(config.idle_timeout).map_err(MeshError::Config)?;
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(config.keep_alive))
        .max_idle_timeout(Some(idle))
        .initial_rtt(config.initial_rtt)
        .max_concurrent_bidi_streams(quinn::VarInt::from_u32(0))
        // The main frame stream and the bulk stream each way; a peer cannot open more.
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(2));
    Ok(transport)
}

impl<F: MeshFrame> Shared<F> {
    /// Binds the endpoint and starts the accept loop. With `queued`, frames received go to the
    /// returned receiver; without, readers wait for [`Shared::serve`].
    pub(crate) async fn bind(
        config: MeshConfig,
        queued: bool,
    ) -> Result<(Arc<Self>, Option<mpsc::Receiver<Inbound<F>>>), MeshError> {
        config.validate()?;
        let transport = Arc::new(transport(&config)?);
        let server_crypto =
            QuicServerConfig::try_from(config.tls.server_config()?).map_err(tls::TlsError::from)?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
        server.transport_config(transport.clone());
        let client_crypto =
            QuicClientConfig::try_from(config.tls.client_config()?).map_err(tls::TlsError::from)?;
        let mut client_config = quinn::ClientConfig::new(Arc::new(client_crypto));
        client_config.transport_config(transport);

        let bind_err = |source| MeshError::Bind {
            addr: config.listen,
            source,
        };
        let (endpoint, local_addr, socket_released) =
            bind_endpoint(&*config.sockets, config.listen, server)
                .await
                .map_err(bind_err)?;

        let instance = rand::random::<u64>();
        let encoder = FrameCodec::<Wire<F>>::new(config.max_frame);
        let me = Hello::new(config.node.clone(), instance);
        let hello = encoder.encode_frame(&Wire::Hello(me.clone()))?;
        let welcome = encoder.encode_frame(&Wire::Welcome(me))?;
        let (sink, inbound) = if queued {
            let (tx, rx) = mpsc::channel(config.inbound_queue);
            (Some(Sink::Queue(tx)), Some(rx))
        } else {
            (None, None)
        };
        let shared = Arc::new(Self {
            local: config.node,
            local_addr,
            instance,
            lost: AtomicU64::new(0),
            losses: Mutex::new(None),
            settings: Settings {
                max_frame: config.max_frame,
                handshake_timeout: config.handshake_timeout,
                reconnect_min: config.reconnect_min,
                reconnect_max: config.reconnect_max,
                send_queue: config.send_queue,
                unacked_bytes: config.unacked_bytes,
            },
            client_config,
            encoder,
            hello,
            welcome,
            cancel: CancellationToken::new(),
            endpoint: Mutex::new(Some(endpoint.clone())),
            sink: watch::Sender::new(sink),
            serving: tokio::sync::Mutex::new(()),
            peers: RwLock::new(Peers {
                map: HashMap::default(),
                closed: false,
            }),
            forgotten: Mutex::new(Forgotten::default()),
            fenced: AtomicBool::new(false),
            tasks: Mutex::new(JoinSet::new()),
            runtime: tokio::runtime::Handle::current(),
            socket_released: Mutex::new(Some(socket_released)),
        });
        shared
            .tasks
            .lock()
            .spawn_on(accept_loop(shared.clone(), endpoint), &shared.runtime);
        info!(node = %shared.local, addr = %local_addr, "mesh listening");
        Ok((shared, inbound))
    }

    /// From now on, frames received are handed to `serve` by the task that read them, one at a
    /// time; readers that waited for it go on. Only for a mesh bound without a queue; `false`
    /// when frames already had somewhere to go, or the mesh is closed.
    pub(crate) fn serve(&self, serve: Arc<Serve<F>>) -> bool {
        self.sink.send_if_modified(|sink| {
            if sink.is_some() || self.cancel.is_cancelled() {
                return false;
            }
            *sink = Some(Sink::Direct(serve));
            true
        })
    }

    pub(crate) fn local(&self) -> &NodeId {
        &self.local
    }

    /// Counts, logs and meters frames `send` accepted that `peer` will never acknowledge, and
    /// hands them back, decoded, to whoever asked for [`Shared::losses`].
    fn report_lost(&self, peer: &NodeId, lost: Unacked, reason: LossReason) {
        let mut decoder = self.encoder.clone();
        let mut frames = Vec::new();
        for run in lost.runs {
            let mut run = BytesMut::from(run);
            while let Ok(Some(Wire::Frame(frame))) = decoder.decode(&mut run) {
                frames.push(frame);
            }
        }
        frames.drain(..lost.acknowledged.min(frames.len()));
        if frames.is_empty() {
            return;
        }
        let count = frames.len();
        self.lost.fetch_add(count as u64, Ordering::Relaxed);
        metrics::counter!("ferry_mesh_frames_lost_total").increment(count as u64);
        warn!(%peer, frames = count, %reason,
            "frames accepted for a peer were never acknowledged; they may not have run");
        // Frames a fenced node drops may have run (their acknowledgement is what was lost), and
        // its units run no more: no one is told they did not.
        if reason == LossReason::Fenced {
            return;
        }
        let Some(losses) = self.losses.lock().clone() else {
            return;
        };
        // A receiver that went away has stopped caring; the count and the log stay.
        let _ = losses.send(Lost {
            peer: peer.clone(),
            frames,
            reason,
        });
    }

    /// Lost frames from now on, each batch with its peer and why; a new call replaces the last
    /// receiver.
    pub(crate) fn losses(&self) -> mpsc::UnboundedReceiver<Lost<F>> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.losses.lock() = Some(tx);
        rx
    }

    pub(crate) fn frames_lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The handle of `node`'s task, starting the task if there is none; with `dial`,
    /// the task (re)dials that address.
    fn peer(
        self: &Arc<Self>,
        node: &NodeId,
        dial: Option<SocketAddr>,
    ) -> Result<PeerHandle<F>, MeshError> {
        let mut peers = self.peers.write();
        if peers.closed {
            return Err(MeshError::Closed);
        }
        if let Some(handle) = peers.map.get(node) {
            if let Some(addr) = dial {
                // A send error means the task is stopping with the mesh.
                let _ = handle.ctrl.send(PeerCtrl::Dial(addr));
            }
            return Ok(handle.clone());
        }
        let endpoint = self.endpoint.lock().clone().ok_or(MeshError::Closed)?;
        let sink = self.sink.subscribe();
        let (ctrl_tx, ctrl_rx) = mpsc::unbounded_channel();
        let out = Arc::new(Outgoing::default());
        let bulk = Arc::new(Outgoing::default());
        let (status_tx, status_rx) = watch::channel(PeerStatus {
            state: if dial.is_some() {
                PeerState::Connecting
            } else {
                PeerState::Waiting
            },
            addr: dial,
            direction: None,
            links: 0,
        });
        let sync = Arc::new(PeerSync::default());
        let task = PeerTask {
            shared: self.clone(),
            endpoint,
            sink,
            node: node.clone(),
            addr: dial,
            ctrl: ctrl_rx,
            out: out.clone(),
            bulk: bulk.clone(),
            bulk_writer: JoinSet::new(),
            status: status_tx,
            backoff: Backoff::new(self.settings.reconnect_min, self.settings.reconnect_max),
            readers: JoinSet::new(),
            batch: VecDeque::new(),
            pieces: Vec::new(),
            links: 0,
            outbox: Outbox::default(),
            sync: sync.clone(),
            ack_due: None,
        };
        self.tasks.lock().spawn_on(task.run(), &self.runtime);
        let handle = PeerHandle {
            ctrl: ctrl_tx,
            out: Arc::new(OutgoingTx(out)),
            bulk: Arc::new(OutgoingTx(bulk)),
            status: status_rx,
            sync,
        };
        peers.map.insert(node.clone(), handle.clone());
        Ok(handle)
    }

    pub(crate) fn add_peer(
        self: &Arc<Self>,
        node: NodeId,
        addr: SocketAddr,
    ) -> Result<(), MeshError> {
        if node == self.local {
            return Err(MeshError::SelfPeer(node));
        }
        self.peer(&node, Some(addr)).map(|_| ())
    }

    /// Forgets a peer: its task ends, closing its connection, and what was queued or
    /// unacknowledged for it is dropped and reported lost.
    pub(crate) fn remove_peer(&self, node: &NodeId) -> bool {
        self.peers.write().map.remove(node).is_some()
    }

    /// See [`Mesh::fence`](super::Mesh::fence): every peer's task closes the link it has up.
    pub(crate) fn fence(&self) {
        self.fenced.store(true, Ordering::Release);
        for handle in self.peers.read().map.values() {
            let _ = handle.ctrl.send(PeerCtrl::Fenced);
        }
    }

    /// Forgets a peer taken for dead: as [`Shared::remove_peer`], and the incarnation of its
    /// last link is refused from now on, whichever side dials, if that link is down. One that
    /// is up is a process the cluster hears from: a restart under the id that linked before
    /// membership read its descriptor, say, which must not be shut out.
    pub(crate) fn forget_peer(&self, node: &NodeId) -> bool {
        let Some(handle) = self.peers.write().map.remove(node) else {
            return false;
        };
        let linked = handle.status.borrow().state == PeerState::Ready;
        let instance = handle.sync.instance.load(Ordering::Acquire);
        if !linked && instance != NEVER_LINKED {
            self.forgotten.lock().forget(node.clone(), instance);
        }
        true
    }

    /// Queues `frame` for `to`, on its main stream or, with `bulk`, its bulk stream; a frame that
    /// was not queued comes back with the reason.
    pub(crate) fn send(&self, to: &NodeId, frame: F, bulk: bool) -> Result<(), (F, MeshError)> {
        let peers = self.peers.read();
        if peers.closed {
            return Err((frame, MeshError::Closed));
        }
        let Some(handle) = peers.map.get(to) else {
            return Err((frame, MeshError::UnknownPeer(to.clone())));
        };
        let queue = self.settings.send_queue;
        let out = if bulk { &handle.bulk } else { &handle.out };
        let pushed = out.0.push(queue, |buf| {
            self.encoder.encode_into(&Wire::Frame(&frame), buf)
        });
        match pushed {
            Ok(()) => Ok(()),
            Err(Refused::Full) => Err((
                frame,
                MeshError::Backlogged {
                    node: to.clone(),
                    queued: queue,
                },
            )),
            Err(Refused::Closed) => Err((frame, MeshError::Closed)),
            Err(Refused::Encode(e)) => Err((frame, e.into())),
        }
    }

    /// Whether a peer that is up has frames queued or not yet acknowledged.
    fn awaits_acknowledgement(&self) -> bool {
        self.peers.read().map.values().any(|handle| {
            handle.status.borrow().state == PeerState::Ready
                && (handle.out.0.len() > 0 || handle.sync.unacked.load(Ordering::Relaxed) > 0)
        })
    }

    pub(crate) fn peers(&self) -> Vec<PeerInfo> {
        let peers = self.peers.read();
        let mut out: Vec<PeerInfo> = peers
            .map
            .iter()
            .map(|(node, handle)| {
                let status = handle.status.borrow().clone();
                PeerInfo {
                    node: node.clone(),
                    addr: status.addr,
                    state: status.state,
                    direction: status.direction,
                    links: status.links,
                    queued: handle.out.0.len(),
                    unacked: handle.sync.unacked.load(Ordering::Relaxed),
                }
            })
            .collect();
        out.sort_by(|a, b| a.node.cmp(&b.node));
        out
    }

    /// Every state change of `node`, for tests that wait on states other than Ready.
    #[cfg(test)]
    pub(crate) fn status(
        self: &Arc<Self>,
        node: &NodeId,
    ) -> Result<watch::Receiver<PeerStatus>, MeshError> {
        self.peer(node, None).map(|handle| handle.status)
    }

    pub(crate) async fn wait_ready(self: &Arc<Self>, node: &NodeId) -> Result<(), MeshError> {
        let mut status = self.peer(node, None)?.status;
        status
            .wait_for(|s| s.state == PeerState::Ready)
            .await
            .map(|_| ())
            .map_err(|_| MeshError::Closed)
    }

    pub(crate) async fn close(&self) {
        // What live peers have not acknowledged yet (a clean shutdown's last frames: a move's
        // last answers, membership) gets a moment to be, rather than being cut off and reported
        // lost. A peer that is not up is not waited for.
        let started = tokio::time::Instant::now();
        let flush_until = started + super::CLOSE_FLUSH;
        while self.awaits_acknowledgement() && tokio::time::Instant::now() < flush_until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.cancel.cancel();
        let handles = {
            let mut peers = self.peers.write();
            peers.closed = true;
            std::mem::take(&mut peers.map)
        };
        drop(handles);
        let endpoint = self.endpoint.lock().take();
        if let Some(endpoint) = &endpoint {
            endpoint.close(CloseCode::Shutdown.to_varint(), b"node shutting down");
        }
        loop {
            let mut tasks = std::mem::take(&mut *self.tasks.lock());
            if tasks.is_empty() {
                break;
            }
            while let Some(done) = tasks.join_next().await {
                if let Err(e) = done
                    && e.is_panic()
                {
                    error!(node = %self.local, "a mesh task panicked: {e}");
                }
            }
        }
        // Readers are done; a function serving frames may hold what holds this mesh.
        self.sink.send_replace(None);
        let released = self.socket_released.lock().take();
        let linger = async {
            if let Some(endpoint) = endpoint {
                endpoint.wait_idle().await;
            }
            if let Some(released) = released {
                // Resolves (with an error, the sender being dropped) once the socket is closed.
                let _ = released.await;
            }
        };
        // A connection to a silent peer drains for a few of its retransmit timeouts, which
        // backoff can stretch to seconds; a node's shutdown deadline must not wait for that.
        let linger_for = super::CLOSE_LINGER.saturating_sub(started.elapsed());
        match tokio::time::timeout(linger_for, linger).await {
            Ok(()) => info!(node = %self.local, "mesh closed"),
            Err(_) => info!(node = %self.local, linger = ?super::CLOSE_LINGER,
                "mesh closed; a connection to a silent peer still drains, so the port is \
                 freed a little later"),
        }
    }
}

async fn accept_loop<F: MeshFrame>(shared: Arc<Shared<F>>, endpoint: Endpoint) {
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = shared.cancel.cancelled() => break,
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => {
                    handshakes.spawn(admit(shared.clone(), incoming));
                }
                None => break,
            },
        }
    }
    handshakes.shutdown().await;
}

/// Whether the dialer closed the connection on purpose before its handshake ended, as a node does
/// with a dial it no longer needs (it has a link to us already, or it is stopping): no certificate
/// problem, which either side would report as a crypto error instead.
fn dropped_by_dialer(e: &quinn::ConnectionError) -> bool {
    matches!(e, quinn::ConnectionError::ConnectionClosed(close)
        if close.error_code == quinn::TransportErrorCode::APPLICATION_ERROR)
}

/// Takes one incoming connection through TLS and the hello, then hands it to its peer's task.
async fn admit<F: MeshFrame>(shared: Arc<Shared<F>>, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let conn = tokio::select! {
        biased;
        _ = shared.cancel.cancelled() => return,
        conn = incoming => match conn {
            Ok(conn) => conn,
            Err(e) if dropped_by_dialer(&e) => {
                debug!(%remote, "a mesh peer dropped its dial during the handshake");
                return;
            }
            Err(e) => {
                warn!(%remote, error = %e,
                    "refused a mesh peer: TLS handshake failed (peers need a certificate from this cluster's CA)");
                return;
            }
        },
    };
    let timeout = shared.settings.handshake_timeout;
    let first = tokio::select! {
        biased;
        _ = shared.cancel.cancelled() => return,
        first = tokio::time::timeout(timeout, async {
            let recv = conn.accept_uni().await?;
            let mut reader: Reader<F> =
                FramedRead::new(recv, FrameCodec::new(shared.settings.max_frame));
            let first = reader.next().await;
            Ok::<_, ConnectionError>((reader, first))
        }) => first,
    };
    let (reader, first) = match first {
        Err(_) => {
            let reason = format!("no hello within {timeout:?}");
            return refuse(
                &conn,
                None,
                &Refusal::new(CloseCode::HandshakeTimeout, reason),
            );
        }
        Ok(Err(e)) => {
            debug!(%remote, error = %e, "mesh peer left during the handshake");
            return;
        }
        Ok(Ok(read)) => read,
    };
    let first = match first {
        Some(Ok(first)) => first,
        Some(Err(e)) => {
            if let Some(refusal) = refusal_for(&e) {
                refuse(&conn, None, &refusal);
            } else {
                debug!(%remote, error = %e, "mesh peer left during the handshake");
            }
            return;
        }
        None => {
            let refusal = Refusal::new(CloseCode::StreamEnded, "stream ended before the hello");
            return refuse(&conn, None, &refusal);
        }
    };
    let cert = conn
        .peer_identity()
        .and_then(|id| {
            id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| chain.into_iter().next());
    let hello = match check_hello(&shared.local, first, |node| match &cert {
        Some(cert) => tls::check_cert_names_node(cert, node).map_err(|e| e.to_string()),
        None => Err("the peer presented no certificate".to_owned()),
    }) {
        Ok(hello) => hello,
        Err(refusal) => return refuse(&conn, None, &refusal),
    };
    if let Err(refusal) = shared.forgotten.lock().check(&hello.node, hello.instance) {
        return refuse(&conn, None, &refusal);
    }
    let node = hello.node.clone();
    let offer = Offer {
        conn,
        reader,
        hello,
    };
    let sent = match shared.peer(&node, None) {
        Ok(handle) => handle.ctrl.send(PeerCtrl::Offer(offer)).map_err(|e| e.0),
        Err(_) => Err(PeerCtrl::Offer(offer)),
    };
    if let Err(PeerCtrl::Offer(offer)) = sent {
        close(&offer.conn, CloseCode::Shutdown, "node shutting down");
    }
}

/// Dials `node` at `addr`: TLS (which proves the acceptor is `node`), hello, welcome.
async fn dial<F: MeshFrame>(
    endpoint: Endpoint,
    config: quinn::ClientConfig,
    addr: SocketAddr,
    node: NodeId,
    hello: Bytes,
    max_frame: usize,
) -> Result<Dialled<F>, DialError> {
    let connecting = endpoint
        .connect_with(config, addr, &tls::node_dns_name(&node))
        .map_err(|e| DialError::other(e.to_string()))?;
    let conn = connecting.await.map_err(|e| DialError::connection(&e))?;
    let mut send = conn
        .open_uni()
        .await
        .map_err(|e| DialError::connection(&e))?;
    send.write_all(&hello)
        .await
        .map_err(|e| DialError::other(e.to_string()))?;
    let recv = match conn.accept_uni().await {
        Ok(recv) => recv,
        Err(e) => return Err(DialError::connection(&e)),
    };
    let mut reader: Reader<F> = FramedRead::new(recv, FrameCodec::new(max_frame));
    let first = match reader.next().await {
        Some(Ok(first)) => first,
        Some(Err(e)) => {
            if let Some(refusal) = refusal_for(&e) {
                refuse(&conn, Some(&node), &refusal);
            }
            return Err(match conn.close_reason() {
                Some(reason) => DialError::connection(&reason),
                None => DialError::other(e.to_string()),
            });
        }
        None => {
            let refusal = Refusal::new(CloseCode::StreamEnded, "stream ended before the welcome");
            refuse(&conn, Some(&node), &refusal);
            return Err(DialError::other(refusal.reason));
        }
    };
    match check_welcome(&node, first) {
        Ok(welcome) => Ok(Dialled {
            conn,
            send,
            reader,
            welcome,
        }),
        Err(refusal) => {
            refuse(&conn, Some(&node), &refusal);
            Err(DialError::other(refusal.reason))
        }
    }
}

/// One connection's reader: who is on the other end, and where its frames go.
struct ReadFrames<F> {
    from: NodeId,
    /// The peer's incarnation on this connection.
    instance: u64,
    /// Ours, which the peer's acks name.
    local_instance: u64,
    conn: Connection,
    sink: watch::Receiver<Option<Sink<F>>>,
    shared: Arc<Shared<F>>,
    sync: Arc<PeerSync>,
}

/// Reads one connection's frames into the mesh's sink until it ends or misbehaves,
/// dropping repeats and noting what to acknowledge.
async fn read_frames<F: MeshFrame>(r: ReadFrames<F>, reader: Reader<F>) {
    let ReadFrames {
        from,
        instance,
        local_instance,
        conn,
        mut sink,
        shared,
        sync,
    } = r;
    let cancel = &shared.cancel;
    let mut reader = FrameReader::new(reader);
    // Where frames go, once known.
    let mut to: Option<Sink<F>> = None;
    // The number of the next frame on this stream, once the peer said it.
    let mut numbered: Option<u64> = None;
    // What the last read brought, in order.
    let mut read = Vec::new();
    let refusal = 'reading: loop {
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            outcome = reader.read(&mut read) => outcome,
        };
        match outcome {
            Ok(true) => {}
            Ok(false) => break Refusal::new(CloseCode::StreamEnded, "peer ended its frame stream"),
            Err(e) => match refusal_for(&e) {
                Some(refusal) => break refusal,
                None => break Refusal::new(CloseCode::StreamEnded, e.to_string()),
            },
        }
        let mut wires = read.drain(..).peekable();
        while let Some(wire) = wires.next() {
            let first = match wire {
                Wire::Frame(first) => first,
                Wire::Resume(first) => {
                    numbered = Some(first);
                    continue;
                }
                Wire::Ack {
                    instance: acked,
                    upto,
                } => {
                    // An ack for an earlier incarnation of ours is stale: those frames are gone.
                    if acked == local_instance {
                        sync.peer_acked.fetch_max(upto, Ordering::AcqRel);
                        sync.acked.notify_one();
                    }
                    continue;
                }
                Wire::Hello(_) | Wire::Welcome(_) => {
                    break 'reading Refusal::new(
                        CloseCode::Unexpected,
                        "handshake frame after the handshake",
                    );
                }
            };
            if to.is_none() {
                to = served(&mut sink, cancel).await;
            }
            let Some(to) = &to else { return };
            // A burst: the frames that came together, delivered under one hold of the inbox.
            let mut inbox = sync.inbox.lock().await;
            let _serving = match to {
                Sink::Direct(_) => Some(shared.serving.lock().await),
                Sink::Queue(_) => None,
            };
            let mut frame = first;
            for burst in 1..=READ_BURST {
                let Some(seq) = numbered else {
                    break 'reading Refusal::new(CloseCode::Unexpected, "frame before resume");
                };
                numbered = Some(seq + 1);
                if inbox.admit(instance, seq) && !deliver(to, &from, frame, cancel).await {
                    return;
                }
                if burst == READ_BURST {
                    break;
                }
                match wires.next_if(|wire| matches!(wire, Wire::Frame(_))) {
                    Some(Wire::Frame(next)) => frame = next,
                    _ => break,
                }
            }
            *sync.owed.lock() = inbox.ack();
            drop(inbox);
            sync.ack_owed.notify_one();
        }
    };
    if conn.close_reason().is_none() {
        refuse(&conn, Some(&from), &refusal);
    }
}

/// Where frames go once the mesh is served: until then, frames wait here, and nothing more is
/// read. `None` once the mesh closes.
async fn served<F>(
    sink: &mut watch::Receiver<Option<Sink<F>>>,
    cancel: &CancellationToken,
) -> Option<Sink<F>> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        known = sink.wait_for(Option::is_some) => known.ok().and_then(|sink| sink.clone()),
    }
}

/// Hands one frame from `from` to `to`; `false` once nothing will take frames any more.
async fn deliver<F>(to: &Sink<F>, from: &NodeId, frame: F, cancel: &CancellationToken) -> bool {
    let inbound_frame = Inbound {
        from: from.clone(),
        frame,
    };
    let delivered = match to {
        Sink::Direct(serve) => {
            serve(inbound_frame);
            true
        }
        // Waiting (and watching for the mesh to close) only when the queue is full.
        Sink::Queue(inbound) => match inbound.try_send(inbound_frame) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(inbound_frame)) => {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return false,
                    sent = inbound.send(inbound_frame) => sent.is_ok(),
                }
            }
        },
    };
    if !delivered {
        debug!(peer = %from, "inbound receiver dropped; no longer reading this peer");
    }
    delivered
}

/// Reads a connection's bulk stream, the second one the peer opens on it, until it ends or
/// misbehaves. Its frames are not numbered: each is handed on as it comes, and whatever the
/// connection did not bring is gone.
async fn read_bulk<F: MeshFrame>(
    from: NodeId,
    conn: Connection,
    mut sink: watch::Receiver<Option<Sink<F>>>,
    shared: Arc<Shared<F>>,
) {
    let cancel = &shared.cancel;
    let recv = tokio::select! {
        biased;
        _ = cancel.cancelled() => return,
        recv = conn.accept_uni() => match recv {
            Ok(recv) => recv,
            // The connection ended first; its main reader says why.
            Err(_) => return,
        },
    };
    let mut reader = FrameReader::fresh(recv, FrameCodec::new(shared.settings.max_frame));
    let mut to: Option<Sink<F>> = None;
    let mut read = Vec::new();
    let refusal = 'reading: loop {
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            outcome = reader.read(&mut read) => outcome,
        };
        match outcome {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => match refusal_for(&e) {
                Some(refusal) => break refusal,
                None => return,
            },
        }
        if to.is_none() {
            to = served(&mut sink, cancel).await;
        }
        let Some(to) = &to else { return };
        let _serving = match to {
            Sink::Direct(_) => Some(shared.serving.lock().await),
            Sink::Queue(_) => None,
        };
        for wire in read.drain(..) {
            let Wire::Frame(frame) = wire else {
                break 'reading Refusal::new(
                    CloseCode::Unexpected,
                    "a protocol frame on the bulk stream",
                );
            };
            if !deliver(to, &from, frame, cancel).await {
                return;
            }
        }
    };
    if conn.close_reason().is_none() {
        refuse(&conn, Some(&from), &refusal);
    }
}

/// Writes the peer's bulk frames on a stream of their own on `conn`, below the main stream, until
/// the connection ends; what it took and could not write is dropped, as bulk frames are.
async fn write_bulk(conn: Connection, bulk: Arc<Outgoing>, peer: NodeId) {
    let mut send = match conn.open_uni().await {
        Ok(send) => send,
        Err(e) => {
            debug!(%peer, error = %e, "mesh link lost before its bulk stream opened");
            return;
        }
    };
    if let Err(e) = send.set_priority(BULK_PRIORITY) {
        debug!(%peer, error = %e, "mesh link lost as its bulk stream opened");
        return;
    }
    let mut pieces = Vec::new();
    loop {
        let run = tokio::select! {
            biased;
            _ = conn.closed() => return,
            run = bulk.take_next() => run,
        };
        let Some(run) = run else {
            // The peer was removed or the mesh closed.
            let _ = send.finish();
            return;
        };
        coalesce(run.pieces().map(|piece| piece.bytes), &mut pieces);
        let written = send.write_all_chunks(&mut pieces).await;
        pieces.clear();
        if let Err(e) = written {
            debug!(%peer, error = %e, "mesh link lost while writing bulk frames; they are dropped");
            return;
        }
    }
}

struct PeerTask<F> {
    shared: Arc<Shared<F>>,
    endpoint: Endpoint,
    sink: watch::Receiver<Option<Sink<F>>>,
    node: NodeId,
    addr: Option<SocketAddr>,
    ctrl: mpsc::UnboundedReceiver<PeerCtrl<F>>,
    out: Arc<Outgoing>,
    /// Bulk frames, written by `bulk_writer`.
    bulk: Arc<Outgoing>,
    /// The writer of the bulk stream of the connection up, if one is.
    bulk_writer: JoinSet<()>,
    status: watch::Sender<PeerStatus>,
    backoff: Backoff,
    readers: JoinSet<()>,
    batch: VecDeque<Bytes>,
    /// The batch as written: small frames joined (see [`coalesce`]).
    pieces: Vec<Bytes>,
    links: u64,
    /// What was written to the peer and not yet acknowledged.
    outbox: Outbox,
    sync: Arc<PeerSync>,
    /// When the acknowledgement owed to the peer is written, once one is owed.
    ack_due: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// What this peer's readers tell its task: acknowledgements received and owed.
#[derive(Default)]
struct PeerSync {
    /// What was delivered from the peer. Held across a delivery, so two readers of one peer
    /// (an old connection ending while its replacement starts) never deliver out of order.
    inbox: tokio::sync::Mutex<Inbox>,
    /// The acknowledgement to send: the peer's incarnation and the highest number delivered.
    owed: Mutex<Option<(u64, u64)>>,
    /// Something was delivered (or dropped as a repeat) since the last acknowledgement.
    ack_owed: Notify,
    /// The highest number of ours the peer acknowledged.
    peer_acked: AtomicU64,
    /// `peer_acked` grew.
    acked: Notify,
    /// Frames written and not yet acknowledged, as the task last counted them.
    unacked: AtomicUsize,
    /// The peer's incarnation on the last link that came up ([`NEVER_LINKED`] before one).
    instance: AtomicU64,
}

impl<F: MeshFrame> PeerTask<F> {
    async fn run(mut self) {
        let mut mode = self.dial();
        self.publish(&mode);
        loop {
            let event = self.next_event(&mut mode).await;
            mode = match event {
                Event::Cancel | Event::Ctrl(None) | Event::Out(None) => break,
                Event::Ctrl(Some(PeerCtrl::Dial(addr))) => {
                    self.addr = Some(addr);
                    match mode {
                        Mode::Waiting => self.dial(),
                        other => other,
                    }
                }
                Event::Ctrl(Some(PeerCtrl::Offer(offer))) => self.on_offer(mode, offer).await,
                Event::Ctrl(Some(PeerCtrl::Fenced)) => match mode {
                    Mode::Ready(link) => {
                        close(&link.conn, CloseCode::Shutdown, "owner lease lost");
                        self.retry()
                    }
                    other => other,
                },
                Event::Lost(e) if CloseCode::of(&e) == Some(CloseCode::Removed) => self.removed(&e),
                Event::Lost(e) => {
                    info!(peer = %self.node, reason = %e, "mesh link lost");
                    self.retry()
                }
                Event::Out(Some(run)) => {
                    let ready = matches!(mode, Mode::Ready(_));
                    for piece in run.pieces() {
                        // Kept until acknowledged, and sent again on the next link if this one
                        // ends.
                        self.outbox.push(piece.bytes.clone(), piece.frames);
                        if ready {
                            self.batch.push_back(piece.bytes);
                        }
                    }
                    // Counted as unacknowledged before the queue stops counting them: a closing
                    // mesh waits for them either way.
                    self.publish_unacked();
                    self.out.settled();
                    match mode {
                        Mode::Ready(link) => self.write_batch(link).await,
                        other => other,
                    }
                }
                Event::Dialled(Ok(dialled)) => {
                    let link = Link {
                        conn: dialled.conn,
                        send: dialled.send,
                        dialled_by_us: true,
                        instance: dialled.welcome.instance,
                    };
                    self.install(link, dialled.reader).await
                }
                Event::Dialled(Err(e)) if e.code == Some(CloseCode::Removed) => {
                    self.removed(&e.detail)
                }
                Event::Dialled(Err(e)) => {
                    self.log_dial_failure(&e);
                    self.retry()
                }
                Event::Wake => self.dial(),
                Event::ReaderDone => mode,
                Event::AckOwed => {
                    self.ack_due = Some(Box::pin(tokio::time::sleep(ACK_DELAY)));
                    mode
                }
                Event::AckDue => {
                    self.ack_due = None;
                    match mode {
                        Mode::Ready(link) => self.write_ack(link).await,
                        other => other,
                    }
                }
                Event::Acked => {
                    self.outbox
                        .ack(self.sync.peer_acked.load(Ordering::Acquire));
                    mode
                }
            };
            self.publish(&mode);
        }
        if let Mode::Ready(link) = &mode {
            close(&link.conn, CloseCode::Shutdown, "node shutting down");
        }
        drop(mode);
        self.readers.shutdown().await;
        let mut lost = self.outbox.clear();
        let queued = self.out.close_and_drain().into_iter().flat_map(Run::pieces);
        lost.runs.extend(queued.map(|piece| piece.bytes));
        let reason = if self.shared.cancel.is_cancelled() {
            LossReason::Closed
        } else {
            LossReason::Removed
        };
        self.shared.report_lost(&self.node, lost, reason);
    }

    async fn next_event(&mut self, mode: &mut Mode<F>) -> Event<F> {
        let cancel = &self.shared.cancel;
        let readers = &mut self.readers;
        let ctrl = &mut self.ctrl;
        let has_readers = !readers.is_empty();
        match mode {
            Mode::Waiting | Mode::Removed => tokio::select! {
                biased;
                _ = cancel.cancelled() => Event::Cancel,
                c = ctrl.recv() => Event::Ctrl(c),
                Some(_) = readers.join_next(), if has_readers => Event::ReaderDone,
            },
            Mode::Backoff(sleep) => tokio::select! {
                biased;
                _ = cancel.cancelled() => Event::Cancel,
                c = ctrl.recv() => Event::Ctrl(c),
                () = sleep.as_mut() => Event::Wake,
                Some(_) = readers.join_next(), if has_readers => Event::ReaderDone,
            },
            Mode::Dialling(dial) => tokio::select! {
                biased;
                _ = cancel.cancelled() => Event::Cancel,
                c = ctrl.recv() => Event::Ctrl(c),
                d = dial.as_mut() => Event::Dialled(d),
                Some(_) = readers.join_next(), if has_readers => Event::ReaderDone,
            },
            Mode::Ready(link) => {
                let room = self.outbox.bytes() < self.shared.settings.unacked_bytes;
                let ack_owed = self.ack_due.is_none();
                let ack_due = async {
                    match self.ack_due.as_mut() {
                        Some(due) => due.as_mut().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Event::Cancel,
                    c = ctrl.recv() => Event::Ctrl(c),
                    e = link.conn.closed() => Event::Lost(e),
                    () = self.sync.acked.notified() => Event::Acked,
                    () = ack_due => Event::AckDue,
                    () = self.sync.ack_owed.notified(), if ack_owed => Event::AckOwed,
                    // Past the bound of unacknowledged bytes, frames wait in the queue, which
                    // fills until `send` reports `Backlogged`.
                    taken = self.out.take_next(), if room => Event::Out(taken),
                    Some(_) = readers.join_next(), if has_readers => Event::ReaderDone,
                }
            }
        }
    }

    /// Starts a dial if there is an address, else waits for the peer.
    fn dial(&self) -> Mode<F> {
        let Some(addr) = self.addr else {
            return Mode::Waiting;
        };
        let settings = &self.shared.settings;
        let attempt = dial::<F>(
            self.endpoint.clone(),
            self.shared.client_config.clone(),
            addr,
            self.node.clone(),
            self.shared.hello.clone(),
            settings.max_frame,
        );
        let limit = settings.handshake_timeout;
        Mode::Dialling(Box::pin(async move {
            tokio::time::timeout(limit, attempt)
                .await
                .unwrap_or_else(|_| Err(DialError::other(format!("no welcome within {limit:?}"))))
        }))
    }

    /// The peer refused this incarnation, having taken it for dead: no dial or link with it
    /// again. What is queued for it stays undelivered, and is reported lost when the peer is
    /// removed here or the mesh closes.
    fn removed(&self, reason: &dyn std::fmt::Display) -> Mode<F> {
        error!(peer = %self.node, %reason,
            "the peer took this node for dead: it never links with this process again");
        Mode::Removed
    }

    /// After a failure or a loss: wait, then dial again; or wait for the peer to come back.
    fn retry(&mut self) -> Mode<F> {
        if self.addr.is_none() {
            return Mode::Waiting;
        }
        let delay = self.backoff.next_delay(rand::random::<f64>());
        debug!(peer = %self.node, ?delay, "mesh redial scheduled");
        Mode::Backoff(Box::pin(tokio::time::sleep(delay)))
    }

    fn log_dial_failure(&self, e: &DialError) {
        let peer = &self.node;
        let addr = self.addr;
        if e.code == Some(CloseCode::Version) {
            error!(%peer, ?addr, reason = %e.detail,
                "the peer speaks another version of the mesh protocol; it stays unreachable");
        } else if e.code == Some(CloseCode::Duplicate) {
            debug!(%peer, "peer keeps its own connection to us; waiting for it");
        } else if e.tls {
            warn!(%peer, ?addr, error = %e.detail,
                "mesh dial refused in the TLS handshake (is the peer using this cluster's CA?)");
        } else if self.backoff.failures() == 0 {
            warn!(%peer, ?addr, error = %e.detail, "mesh dial failed; retrying with backoff");
        } else {
            debug!(%peer, ?addr, error = %e.detail, failures = self.backoff.failures(),
                "mesh dial failed again");
        }
    }

    async fn on_offer(&mut self, mode: Mode<F>, offer: Offer<F>) -> Mode<F> {
        let holding = match &mode {
            Mode::Removed => {
                // Its dial is refused as a stopping node's would be: it backs off and dials
                // again, in case a new process takes this address.
                let refusal = Refusal::new(
                    CloseCode::Shutdown,
                    "this process was taken for dead by the peer that dials it, and is stopping",
                );
                refuse(&offer.conn, Some(&self.node), &refusal);
                return mode;
            }
            Mode::Waiting | Mode::Backoff(_) => Holding::Nothing,
            Mode::Dialling(_) => Holding::Dialling,
            Mode::Ready(link) => Holding::Link {
                dialled_by_us: link.dialled_by_us,
                instance: link.instance,
            },
        };
        match judge_inbound(
            &self.shared.local,
            &self.node,
            holding,
            offer.hello.instance,
        ) {
            Verdict::Refuse => {
                debug!(peer = %self.node, "keeping our connection; refusing the peer's duplicate");
                close(
                    &offer.conn,
                    CloseCode::Duplicate,
                    "the connection dialled by the lower node id is kept",
                );
                mode
            }
            Verdict::Accept => {
                if let Mode::Ready(old) = &mode {
                    close(
                        &old.conn,
                        CloseCode::Replaced,
                        "replaced by a newer connection from the same peer",
                    );
                }
                // Drops our own dial, if one was running.
                drop(mode);
                match self.open_welcome(&offer.conn).await {
                    Ok(send) => {
                        let link = Link {
                            conn: offer.conn,
                            send,
                            dialled_by_us: false,
                            instance: offer.hello.instance,
                        };
                        self.install(link, offer.reader).await
                    }
                    Err(reason) => {
                        debug!(peer = %self.node, %reason, "peer left before our welcome");
                        self.retry()
                    }
                }
            }
        }
    }

    async fn open_welcome(&self, conn: &Connection) -> Result<SendStream, String> {
        let welcome = self.shared.welcome.clone();
        let limit = self.shared.settings.handshake_timeout;
        let open = async {
            let mut send = conn.open_uni().await.map_err(|e| e.to_string())?;
            send.write_all(&welcome).await.map_err(|e| e.to_string())?;
            Ok(send)
        };
        tokio::select! {
            biased;
            _ = self.shared.cancel.cancelled() => Err("node shutting down".to_owned()),
            r = tokio::time::timeout(limit, open) => match r {
                Ok(r) => r,
                Err(_) => {
                    close(conn, CloseCode::HandshakeTimeout, "welcome not accepted in time");
                    Err(format!("welcome not accepted within {limit:?}"))
                }
            },
        }
    }

    /// Starts reading a new connection and sends on it, first, every frame not yet
    /// acknowledged, from the oldest.
    async fn install(&mut self, link: Link, reader: Reader<F>) -> Mode<F> {
        // Checked here, whichever side dialled, so that an offer or a dial already on its way
        // when the peer was forgotten does not link either.
        let forgotten = self
            .shared
            .forgotten
            .lock()
            .check(&self.node, link.instance);
        if let Err(refusal) = forgotten {
            refuse(&link.conn, Some(&self.node), &refusal);
            return self.retry();
        }
        self.backoff.reset();
        self.links += 1;
        self.sync.instance.store(link.instance, Ordering::Release);
        let lost = self.outbox.connected(link.instance);
        self.shared
            .report_lost(&self.node, lost, LossReason::Restarted);
        if self.shared.fenced.load(Ordering::Acquire) {
            let mut held = self.outbox.clear();
            let queued = self.out.take_queued().into_iter().flat_map(Run::pieces);
            held.runs.extend(queued.map(|piece| piece.bytes));
            self.out.settled();
            self.publish_unacked();
            self.shared
                .report_lost(&self.node, held, LossReason::Fenced);
            // Bulk frames (pre-copy) are best effort: dropped, not counted.
            drop(self.bulk.take_queued());
        }
        info!(peer = %self.node, remote = %link.conn.remote_address(),
            dialled_by_us = link.dialled_by_us, resent = self.outbox.len(), "mesh link ready");
        // One bulk writer at a time: a replaced connection's writer ends before the next starts.
        self.bulk_writer.shutdown().await;
        self.bulk_writer.spawn(write_bulk(
            link.conn.clone(),
            self.bulk.clone(),
            self.node.clone(),
        ));
        self.readers.spawn(read_bulk(
            self.node.clone(),
            link.conn.clone(),
            self.sink.clone(),
            self.shared.clone(),
        ));
        self.readers.spawn(read_frames(
            ReadFrames {
                from: self.node.clone(),
                instance: link.instance,
                local_instance: self.shared.instance,
                conn: link.conn.clone(),
                sink: self.sink.clone(),
                shared: self.shared.clone(),
                sync: self.sync.clone(),
            },
            reader,
        ));
        match self
            .shared
            .encoder
            .encode_frame(&Wire::Resume(self.outbox.first()))
        {
            Ok(resume) => self.batch.push_back(resume),
            Err(e) => {
                error!(peer = %self.node, error = %e, "could not encode a resume frame");
                close(
                    &link.conn,
                    CloseCode::Malformed,
                    "resume frame not encodable",
                );
                return self.retry();
            }
        }
        self.batch.extend(self.outbox.pending().cloned());
        self.write_batch(link).await
    }

    /// Writes the acknowledgement owed to the peer.
    async fn write_ack(&mut self, link: Link) -> Mode<F> {
        let owed = *self.sync.owed.lock();
        let Some((instance, upto)) = owed else {
            return Mode::Ready(link);
        };
        match self
            .shared
            .encoder
            .encode_frame(&Wire::<F>::Ack { instance, upto })
        {
            Ok(ack) => self.batch.push_back(ack),
            Err(e) => {
                error!(peer = %self.node, error = %e, "could not encode an ack frame");
                return Mode::Ready(link);
            }
        }
        self.write_batch(link).await
    }

    async fn write_batch(&mut self, mut link: Link) -> Mode<F> {
        coalesce(self.batch.drain(..), &mut self.pieces);
        let written = tokio::select! {
            biased;
            _ = self.shared.cancel.cancelled() => {
                self.pieces.clear();
                return Mode::Ready(link);
            }
            r = link.send.write_all_chunks(&mut self.pieces) => r,
        };
        self.pieces.clear();
        match written {
            Ok(()) => Mode::Ready(link),
            Err(e) => {
                info!(peer = %self.node, error = %e, unacknowledged = self.outbox.len(),
                    "mesh link lost while writing; what it did not acknowledge is sent again");
                if link.conn.close_reason().is_none() {
                    close(
                        &link.conn,
                        CloseCode::StreamEnded,
                        "peer stopped reading our frame stream",
                    );
                }
                self.retry()
            }
        }
    }

    fn publish_unacked(&self) {
        self.sync
            .unacked
            .store(self.outbox.len(), Ordering::Relaxed);
    }

    fn publish(&self, mode: &Mode<F>) {
        self.publish_unacked();
        let (state, direction) = match mode {
            Mode::Waiting => (PeerState::Waiting, None),
            Mode::Removed => (PeerState::Removed, None),
            Mode::Backoff(_) => (PeerState::Backoff, None),
            Mode::Dialling(_) => (PeerState::Connecting, None),
            Mode::Ready(link) => (
                PeerState::Ready,
                Some(if link.dialled_by_us {
                    Direction::Dialled
                } else {
                    Direction::Accepted
                }),
            ),
        };
        let addr = match mode {
            Mode::Ready(link) if !link.dialled_by_us => {
                self.addr.or(Some(link.conn.remote_address()))
            }
            _ => self.addr,
        };
        let status = PeerStatus {
            state,
            addr,
            direction,
            links: self.links,
        };
        self.status.send_if_modified(|current| {
            if *current == status {
                false
            } else {
                *current = status;
                true
            }
        });
    }
}
