//! The node-to-node mesh: QUIC with mutual TLS, one connection per pair of nodes, and on
//! it one ordered stream of frames each way, and one bulk stream each way below it.
//!
//! Layout, in the order a frame travels:
//! - [`tls`]: the cluster CA and node certificates; every certificate names its node,
//!   and both ends of a connection prove theirs.
//! - [`codec`]: frames as a 4-byte length and a postcard body, with a hard size limit.
//! - `outgoing`: a peer's queue of outgoing frames, encoded straight into its buffers and
//!   taken by the peer's task as one run.
//! - `handshake`: the protocol rules as plain functions: hello and welcome, which of two
//!   simultaneous connections survives, backoff, close codes.
//! - `link`: the async shell: the endpoint, the accept loop, a task per peer that dials,
//!   writes and replaces its connection, and a reader per connection.
//! - `reader`: a connection's frames after the handshake, read in bursts and decoded together.
//! - `socket`: binds the UDP socket (see [`SocketFactory`]) and tells [`Mesh::close`] when
//!   the port is free again.
//! - numbering, acknowledgement and repeat detection are plain data, in `ferry_core::delivery`.
//!
//! Frames to one peer arrive in the order [`Mesh::send`] queued them, because they all
//! travel on one QUIC stream, and each arrives once: the sender keeps what the peer has
//! not acknowledged and sends it again, first, on the next connection, and the receiver
//! drops numbers it already delivered. Frames queued while no connection is up wait for the
//! next one. Only a peer that restarts, or is removed, or a mesh that closes first loses
//! frames; those are counted ([`Mesh::frames_lost`]), logged, metered and handed back
//! ([`Mesh::losses`]) so the caller can end what waited for them. A node that may have lost its
//! owner lease ([`Mesh::fence`]) drops what it held instead of sending it again: its frames then
//! arrive in order with a gap, and those dropped are counted and logged.
//!
//! Bulk frames ([`Mesh::send_bulk`]: a relocation's pre-copy, megabytes of a running unit's
//! image) travel on a second uni stream per connection and direction, opened by each side for
//! its own sending after the link is installed (the handshake's rules and close codes are the
//! main stream's alone) and written by a writer of its own, at a lower QUIC priority: a large
//! bulk backlog never holds back a main-stream frame sent after it. They arrive in order among
//! themselves, with no order against main-stream frames, and are best effort: not numbered,
//! not kept for resend, and silently gone if their connection ends. The caller must notice a
//! loss by itself (pre-copy does: an unanswered round is lost, and the seal sends the whole
//! image). Which of a node's frames go bulk is decided in one place, `MoveCtx::precopy_to_target`:
//! a round's pieces, its end, and the withdrawal of a pre-copy no offer took (so that it never
//! overtakes the pieces it withdraws); everything else goes on the main stream.

pub mod codec;
mod handshake;
mod link;
mod outgoing;
mod reader;
pub(crate) mod socket;
pub mod tls;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

pub use codec::{DEFAULT_MAX_FRAME, DecodeError, EncodeError, FrameCodec};
pub use handshake::{CloseCode, PROTOCOL_VERSION};
pub(crate) use link::idle_timeout;
pub use socket::{OsSockets, SocketFactory};
pub use tls::{
    ClusterCa, NodeCert, NodeTls, TlsError, https_client_config, node_dns_name, node_file_stem,
    write_pem,
};

use crate::ids::NodeId;

/// The default [`MeshConfig::keep_alive`].
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// The default [`MeshConfig::idle_timeout`]: a dead link is noticed within this.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The default [`MeshConfig::unacked_bytes`].
pub const DEFAULT_UNACKED_BYTES: usize = 64 * 1024 * 1024;

/// The longest [`Mesh::close`] waits for connections to drain and the port to be freed.
pub const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// How long closing a mesh waits, within [`CLOSE_LINGER`], for live peers to acknowledge what was
/// sent them last.
pub(crate) const CLOSE_FLUSH: Duration = Duration::from_millis(250);

/// What the mesh can carry: any serde type that can move between tasks.
pub trait MeshFrame: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> MeshFrame for T {}

/// A frame received from a peer.
#[derive(Debug, Clone, PartialEq)]
pub struct Inbound<F> {
    /// The sender, as proven by its certificate.
    pub from: NodeId,
    /// The frame as decoded, of the type this mesh carries.
    pub frame: F,
}

/// What [`Mesh::serve`] hands each frame received to.
pub type Serve<F> = dyn Fn(Inbound<F>) + Send + Sync;

/// Frames [`Mesh::send`] accepted for a peer that will never acknowledge them, handed back by
/// [`Mesh::losses`].
#[derive(Debug)]
pub struct Lost<F> {
    /// The peer they were for.
    pub peer: NodeId,
    /// The frames, in the order they were sent.
    pub frames: Vec<F>,
    /// Why they are lost.
    pub reason: LossReason,
}

/// Why frames were lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The peer was removed ([`Mesh::remove_peer`]): it left the cluster or was declared dead.
    Removed,
    /// The peer restarted: its new process never saw them.
    Restarted,
    /// This mesh closed first.
    Closed,
    /// This node may have lost its owner lease ([`Mesh::fence`]): what it held is not sent
    /// again. Such frames may have run (their acknowledgement may be what was lost), so they are
    /// counted and logged, not handed back by [`Mesh::losses`].
    Fenced,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Removed => "the peer was removed from the cluster",
            LossReason::Restarted => "the peer restarted before acknowledging them",
            LossReason::Closed => "the mesh closed first",
            LossReason::Fenced => {
                "this node may have lost its owner lease, so they are not sent again"
            }
        })
    }
}

/// How a node joins the mesh. [`MeshConfig::new`] fills in production defaults.
#[derive(Debug, Clone)]
pub struct MeshConfig {
    /// This node's id; must be the one `tls` proves.
    pub node: NodeId,
    /// Where to listen (UDP); port 0 picks a free one, see [`Mesh::local_addr`].
    pub listen: SocketAddr,
    /// The CA to trust and this node's certificate and key.
    pub tls: NodeTls,
    /// The largest frame body accepted or sent, in bytes; every node must agree.
    pub max_frame: usize,
    /// How often an idle connection is pinged, so it stays up and a dead peer is noticed.
    pub keep_alive: Duration,
    /// How long a connection may hear nothing before it is considered dead.
    pub idle_timeout: Duration,
    /// The round-trip guess used until one is measured. It paces handshake
    /// retransmits, and how long [`Mesh::close`] lingers over a dial to a dead peer
    /// (about nine times this); QUIC's default of 333 ms is meant for the open internet.
    pub initial_rtt: Duration,
    /// How long a dial (or the hello of an incoming connection) may take.
    pub handshake_timeout: Duration,
    /// The first wait before redialling a peer; it doubles on each failure.
    pub reconnect_min: Duration,
    /// The longest wait between redials.
    pub reconnect_max: Duration,
    /// Frames queued per peer before [`Mesh::send`] reports [`MeshError::Backlogged`].
    pub send_queue: usize,
    /// Bytes of frames sent to one peer and kept until it acknowledges them (to send again
    /// after a link reset). Past it, frames wait in the queue, and once `send_queue` is full
    /// too, [`Mesh::send`] reports [`MeshError::Backlogged`]. (The peer's task takes what is
    /// queued all at once, so the bound can be passed by up to one queue of frames.)
    pub unacked_bytes: usize,
    /// Frames received but not yet taken from the inbound receiver before readers wait (a mesh
    /// from [`Mesh::bind`]; one from [`Mesh::bind_unserved`] has no queue).
    pub inbound_queue: usize,
    /// Where the endpoint's UDP socket comes from: the operating system unless a network
    /// simulator supplies it.
    pub sockets: Arc<dyn SocketFactory>,
}

impl MeshConfig {
    /// A config with defaults suited to a LAN: 16 MiB frames, 1 s keep-alive, 5 s idle
    /// timeout, 100 ms initial RTT, 5 s handshakes, redials from 100 ms to 5 s.
    pub fn new(node: NodeId, listen: SocketAddr, tls: NodeTls) -> Self {
        Self {
            node,
            listen,
            tls,
            max_frame: DEFAULT_MAX_FRAME,
            keep_alive: DEFAULT_KEEP_ALIVE,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            initial_rtt: Duration::from_millis(100),
            handshake_timeout: Duration::from_secs(5),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            send_queue: 65_536,
            unacked_bytes: DEFAULT_UNACKED_BYTES,
            inbound_queue: 4_096,
            sockets: Arc::new(OsSockets),
        }
    }

    fn validate(&self) -> Result<(), MeshError> {
        let bad = |what: String| Err(MeshError::Config(what));
        if self.tls.node() != &self.node {
            return Err(MeshError::Tls(TlsError::WrongNode {
                node: self.node.clone(),
                detail: format!("the TLS credentials are for node {}", self.tls.node()),
            }));
        }
        if self.max_frame == 0 || self.max_frame > u32::MAX as usize {
            return bad(format!(
                "max_frame {} must be between 1 and {} bytes",
                self.max_frame,
                u32::MAX
            ));
        }
        if self.keep_alive.is_zero() || self.keep_alive >= self.idle_timeout {
            return bad(format!(
                "keep_alive {:?} must be non-zero and shorter than idle_timeout {:?}, \
                 or idle connections are dropped",
                self.keep_alive, self.idle_timeout
            ));
        }
        if self.handshake_timeout.is_zero()
            || self.reconnect_min.is_zero()
            || self.initial_rtt.is_zero()
        {
            return bad(
                "handshake_timeout, reconnect_min and initial_rtt must be non-zero".to_owned(),
            );
        }
        if self.send_queue == 0 || self.inbound_queue == 0 || self.unacked_bytes == 0 {
            return bad(
                "send_queue, inbound_queue and unacked_bytes must be at least 1".to_owned(),
            );
        }
        Ok(())
    }
}

/// Where a peer's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// No address to dial: waiting for the peer to connect to us.
    Waiting,
    /// Dialling: TLS and hello in progress.
    Connecting,
    /// A connection is up; frames flow.
    Ready,
    /// Waiting before the next dial, after a failure or a lost connection.
    Backoff,
    /// The peer took this node for dead and refuses it: this process never links with it
    /// again (its units run elsewhere; a restarted process joins anew).
    Removed,
}

/// Which side dialled the connection in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// This node dialled it.
    Dialled,
    /// The peer dialled it.
    Accepted,
}

/// A snapshot of one peer, for status pages and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's node id, as its certificate proves it.
    pub node: NodeId,
    /// The address dialled, or the peer's address when only it dials.
    pub addr: Option<SocketAddr>,
    /// Where the connection stands.
    pub state: PeerState,
    /// Who dialled the connection in use, when [`PeerState::Ready`].
    pub direction: Option<Direction>,
    /// How many connections with this peer came up so far (reconnects add one each).
    pub links: u64,
    /// Frames queued and not yet written.
    pub queued: usize,
    /// Frames written and not yet acknowledged by the peer (sent again if the link resets).
    pub unacked: usize,
}

/// Why a mesh operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// The listen address could not be bound.
    #[error("could not bind the mesh on {addr}: {source}; pick a free port or stop what holds it")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The certificates could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A config value is out of range.
    #[error("invalid mesh config: {0}")]
    Config(String),
    /// A node tried to add itself as a peer.
    #[error("node {0} cannot be its own peer; check the peer list for this node's id")]
    SelfPeer(NodeId),
    /// The peer was never added and never connected.
    #[error(
        "node {0} is not a peer; call add_peer with its address, or wait_ready for it to connect"
    )]
    UnknownPeer(NodeId),
    /// The peer's queue is full: it is slow, or has been unreachable for a while.
    #[error(
        "{queued} frames are already queued for node {node}; slow down, check that it is \
         reachable, or raise send_queue"
    )]
    Backlogged {
        /// The peer whose queue is full.
        node: NodeId,
        /// The queue size in force.
        queued: usize,
    },
    /// The frame could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The mesh was closed.
    #[error("the mesh is closed; bind a new one to talk to peers again")]
    Closed,
}

/// One node's endpoint on the mesh. Clones share it; [`Mesh::close`] ends it for all.
///
/// Dropping the last clone stops its tasks too, but only `close` waits for them and
/// says goodbye to peers, so prefer it.
pub struct Mesh<F> {
    shared: Arc<link::Shared<F>>,
    _stop_on_drop: Arc<DropGuard>,
}

impl<F> Clone for Mesh<F> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            _stop_on_drop: self._stop_on_drop.clone(),
        }
    }
}

impl<F: MeshFrame> fmt::Debug for Mesh<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mesh")
            .field("node", self.shared.local())
            .field("addr", &self.shared.local_addr())
            .finish_non_exhaustive()
    }
}

impl<F: MeshFrame> Mesh<F> {
    /// Binds the endpoint and starts accepting peers; frames from peers arrive on the
    /// returned receiver, which ends after [`Mesh::close`]. Must run inside a tokio runtime.
    pub async fn bind(config: MeshConfig) -> Result<(Self, mpsc::Receiver<Inbound<F>>), MeshError> {
        let (shared, inbound) = link::Shared::bind(config, true).await?;
        let inbound = inbound.expect("a queued mesh has an inbound receiver");
        Ok((Self::new(shared), inbound))
    }

    /// Binds the endpoint and starts accepting peers, like [`Mesh::bind`], but with no queue for
    /// the frames received: each connection's reader hands them to the function given to
    /// [`Mesh::serve`], on its own task, which saves a hand-off between tasks per burst of frames.
    /// Until then, readers hold the first frame they read and read no further (acknowledgements
    /// still flow), so nothing received is lost or reordered.
    pub async fn bind_unserved(config: MeshConfig) -> Result<Self, MeshError> {
        let (shared, _) = link::Shared::bind(config, false).await?;
        Ok(Self::new(shared))
    }

    fn new(shared: Arc<link::Shared<F>>) -> Self {
        let guard = Arc::new(shared.cancel.clone().drop_guard());
        Self {
            shared,
            _stop_on_drop: guard,
        }
    }

    /// Hands every frame received from now on to `serve`, on the task that read it: frames from
    /// one peer in the order they were sent, and one frame at a time over all peers, as a single
    /// task reading a queue would see them. `serve` must not wait: it holds up the peer's stream
    /// while it runs. Only for a mesh from [`Mesh::bind_unserved`]; returns `false`, and drops
    /// `serve`, when frames already had somewhere to go or the mesh is closed. [`Mesh::close`]
    /// drops `serve`.
    pub fn serve(&self, serve: impl Fn(Inbound<F>) + Send + Sync + 'static) -> bool {
        self.shared.serve(Arc::new(serve))
    }

    /// This node's id.
    pub fn node(&self) -> &NodeId {
        self.shared.local()
    }

    /// The address actually bound, to give to peers (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr()
    }

    /// Makes `node` a peer reachable at `addr`: it is dialled now and redialled with
    /// backoff whenever its connection drops. Calling again changes the address.
    pub fn add_peer(&self, node: NodeId, addr: SocketAddr) -> Result<(), MeshError> {
        self.shared.add_peer(node, addr)
    }

    /// Forgets a peer that left the cluster: its connection closes and frames still queued
    /// or unacknowledged for it are dropped, and counted in [`Mesh::frames_lost`]. Returns
    /// whether it was known.
    pub fn remove_peer(&self, node: &NodeId) -> bool {
        self.shared.remove_peer(node)
    }

    /// Forgets a peer this node took for dead, as [`Mesh::remove_peer`] does, and refuses the
    /// incarnation of its last link from now on, whichever side dials, if that link is down:
    /// frames it held unacknowledged when it was cut off never run here, nor run again what ran
    /// here before. A process that restarts under its id is a new incarnation and links as any
    /// peer.
    pub fn forget_peer(&self, node: &NodeId) -> bool {
        self.shared.forget_peer(node)
    }

    /// This node may have lost its owner lease: another node may have taken its units over, so
    /// what it holds for a peer, unacknowledged or still queued, is not sent again (late, it
    /// could run after what the cluster did since, or run twice). Links up now are closed, so
    /// that no connection carries what it held over a cut that heals; when the next link comes
    /// up, what is held is dropped and counted lost ([`LossReason::Fenced`]), and the frames after
    /// it are numbered on from there.
    pub fn fence(&self) {
        self.shared.fence();
    }

    /// Queues `frame` for `to`, behind every frame queued for it before this way (bulk frames
    /// take their own stream, [`Mesh::send_bulk`]).
    ///
    /// Returns at once; the frame is encoded here, so an oversized or unencodable frame
    /// is reported to the caller rather than to the peer.
    pub fn send(&self, to: &NodeId, frame: F) -> Result<(), MeshError> {
        self.shared.send(to, frame, false).map_err(|(_, e)| e)
    }

    /// Queues `frame` for `to` on the connection's bulk stream: behind the bulk frames queued
    /// before it, but never in the way of [`Mesh::send`]'s frames, sent before or after it.
    ///
    /// Best effort: the frame is not numbered or kept, and is silently gone if its connection
    /// ends before the peer read it (it is not counted in [`Mesh::frames_lost`]). For data whose
    /// loss the caller notices by itself, such as a round that goes unanswered.
    pub fn send_bulk(&self, to: &NodeId, frame: F) -> Result<(), MeshError> {
        self.shared.send(to, frame, true).map_err(|(_, e)| e)
    }

    /// [`Mesh::send`], giving a frame that was not queued back with the reason, for a caller
    /// that will send it elsewhere.
    pub fn send_or_give_back(&self, to: &NodeId, frame: F) -> Result<(), (F, MeshError)> {
        self.shared.send(to, frame, false)
    }

    /// Frames [`Mesh::send`] accepted that were never acknowledged by their peer, because it
    /// was removed, restarted, the mesh closed first, or this node was fenced; each is also
    /// logged (warn) and counted in the `ferry_mesh_frames_lost_total` metric.
    pub fn frames_lost(&self) -> u64 {
        self.shared.frames_lost()
    }

    /// From now on, every frame counted in [`Mesh::frames_lost`] is also handed back here, in
    /// batches per peer, so the caller can end what waited for them. A new call replaces the
    /// receiver of the last.
    pub fn losses(&self) -> mpsc::UnboundedReceiver<Lost<F>> {
        self.shared.losses()
    }

    /// Every known peer and where its connection stands, ordered by node id.
    pub fn peers(&self) -> Vec<PeerInfo> {
        self.shared.peers()
    }

    /// Waits until a connection with `node` is up (returns at once if it is).
    ///
    /// A node not yet known is waited for as a peer that will connect to us. There is
    /// no timeout: wrap the call in `tokio::time::timeout` to bound it.
    pub async fn wait_ready(&self, node: &NodeId) -> Result<(), MeshError> {
        self.shared.wait_ready(node).await
    }

    /// Closes every connection (peers see [`CloseCode::Shutdown`]), stops every task and
    /// releases the port, returning once all of it is done, or after [`CLOSE_LINGER`] of
    /// waiting for connections to drain (one to a silent peer can take longer; the port is
    /// then freed when it has).
    pub async fn close(&self) {
        self.shared.close().await;
    }
}

#[cfg(test)]
mod tests;
