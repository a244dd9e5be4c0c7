//! The node-to-node mesh: QUIC with mutual TLS, one connection per pair of nodes, and
//! one ordered stream of frames each way on it.
//!
//! Layout, in the order a frame travels:
//! - [`tls`]: the cluster CA and node certificates; every certificate names its node,
//!   and both ends of a connection prove theirs.
//! - [`codec`]: frames as a 4-byte length and a postcard body, with a hard size limit.
//! - `handshake`: the protocol rules as plain functions: hello and welcome, which of two
//!   simultaneous connections survives, backoff, close codes.

pub mod codec;
mod handshake;
pub mod tls;

pub use codec::{DEFAULT_MAX_FRAME, DecodeError, EncodeError, FrameCodec};
pub use handshake::CloseCode;
pub use tls::{ClusterCa, NodeCert, NodeTls, TlsError, node_dns_name, node_file_stem};
