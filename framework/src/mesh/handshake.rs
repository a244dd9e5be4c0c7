//! The mesh protocol's rules, as plain functions: what a stream carries, how a hello
//! is checked, which of two connections to one peer survives, and how long to wait
//! before dialling again. No sockets and no clock, so every case is a unit test.
//!
//! A connection carries one unidirectional stream each way. The dialler's stream
//! starts with [`Wire::Hello`]; the acceptor either closes the connection with a
//! [`CloseCode`] or answers on its own stream with [`Wire::Welcome`]. Only then does
//! either side send application frames, so no frame is ever written to a connection
//! that the other side is about to refuse.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::NodeId;

/// Everything that travels on a mesh stream.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Wire<F> {
    /// First frame of the dialler.
    Hello(Hello),
    /// First frame of the acceptor, once it keeps the connection.
    Welcome(Hello),
    /// An application frame; its number is one more than the frame before it on this stream.
    Frame(F),
    /// Sent first after the handshake: the number of the next `Frame` on this stream.
    Resume(u64),
    /// Every frame of sending incarnation `instance` up to number `upto` was delivered.
    Ack {
        /// The incarnation of the frames' sender.
        instance: u64,
        /// The highest number delivered, all before it delivered too.
        upto: u64,
    },
}

/// The version of the mesh protocol this build speaks: the frames between nodes and their meaning.
/// It changes whenever a frame changes; nodes of different versions refuse each other's hello
/// ([`CloseCode::Version`]) rather than misread each other's frames.
pub const PROTOCOL_VERSION: u32 = 2;

/// Who is speaking: the protocol version, the node id (checked against its certificate) and the
/// incarnation. `Hello` stays the first variant of [`Wire`] and `version` its first field in every
/// version, so any two versions can read each other's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub version: u32,
    pub node: NodeId,
    /// Random per `Mesh::bind`, so a restarted peer is told apart from a stale link.
    pub instance: u64,
}

impl Hello {
    /// This build's hello for `node`.
    pub fn new(node: NodeId, instance: u64) -> Self {
        Hello {
            version: PROTOCOL_VERSION,
            node,
            instance,
        }
    }
}

/// Refuses a peer that speaks another version of the protocol.
fn check_version(hello: &Hello) -> Result<(), Refusal> {
    if hello.version == PROTOCOL_VERSION {
        return Ok(());
    }
    Err(Refusal::new(
        CloseCode::Version,
        format!(
            "node {} speaks mesh protocol version {}, this node {PROTOCOL_VERSION}; run one Ferry \
             version across the cluster, or roll an update one node at a time between versions \
             that share a protocol",
            hello.node, hello.version
        ),
    ))
}

/// Why the mesh closed a connection, sent to the peer as the QUIC application error code.
///
/// Code 0 is never used: quinn sends it when a connection is dropped without a reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CloseCode {
    /// The node is shutting down.
    Shutdown = 1,
    /// A frame could not be decoded.
    Malformed = 2,
    /// A frame announced a length over the limit.
    TooLarge = 3,
    /// A frame arrived that the protocol does not allow at that point.
    Unexpected = 4,
    /// The hello names a node the certificate does not prove.
    WrongNode = 5,
    /// Another connection with this peer is kept instead (simultaneous dial).
    Duplicate = 6,
    /// A newer connection from the same peer replaced this one.
    Replaced = 7,
    /// The handshake did not finish in time.
    HandshakeTimeout = 8,
    /// The peer ended its frame stream without closing the connection.
    StreamEnded = 9,
    /// The peer claims this node's own id.
    SelfConnect = 10,
    /// The peer speaks another version of the mesh protocol.
    Version = 11,
    /// This node took the peer's incarnation for dead: it never links with it again.
    Removed = 12,
}

impl CloseCode {
    /// Every code, for decoding.
    const ALL: [CloseCode; 12] = [
        CloseCode::Shutdown,
        CloseCode::Malformed,
        CloseCode::TooLarge,
        CloseCode::Unexpected,
        CloseCode::WrongNode,
        CloseCode::Duplicate,
        CloseCode::Replaced,
        CloseCode::HandshakeTimeout,
        CloseCode::StreamEnded,
        CloseCode::SelfConnect,
        CloseCode::Version,
        CloseCode::Removed,
    ];

    /// The code as sent on the wire.
    pub fn to_varint(self) -> quinn::VarInt {
        quinn::VarInt::from_u32(self as u32)
    }

    /// Reads a code received from a peer; `None` for codes this version does not know.
    pub fn from_varint(code: quinn::VarInt) -> Option<CloseCode> {
        Self::ALL
            .into_iter()
            .find(|c| u64::from(*c as u32) == code.into_inner())
    }

    /// The code a peer closed `error`'s connection with, if it was one of ours.
    pub fn of(error: &quinn::ConnectionError) -> Option<CloseCode> {
        match error {
            quinn::ConnectionError::ApplicationClosed(close) => Self::from_varint(close.error_code),
            _ => None,
        }
    }
}

/// A decision to close a connection, with the reason sent to the peer and logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub code: CloseCode,
    pub reason: String,
}

impl Refusal {
    pub fn new(code: CloseCode, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }
}

/// Checks the dialler's first frame. `cert_names` says whether the client certificate
/// (already verified against the CA) proves a given node id.
pub(crate) fn check_hello<F>(
    local: &NodeId,
    first: Wire<F>,
    cert_names: impl FnOnce(&NodeId) -> Result<(), String>,
) -> Result<Hello, Refusal> {
    let hello = match first {
        Wire::Hello(hello) => hello,
        Wire::Welcome(_) => {
            return Err(Refusal::new(
                CloseCode::Unexpected,
                "first frame was a welcome; the dialler must send a hello",
            ));
        }
        Wire::Frame(_) | Wire::Resume(_) | Wire::Ack { .. } => {
            return Err(Refusal::new(
                CloseCode::Unexpected,
                "first frame was an application frame; the dialler must send a hello",
            ));
        }
    };
    check_version(&hello)?;
    if &hello.node == local {
        return Err(Refusal::new(
            CloseCode::SelfConnect,
            format!("peer claims this node's own id {local}; are two nodes sharing an id?"),
        ));
    }
    cert_names(&hello.node).map_err(|detail| {
        Refusal::new(
            CloseCode::WrongNode,
            format!("hello names node {} but {detail}", hello.node),
        )
    })?;
    Ok(hello)
}

/// The incarnations of peers this node took for dead. It never links with them again: frames
/// one held unacknowledged when it was cut off would otherwise run here once the cut healed,
/// after its units had been rebuilt elsewhere and its clients had sent again through other
/// nodes, and they would run a second time what this node delivered before it forgot the
/// peer. A process that restarts under the same id has a new incarnation, and links. Never
/// pruned: it grows by one entry for each process of a peer taken for dead.
#[derive(Debug, Default)]
pub(crate) struct Forgotten(HashSet<(NodeId, u64)>);

impl Forgotten {
    /// Remembers that `node`'s incarnation `instance` was taken for dead.
    pub fn forget(&mut self, node: NodeId, instance: u64) {
        self.0.insert((node, instance));
    }

    /// Refuses a link with `node`'s incarnation `instance` if it was taken for dead.
    pub fn check(&self, node: &NodeId, instance: u64) -> Result<(), Refusal> {
        if !self.0.contains(&(node.clone(), instance)) {
            return Ok(());
        }
        Err(Refusal::new(
            CloseCode::Removed,
            format!(
                "node {node} was taken for dead and removed from the cluster, and its units run \
                 elsewhere: this process never links again; restart it to join as a new one"
            ),
        ))
    }
}

/// Checks the acceptor's first frame on the dialler side.
pub(crate) fn check_welcome<F>(expected: &NodeId, first: Wire<F>) -> Result<Hello, Refusal> {
    match first {
        Wire::Welcome(hello) if &hello.node == expected => check_version(&hello).map(|()| hello),
        Wire::Welcome(hello) => Err(Refusal::new(
            CloseCode::WrongNode,
            format!(
                "welcome names node {} but {expected} was dialled",
                hello.node
            ),
        )),
        _ => Err(Refusal::new(
            CloseCode::Unexpected,
            "first frame from the acceptor was not a welcome",
        )),
    }
}

/// What a node holds with a peer when that peer's connection arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Nothing (never connected, or waiting to redial).
    Nothing,
    /// Our own dial is in progress.
    Dialling,
    /// A working link.
    Link {
        /// We dialled it.
        dialled_by_us: bool,
        /// The peer incarnation it was made with.
        instance: u64,
    },
}

/// Whether to keep a connection a peer dialled to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep it, dropping whatever we held (our dial, or an older link).
    Accept,
    /// Close it: what we hold wins.
    Refuse,
}

/// Decides which connection survives when `remote`'s dial reaches `local`.
///
/// When both sides dial at once, the connection dialled by the lower node id is kept:
/// the lower node refuses the higher one's dial while its own is in progress, and the
/// higher node accepts the lower one's dial and drops its own (which the lower node
/// refuses anyway). Any other arrival means the peer lost its link (or restarted, seen
/// by a new incarnation), so the new connection replaces ours.
pub(crate) fn judge_inbound(
    local: &NodeId,
    remote: &NodeId,
    holding: Holding,
    remote_instance: u64,
) -> Verdict {
    let we_win = local < remote;
    match holding {
        Holding::Nothing => Verdict::Accept,
        Holding::Dialling if we_win => Verdict::Refuse,
        Holding::Dialling => Verdict::Accept,
        Holding::Link { instance, .. } if instance != remote_instance => Verdict::Accept,
        Holding::Link {
            dialled_by_us: true,
            ..
        } if we_win => Verdict::Refuse,
        Holding::Link { .. } => Verdict::Accept,
    }
}

/// Exponential backoff between dial attempts, with jitter so a cluster restarting
/// together does not redial in lockstep.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            failures: 0,
        }
    }

    /// Consecutive failed attempts since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The wait before the next attempt; `jitter` in `[0, 1]` picks a point in the
    /// upper half of the current step.
    pub fn next_delay(&mut self, jitter: f64) -> Duration {
        let step = self
            .min
            .saturating_mul(1u32 << self.failures.min(16))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        let half = step / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// A link came up: start again from the shortest wait.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    fn hello(id: &str) -> Wire<u8> {
        Wire::Hello(Hello::new(node(id), 1))
    }

    #[test]
    fn only_the_incarnation_taken_for_dead_is_refused() {
        let mut forgotten = Forgotten::default();
        forgotten.forget(node("b"), 7);
        let refused = forgotten.check(&node("b"), 7);
        assert_eq!(refused.unwrap_err().code, CloseCode::Removed);
        assert!(
            forgotten.check(&node("b"), 8).is_ok(),
            "a restarted process"
        );
        assert!(forgotten.check(&node("c"), 7).is_ok());
    }

    #[test]
    fn hello_must_come_first_and_match_the_certificate() {
        let me = node("a");
        let ok = check_hello(&me, hello("b"), |n| {
            if n.as_str() == "b" {
                Ok(())
            } else {
                Err("no".into())
            }
        });
        assert_eq!(ok.unwrap().node, node("b"));

        let wrong = check_hello(&me, hello("c"), |_| Err("the certificate names b".into()));
        assert_eq!(wrong.unwrap_err().code, CloseCode::WrongNode);

        let data = check_hello(&me, Wire::Frame(7u8), |_| Ok(()));
        assert_eq!(data.unwrap_err().code, CloseCode::Unexpected);

        let welcome = check_hello(&me, Wire::<u8>::Welcome(Hello::new(node("b"), 1)), |_| {
            Ok(())
        });
        assert_eq!(welcome.unwrap_err().code, CloseCode::Unexpected);

        let myself = check_hello(&me, hello("a"), |_| Ok(()));
        assert_eq!(myself.unwrap_err().code, CloseCode::SelfConnect);
    }

    #[test]
    fn a_peer_of_another_protocol_version_is_refused_both_ways() {
        let other = |hello: Hello| Hello {
            version: PROTOCOL_VERSION + 1,
            ..hello
        };
        let refused = check_hello(
            &node("a"),
            Wire::<u8>::Hello(other(Hello::new(node("b"), 1))),
            |_| Ok(()),
        )
        .unwrap_err();
        assert_eq!(refused.code, CloseCode::Version);
        let said = format!(
            "version {}, this node {PROTOCOL_VERSION}",
            PROTOCOL_VERSION + 1
        );
        assert!(refused.reason.contains(&said), "{}", refused.reason);
        let refused = check_welcome(
            &node("b"),
            Wire::<u8>::Welcome(other(Hello::new(node("b"), 1))),
        )
        .unwrap_err();
        assert_eq!(refused.code, CloseCode::Version);
    }

    #[test]
    fn welcome_must_name_the_dialled_node() {
        let w = |id: &str| Wire::<u8>::Welcome(Hello::new(node(id), 3));
        assert_eq!(check_welcome(&node("b"), w("b")).unwrap().instance, 3);
        assert_eq!(
            check_welcome(&node("b"), w("c")).unwrap_err().code,
            CloseCode::WrongNode
        );
        assert_eq!(
            check_welcome(&node("b"), hello("b")).unwrap_err().code,
            CloseCode::Unexpected
        );
    }

    #[test]
    fn simultaneous_dial_keeps_the_lower_nodes_connection_on_both_sides() {
        let (a, b) = (node("a"), node("b"));
        // a (lower) is dialling when b's dial arrives: refuse.
        assert_eq!(judge_inbound(&a, &b, Holding::Dialling, 2), Verdict::Refuse);
        // b (higher) is dialling when a's dial arrives: accept, and drop its own.
        assert_eq!(judge_inbound(&b, &a, Holding::Dialling, 1), Verdict::Accept);
        // a already has its link up when b's late dial arrives: still refuse.
        let a_link = Holding::Link {
            dialled_by_us: true,
            instance: 2,
        };
        assert_eq!(judge_inbound(&a, &b, a_link, 2), Verdict::Refuse);
    }

    #[test]
    fn a_restarted_or_redialling_peer_replaces_the_old_link() {
        let (a, b) = (node("a"), node("b"));
        // b restarted (new incarnation): even a's own link gives way.
        let a_link = Holding::Link {
            dialled_by_us: true,
            instance: 2,
        };
        assert_eq!(judge_inbound(&a, &b, a_link, 99), Verdict::Accept);
        // b lost the link it dialled and dials again.
        let b_link = Holding::Link {
            dialled_by_us: false,
            instance: 2,
        };
        assert_eq!(judge_inbound(&a, &b, b_link, 2), Verdict::Accept);
        // a (lower) dials b while b holds a link b dialled: a's wins.
        let b_own = Holding::Link {
            dialled_by_us: true,
            instance: 1,
        };
        assert_eq!(judge_inbound(&b, &a, b_own, 1), Verdict::Accept);
        assert_eq!(judge_inbound(&b, &a, Holding::Nothing, 1), Verdict::Accept);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let full: Vec<_> = (0..6).map(|_| backoff.next_delay(1.0)).collect();
        let ms: Vec<u128> = full.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.failures(), 6);
        backoff.reset();
        assert_eq!(backoff.next_delay(0.0), Duration::from_millis(50));
    }

    #[test]
    fn close_codes_round_trip() {
        for code in CloseCode::ALL {
            assert_eq!(CloseCode::from_varint(code.to_varint()), Some(code));
        }
        assert_eq!(CloseCode::from_varint(quinn::VarInt::from_u32(1000)), None);
    }
}
