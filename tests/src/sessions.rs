//! Gateways for tests: a self-signed certificate the clients trust, a token table, nodes that
//! accept game clients, and a raw client that speaks the wire protocol byte by byte, to send
//! what the client library never would.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ferry::client::{ClientConfig, Reconnect};
use ferry::mesh::codec::FrameCodec;
use ferry::session::tls::client_quic_config;
use ferry::session::wire::{ClientFrame, CloseCode, PROTOCOL_VERSION, ServerFrame};
use ferry::session::{SessionId, WebSocketSettings};
use ferry::{Node, Registry, SessionLimits, SessionSettings, SessionTls, StaticTokens};
use quinn::{Connection, ConnectionError, Endpoint, RecvStream, SendStream};
use tokio_util::codec::Decoder;

use crate::cluster::Cluster;

/// The token every test client presents.
pub const TOKEN: &[u8] = b"good-token";

/// The name the gateways' certificate carries.
pub const SERVER_NAME: &str = "localhost";

/// One certificate for every gateway of a test cluster, and the PEM clients trust.
#[derive(Clone)]
pub struct Gateways {
    tls: SessionTls,
    /// The certificate, as PEM: what clients trust.
    pub ca_pem: String,
}

impl Gateways {
    /// A fresh self-signed certificate for `localhost`.
    pub fn new() -> Gateways {
        let (tls, ca_pem) = SessionTls::self_signed(&[SERVER_NAME]).expect("certificate");
        Gateways { tls, ca_pem }
    }

    /// Session settings on a free loopback port with these limits.
    pub fn settings(&self, limits: SessionLimits) -> SessionSettings {
        let tokens = StaticTokens::new().with(TOKEN, "player");
        let mut settings = SessionSettings::new(
            "127.0.0.1:0".parse().expect("addr"),
            self.tls.clone(),
            tokens,
        );
        settings.limits = limits;
        settings
    }

    /// Starts one more node of `cluster` that accepts clients over QUIC and over WebSocket on
    /// loopback: `wss://` with this certificate when `tls`, plain `ws://` otherwise.
    pub async fn add_websocket(
        &self,
        cluster: &mut Cluster,
        id: &str,
        registry: Registry,
        limits: SessionLimits,
        tls: bool,
    ) -> Node {
        let mut settings = self.settings(limits);
        settings.websocket = Some(WebSocketSettings {
            listen: "127.0.0.1:0".parse().expect("addr"),
            tls: tls.then(|| self.tls.clone()),
        });
        let config = cluster.config(id).sessions(settings);
        cluster.add_with(config, registry).await
    }

    /// Starts one more node of `cluster` that accepts clients.
    pub async fn add(
        &self,
        cluster: &mut Cluster,
        id: &str,
        registry: Registry,
        limits: SessionLimits,
    ) -> Node {
        let config = cluster.config(id).sessions(self.settings(limits));
        cluster.add_with(config, registry).await
    }

    /// A client config for these gateways, reconnecting quickly and pinging often.
    pub fn client(&self, servers: &[&Node]) -> ClientConfig {
        let addrs = servers
            .iter()
            .map(|n| n.session_addr().expect("node accepts clients"))
            .collect();
        let mut config = ClientConfig::new(addrs, SERVER_NAME, self.ca_pem.clone(), TOKEN);
        // Well inside the shortest idle timeout a test gives its gateways.
        config.keep_alive = Duration::from_millis(100);
        config.reconnect = Some(Reconnect {
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(200),
            attempts: 20,
        });
        config
    }
}

impl Default for Gateways {
    fn default() -> Self {
        Self::new()
    }
}

/// A client that writes whatever bytes it is given.
pub struct RawClient {
    /// The QUIC connection to the gateway, to read how the gateway closed it.
    pub conn: Connection,
    send: SendStream,
    recv: RecvStream,
    buf: BytesMut,
    codec: FrameCodec<ServerFrame>,
    _endpoint: Endpoint,
}

impl RawClient {
    /// Connects to `addr`; with `window`, the client takes at most that many unread bytes.
    pub async fn connect(addr: SocketAddr, ca_pem: &str, window: Option<u32>) -> RawClient {
        let mut config = client_quic_config(ca_pem).expect("client TLS");
        let mut transport = quinn::TransportConfig::default();
        transport.keep_alive_interval(None);
        if let Some(window) = window {
            transport
                .stream_receive_window(quinn::VarInt::from_u32(window))
                .receive_window(quinn::VarInt::from_u32(window));
        }
        config.transport_config(Arc::new(transport));
        let endpoint = Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
        let conn = endpoint
            .connect_with(config, addr, SERVER_NAME)
            .expect("connect")
            .await
            .expect("TLS handshake");
        let (send, recv) = conn.open_bi().await.expect("stream");
        RawClient {
            conn,
            send,
            recv,
            buf: BytesMut::new(),
            codec: FrameCodec::new(16 * 1024 * 1024),
            _endpoint: endpoint,
        }
    }

    /// Writes raw bytes.
    pub async fn bytes(&mut self, bytes: &[u8]) {
        self.send.write_all(bytes).await.expect("written");
    }

    /// Writes one well-formed frame.
    pub async fn frame(&mut self, frame: &ClientFrame) {
        let bytes = FrameCodec::<ClientFrame>::new(u32::MAX as usize)
            .encode_frame(frame)
            .expect("encodes");
        self.bytes(&bytes).await;
    }

    /// Writes a frame with this body, whatever it holds.
    pub async fn body(&mut self, body: &[u8]) {
        let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(body);
        self.bytes(&bytes).await;
    }

    /// The next frame from the gateway, or `None` once the stream ends.
    pub async fn next(&mut self) -> Option<ServerFrame> {
        loop {
            if let Ok(Some(frame)) = self.codec.decode(&mut self.buf) {
                return Some(frame);
            }
            match self.recv.read_chunk(64 * 1024, true).await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk.bytes),
                _ => return None,
            }
        }
    }

    /// Says Hello with the good token and returns the session's id.
    pub async fn hello(&mut self) -> SessionId {
        let hello = ClientFrame::Hello {
            version: PROTOCOL_VERSION,
            token: Bytes::from_static(TOKEN),
        };
        self.frame(&hello).await;
        match self.next().await {
            Some(ServerFrame::Welcome { session, .. }) => session,
            other => panic!("expected a welcome, got {other:?}"),
        }
    }

    /// Reads until the session ends; the code and reason the gateway gave, from its Closing
    /// frame or from the connection's close.
    pub async fn ended(mut self) -> (Option<CloseCode>, String) {
        while let Some(frame) = self.next().await {
            if let ServerFrame::Closing { code, reason } = frame {
                return (Some(code), reason);
            }
        }
        Self::close_reason(&self.conn).await
    }

    /// How the connection closed, without reading what is left on the stream.
    pub async fn close_reason(conn: &Connection) -> (Option<CloseCode>, String) {
        match conn.closed().await {
            ConnectionError::ApplicationClosed(close) => (
                CloseCode::from_u64(close.error_code.into_inner()),
                String::from_utf8_lossy(&close.reason).into_owned(),
            ),
            other => (None, other.to_string()),
        }
    }
}
