//! The client protocol. A client opens one bidirectional QUIC stream (ALPN [`ALPN`]) and both
//! sides write frames on it: a 4-byte big-endian length, then a postcard body (see
//! the mesh's frame codec), never longer than the gateway's `max_frame`.
//!
//! The first client frame is [`ClientFrame::Hello`]; the gateway answers
//! [`ServerFrame::Welcome`] or closes. A gateway that ends a session writes
//! [`ServerFrame::Closing`] with the reason, then closes the connection with the same code and
//! reason, so a client learns why whichever arrives first.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::SessionId;
use crate::ids::{ActorId, NodeId};

/// The ALPN protocol of the client listener; anything else fails the TLS handshake.
pub const ALPN: &[u8] = b"ferry-client/1";

/// The protocol version a client states in its Hello. Version 2 added
/// [`ServerFrame::Delivered`], version 3 [`ServerFrame::Undelivered`]; a gateway still takes
/// older clients and sends them neither frame they do not know.
pub const PROTOCOL_VERSION: u16 = 3;

/// The oldest protocol version a gateway takes.
pub const OLDEST_VERSION: u16 = 1;

/// What a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientFrame {
    /// The first frame: the protocol version and the token the application's authenticator checks.
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u16,
        /// The credential, opaque to Ferry.
        token: Bytes,
    },
    /// Bind this Actor to the session: its pushes come here, this client's inputs go to it.
    Bind {
        /// The Actor to bind; a client may bind several.
        actor: ActorId,
    },
    /// Stop being bound to this Actor.
    Unbind {
        /// The Actor to let go.
        actor: ActorId,
    },
    /// A message for a bound Actor, postcard-encoded as the Actor's message type.
    Input {
        /// The bound Actor the input is for.
        actor: ActorId,
        /// The input, postcard-encoded as the Actor's message type.
        payload: Bytes,
    },
    /// The client is leaving; the gateway closes the session.
    Bye,
}

impl ClientFrame {
    /// The frame's name, for close reasons.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientFrame::Hello { .. } => "Hello",
            ClientFrame::Bind { .. } => "Bind",
            ClientFrame::Unbind { .. } => "Unbind",
            ClientFrame::Input { .. } => "Input",
            ClientFrame::Bye => "Bye",
        }
    }
}

/// The limits a gateway announces in its Welcome, so a client can pace itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnouncedLimits {
    /// The largest frame body the gateway accepts.
    pub max_frame: u32,
    /// Frames per second on average.
    pub rate_per_second: u32,
    /// Frames in one burst above that.
    pub rate_burst: u32,
}

/// What a gateway sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerFrame {
    /// The token was accepted.
    Welcome {
        /// The session's id on its gateway.
        session: SessionId,
        /// The gateway node.
        node: NodeId,
        /// The limits the session is held to.
        limits: AnnouncedLimits,
    },
    /// The Actor is bound to this session.
    Bound {
        /// The Actor now bound.
        actor: ActorId,
    },
    /// The bind was refused; the session stays open.
    BindRefused {
        /// The Actor the client asked to bind.
        actor: ActorId,
        /// Why the gateway or the application refused it, for the client.
        reason: String,
    },
    /// The Actor is no longer bound to this session.
    Unbound {
        /// The Actor that was bound.
        actor: ActorId,
        /// Why (another session bound it, the client asked, the Actor stopped...).
        reason: String,
    },
    /// A message the Actor pushed, encoded as the type it pushed (postcard on QUIC, JSON on
    /// WebSocket).
    Push {
        /// The Actor that pushed it.
        actor: ActorId,
        /// The push's number within this binding: 0 after each `Bound`, then one more each push.
        seq: u64,
        /// The pushed message, encoded as the session's codec says.
        payload: Bytes,
    },
    /// The session ends; the connection closes next with the same code and reason.
    Closing {
        /// What kind of end.
        code: CloseCode,
        /// Why, for people.
        reason: String,
    },
    /// The first `inputs` inputs this session sent to `actor` since it bound it are settled,
    /// and those after the last [`ServerFrame::Undelivered`] reached the Actor and ran there: a
    /// gateway that dies now loses none of them. Cumulative; sent to version 2 clients and later
    /// (a version 2 client is not sent `Undelivered`, and so this count may also cover inputs
    /// that died with a node that crashed while running the Actor).
    Delivered {
        /// The Actor the inputs went to.
        actor: ActorId,
        /// How many of this session's inputs to it, counted from its bind.
        inputs: u64,
    },
    /// The node running `actor` crashed: of the first `inputs` inputs this session sent it since
    /// it bound it, those no `Delivered` covered may not have run (they died with the node, or
    /// ran there and live on only if its standby's copy held them). They are settled: no later
    /// `Delivered` covers them. Sent to version 3 clients only.
    Undelivered {
        /// The Actor the inputs went to.
        actor: ActorId,
        /// How many of this session's inputs to it, counted from its bind.
        inputs: u64,
    },
}

/// How a session's application messages are encoded: inputs as the bound Actor's message type,
/// pushes as the type the Actor pushed. It travels with the binding, so an Actor encodes its
/// pushes for its client wherever it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Encoding {
    /// postcard, as a Rust client over QUIC reads it.
    Postcard,
    /// JSON (serde's JSON form of the type), as a WebSocket client reads it.
    Json,
}

/// Why a session ended; also the QUIC application close code (and, plus 4000, the WebSocket
/// close code). In JSON it is written by name in snake_case (`seal_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum CloseCode {
    /// The client said goodbye.
    Normal = 0,
    /// The gateway node is shutting down, or may have lost its owner lease: reconnect to another
    /// node.
    Shutdown = 1,
    /// No valid Hello, or the token was refused.
    Unauthenticated = 2,
    /// A frame did not decode.
    Malformed = 3,
    /// A frame was over the size limit.
    TooLarge = 4,
    /// A frame of a type this gateway does not know.
    UnknownFrame = 5,
    /// An input that is not a message its Actor takes.
    BadInput = 6,
    /// Frames in an order the protocol does not allow (a second Hello, a wrong version).
    Protocol = 7,
    /// The client sent faster than its rate limit.
    RateLimited = 8,
    /// Too many inputs were held while the client's Actors moved.
    TooManyHeld = 9,
    /// A bound Actor's move was not heard to end by its deadline and the seal timeout after it
    /// (or a push went missing).
    SealTimeout = 10,
    /// The client read its pushes too slowly.
    SlowReader = 11,
    /// The gateway could not go on (a push over the frame limit, an internal error).
    Internal = 12,
}

impl CloseCode {
    const ALL: [CloseCode; 13] = [
        CloseCode::Normal,
        CloseCode::Shutdown,
        CloseCode::Unauthenticated,
        CloseCode::Malformed,
        CloseCode::TooLarge,
        CloseCode::UnknownFrame,
        CloseCode::BadInput,
        CloseCode::Protocol,
        CloseCode::RateLimited,
        CloseCode::TooManyHeld,
        CloseCode::SealTimeout,
        CloseCode::SlowReader,
        CloseCode::Internal,
    ];

    /// The code as a QUIC application error code.
    pub fn to_u32(self) -> u32 {
        self as u32
    }

    /// The code of a QUIC application error code, if it is one of these.
    pub fn from_u64(code: u64) -> Option<CloseCode> {
        Self::ALL
            .iter()
            .copied()
            .find(|c| u64::from(c.to_u32()) == code)
    }

    /// Whether a client should connect again (to another node) after this end: true when the
    /// session ended for the server's reasons, false when the client's input ended it.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            CloseCode::Shutdown
                | CloseCode::SealTimeout
                | CloseCode::SlowReader
                | CloseCode::Internal
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An Actor id from any text, cut to a valid one.
    fn actor(text: &str) -> ActorId {
        let id: String = text.chars().take(40).collect();
        ActorId::new(format!("a{id}")).expect("valid id")
    }

    fn round_trip<T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
        value: &T,
    ) -> Result<(), TestCaseError> {
        let bytes = postcard::to_allocvec(value).expect("encodes");
        let back: T = postcard::from_bytes(&bytes).expect("decodes");
        prop_assert_eq!(&back, value);
        Ok(())
    }

    proptest! {
        /// Every frame a client sends decodes to what was encoded.
        #[test]
        fn client_frames_round_trip(
            name in "\\PC*",
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            version in any::<u16>(),
        ) {
            let frames = [
                ClientFrame::Hello { version, token: bytes.clone().into() },
                ClientFrame::Bind { actor: actor(&name) },
                ClientFrame::Unbind { actor: actor(&name) },
                ClientFrame::Input { actor: actor(&name), payload: bytes.into() },
                ClientFrame::Bye,
            ];
            for frame in &frames {
                round_trip(frame)?;
            }
        }

        /// Every frame a gateway sends decodes to what was encoded.
        #[test]
        fn server_frames_round_trip(
            name in "\\PC*",
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            numbers in any::<(u64, u32, u32, u32)>(),
            code in 0..CloseCode::ALL.len(),
        ) {
            let (session, max_frame, rate_per_second, rate_burst) = numbers;
            let frames = [
                ServerFrame::Welcome {
                    session: SessionId(session),
                    node: NodeId::new(format!("n{}", session % 100)).expect("valid id"),
                    limits: AnnouncedLimits { max_frame, rate_per_second, rate_burst },
                },
                ServerFrame::Bound { actor: actor(&name) },
                ServerFrame::BindRefused { actor: actor(&name), reason: name.clone() },
                ServerFrame::Unbound { actor: actor(&name), reason: name.clone() },
                ServerFrame::Push { actor: actor(&name), seq: session, payload: bytes.into() },
                ServerFrame::Closing { code: CloseCode::ALL[code], reason: name.clone() },
                ServerFrame::Delivered { actor: actor(&name), inputs: session },
            ];
            for frame in &frames {
                round_trip(frame)?;
            }
        }
    }

    #[test]
    fn close_codes_round_trip_and_only_server_side_ends_are_retried() {
        for code in CloseCode::ALL {
            assert_eq!(CloseCode::from_u64(u64::from(code.to_u32())), Some(code));
        }
        assert_eq!(CloseCode::from_u64(999), None);
        assert!(CloseCode::Shutdown.retryable());
        assert!(!CloseCode::RateLimited.retryable());
        assert!(!CloseCode::Malformed.retryable());
    }
}
