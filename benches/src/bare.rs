//! The baselines for the cross-node benches: bare quinn doing the same work as two Ferry nodes.
//!
//! A quinn endpoint pair on loopback (a self-signed certificate, the ring provider passed in
//! explicitly, the transport settings of Ferry's mesh), one bidirectional stream, and frames as a
//! 4-byte length and a body.
//!
//! - [`QuinnPair`]: a server task reads postcard frames, adds what each carries to one count, and
//!   answers the ones that ask. The frames have the fields of Ferry's own mesh frames, filled with
//!   the same ids, so every frame on the wire is as long as Ferry's: the ratio measures Ferry's
//!   runtime, not its frame format.
//! - [`QuinnBulk`]: the client streams chunks as frames, a server task reads them all and
//!   acknowledges the end of each transfer: the baseline of a relocation's capture transfer.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Endpoint, RecvStream, SendStream};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use crate::cross::{NODE_A, SPOT};
use ferry::mesh::{DEFAULT_IDLE_TIMEOUT, DEFAULT_KEEP_ALIVE};
use ferry::{MessageError, NodeId, SpotId, UnitId};

const ALPN: &[u8] = b"ferry-bench-bare";
const SERVER_NAME: &str = "localhost";

/// Everything on the stream. Ferry wraps each frame in a one-variant-of-three envelope
/// (its handshake frames are the other two); so does this, to keep the lengths equal.
#[derive(Debug, Serialize, Deserialize)]
pub enum Wire {
    /// Not sent: stands in for Ferry's first handshake frame.
    Hello,
    /// Not sent: stands in for Ferry's second handshake frame.
    Welcome,
    /// The one variant sent: a frame of the bench's traffic.
    Frame(Frame),
}

/// A frame: a message for the counter, or the reply to one.
#[derive(Debug, Serialize, Deserialize)]
pub enum Frame {
    /// A message, with where its reply goes if it is a request.
    Deliver {
        /// The unit addressed.
        to: UnitId,
        /// The postcard-encoded message.
        payload: Bytes,
        /// The asking node and its request number, for a request.
        reply: Option<ReplyTo>,
        /// Unused here (Ferry's Instance Spot activation).
        activate: Option<String>,
        /// The sending node.
        origin: NodeId,
        /// Unused here (Ferry's forwarding count).
        hops: u8,
    },
    /// The answer to a request.
    Reply {
        /// The request number.
        request: u64,
        /// The postcard-encoded reply.
        terminal: Result<Bytes, MessageError>,
    },
}

/// Where a request's reply goes.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReplyTo {
    /// The asking node.
    pub node: NodeId,
    /// Its request number.
    pub request: u64,
}

fn encode(wire: &Wire) -> Bytes {
    postcard::to_allocvec(wire)
        .expect("bench frames encode")
        .into()
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(16 * 1024 * 1024)
        .new_codec()
}

fn transport() -> Arc<quinn::TransportConfig> {
    // As Ferry's mesh: its keep-alive and idle timeout, the 10 ms first RTT guess of the benches'
    // nodes, and quinn's own flow-control windows and congestion controller.
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(DEFAULT_KEEP_ALIVE))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(DEFAULT_IDLE_TIMEOUT).expect("a valid idle timeout"),
        ))
        .initial_rtt(Duration::from_millis(10));
    Arc::new(transport)
}

fn endpoints() -> (Endpoint, Endpoint) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_owned()])
        .expect("a self-signed certificate");
    let cert_der: CertificateDer<'static> = cert.cert.der().clone();
    let key = PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der());

    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 with ring")
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key.into())
        .expect("the server certificate");
    server_tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(server_tls).expect("a QUIC server config"),
    ));
    server.transport_config(transport());

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).expect("the certificate as a root");
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 with ring")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut client = quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(client_tls).expect("a QUIC client config"),
    ));
    client.transport_config(transport());

    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server = Endpoint::server(server, loopback).expect("the server endpoint binds");
    let mut client_ep = Endpoint::client(loopback).expect("the client endpoint binds");
    client_ep.set_default_client_config(client);
    (client_ep, server)
}

/// Reads frames, counts what they carry and answers requests, until the stream ends.
async fn serve(send: SendStream, recv: RecvStream) {
    let mut frames = FramedRead::new(recv, codec());
    let mut replies = FramedWrite::new(send, codec());
    let mut count = 0u64;
    while let Some(Ok(bytes)) = frames.next().await {
        let Ok(Wire::Frame(Frame::Deliver { payload, reply, .. })) =
            postcard::from_bytes::<Wire>(&bytes)
        else {
            continue;
        };
        let n: u64 = postcard::from_bytes(&payload).expect("a u64 message");
        count += n;
        if let Some(ReplyTo { request, .. }) = reply {
            let terminal = Ok(postcard::to_allocvec(&count).expect("a u64 encodes").into());
            let wire = Wire::Frame(Frame::Reply { request, terminal });
            if replies.send(encode(&wire)).await.is_err() {
                return;
            }
        }
    }
    let _ = replies.get_mut().finish();
}

/// Both endpoints, their connection, and the server task serving the client's first stream.
struct Connected {
    client: Endpoint,
    server: Endpoint,
    conn: quinn::Connection,
    task: JoinHandle<()>,
}

impl Connected {
    /// Binds both endpoints, connects, and opens a bidirectional stream that the server task hands
    /// to `serve` once the client first writes on it.
    async fn open<S, Fut>(serve: S) -> (Connected, SendStream, RecvStream)
    where
        S: FnOnce(SendStream, RecvStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (client, server) = endpoints();
        let addr = server.local_addr().expect("the server's address");
        let accepting = server.clone();
        let task = tokio::spawn(async move {
            let incoming = accepting.accept().await.expect("a connection arrives");
            let conn = incoming.await.expect("the handshake completes");
            // The stream shows up here with its first frame.
            let (send, recv) = conn.accept_bi().await.expect("the client's stream");
            serve(send, recv).await;
        });
        let conn = client
            .connect(addr, SERVER_NAME)
            .expect("a connection starts")
            .await
            .expect("the handshake completes");
        let (send, recv) = conn.open_bi().await.expect("a stream opens");
        let connected = Connected {
            client,
            server,
            conn,
            task,
        };
        (connected, send, recv)
    }

    /// Waits for the server task (the client's stream must be finished), and closes both endpoints.
    async fn close(self) {
        let _ = self.task.await;
        self.conn.close(0u32.into(), b"done");
        self.client.close(0u32.into(), b"done");
        self.server.close(0u32.into(), b"done");
        self.client.wait_idle().await;
        self.server.wait_idle().await;
    }
}

/// A connected quinn pair: the client half is driven by the bench, the server half by a task.
pub struct QuinnPair {
    link: Connected,
    out: FramedWrite<SendStream, LengthDelimitedCodec>,
    replies: FramedRead<RecvStream, LengthDelimitedCodec>,
    to: UnitId,
    origin: NodeId,
    next_request: u64,
}

impl QuinnPair {
    /// Binds both endpoints, connects, opens the stream and starts the server task.
    pub async fn start() -> QuinnPair {
        let (link, send, recv) = Connected::open(serve).await;
        let mut pair = QuinnPair {
            link,
            out: FramedWrite::new(send, codec()),
            replies: FramedRead::new(recv, codec()),
            to: UnitId::Spot(SpotId::new(SPOT).expect("a valid spot id")),
            origin: NodeId::new(NODE_A).expect("a valid node id"),
            next_request: 1,
        };
        pair.request(0).await;
        pair
    }

    fn deliver(&self, n: u64, reply: Option<ReplyTo>) -> Bytes {
        encode(&Wire::Frame(Frame::Deliver {
            to: self.to.clone(),
            payload: postcard::to_allocvec(&n).expect("a u64 encodes").into(),
            reply,
            activate: None,
            origin: self.origin.clone(),
            hops: 0,
        }))
    }

    /// Queues a tell of `n`; it is written once enough is buffered, or with the next request.
    pub async fn tell(&mut self, n: u64) {
        let frame = self.deliver(n, None);
        self.out.feed(frame).await.expect("the stream takes frames");
    }

    /// Sends a request to add `n` (after every tell queued before it) and returns the count.
    pub async fn request(&mut self, n: u64) -> u64 {
        let request = self.next_request;
        self.next_request += 1;
        let reply = ReplyTo {
            node: self.origin.clone(),
            request,
        };
        let frame = self.deliver(n, Some(reply));
        self.out.send(frame).await.expect("the stream takes frames");
        let bytes = self
            .replies
            .next()
            .await
            .expect("a reply arrives")
            .expect("the reply is readable");
        match postcard::from_bytes::<Wire>(&bytes).expect("a reply frame") {
            Wire::Frame(Frame::Reply {
                request: answered,
                terminal: Ok(payload),
            }) if answered == request => postcard::from_bytes(&payload).expect("a u64 reply"),
            other => panic!("unexpected answer to request {request}: {other:?}"),
        }
    }

    /// Ends the stream, waits for the server task, and closes both endpoints.
    pub async fn shutdown(mut self) {
        let _ = self.out.get_mut().finish();
        self.link.close().await;
    }
}

/// Reads frames and counts their bytes; an empty frame ends a transfer, and is answered with the
/// count.
async fn absorb(send: SendStream, recv: RecvStream) {
    let mut frames = FramedRead::new(recv, codec());
    let mut acks = FramedWrite::new(send, codec());
    let mut read = 0u64;
    while let Some(Ok(frame)) = frames.next().await {
        if !frame.is_empty() {
            read += frame.len() as u64;
            continue;
        }
        let count = Bytes::copy_from_slice(&read.to_be_bytes());
        if acks.send(count).await.is_err() {
            return;
        }
        read = 0;
    }
    let _ = acks.get_mut().finish();
}

/// A quinn pair for bulk transfers: the bench writes chunks on one stream, a server task reads them.
pub struct QuinnBulk {
    link: Connected,
    send: SendStream,
    acks: FramedRead<RecvStream, LengthDelimitedCodec>,
}

impl QuinnBulk {
    /// Binds both endpoints, connects, opens the stream and starts the server task.
    pub async fn start() -> QuinnBulk {
        let (link, send, recv) = Connected::open(absorb).await;
        let mut bulk = QuinnBulk {
            link,
            send,
            acks: FramedRead::new(recv, codec()),
        };
        // The server task gets the stream with its first bytes: those of an empty transfer.
        bulk.transfer(&[]).await;
        bulk
    }

    /// Writes each chunk as a frame (its 4-byte length, then the chunk itself, not copied), then
    /// an empty frame that ends the transfer; returns the bytes the server read, once it says so.
    pub async fn transfer(&mut self, chunks: &[Bytes]) -> u64 {
        let mut pieces = Vec::with_capacity(2 * chunks.len() + 1);
        for chunk in chunks {
            let len = u32::try_from(chunk.len()).expect("a chunk under 4 GiB");
            pieces.push(Bytes::copy_from_slice(&len.to_be_bytes()));
            pieces.push(chunk.clone());
        }
        pieces.push(Bytes::from_static(&[0; 4]));
        self.send
            .write_all_chunks(&mut pieces)
            .await
            .expect("the stream takes the chunks");
        let ack = self
            .acks
            .next()
            .await
            .expect("the end is acknowledged")
            .expect("the acknowledgement is readable");
        u64::from_be_bytes(ack[..].try_into().expect("an 8-byte count"))
    }

    /// Ends the stream, waits for the server task, and closes both endpoints.
    pub async fn shutdown(mut self) {
        let _ = self.send.finish();
        self.link.close().await;
    }
}
