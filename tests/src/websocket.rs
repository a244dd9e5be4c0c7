//! A WebSocket client for tests that speaks the JSON protocol of docs/client-protocol.md frame by
//! frame, over `ws://` or `wss://` on loopback, so tests can send what no client library would.

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::sessions::{SERVER_NAME, TOKEN};

/// A byte stream a WebSocket runs on: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What the gateway sent: a frame, or the end of the connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// A JSON frame.
    Frame(Value),
    /// A binary message (never a frame of the protocol).
    Binary(Vec<u8>),
    /// The close frame's code and reason, or `None` when the connection ended without one.
    Closed(Option<(u16, String)>),
}

/// How a session ended, as the client saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// The `closing` frame, if one came.
    pub closing: Option<Value>,
    /// The WebSocket close code and reason, if a close frame came.
    pub close: Option<(u16, String)>,
}

impl Ended {
    /// The close code name of the `closing` frame.
    pub fn code(&self) -> Option<&str> {
        self.closing.as_ref()?.get("code")?.as_str()
    }
}

/// A raw JSON-over-WebSocket client.
pub struct WsClient {
    ws: WebSocketStream<Box<dyn Io>>,
}

impl WsClient {
    /// Connects to `ws://addr/`.
    pub async fn connect(addr: SocketAddr) -> WsClient {
        let tcp = TcpStream::connect(addr).await.expect("tcp connect");
        Self::upgrade(Box::new(tcp), &format!("ws://{addr}/")).await
    }

    /// Connects to `ws://addr/` with a TCP receive buffer of about `window` bytes, so a client
    /// that stops reading soon stops taking what the gateway writes.
    pub async fn connect_with_window(addr: SocketAddr, window: u32) -> WsClient {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(window).expect("receive buffer");
        let tcp = socket.connect(addr).await.expect("tcp connect");
        Self::upgrade(Box::new(tcp), &format!("ws://{addr}/")).await
    }

    /// Connects to `wss://localhost:port/`, trusting `ca_pem`.
    pub async fn connect_tls(addr: SocketAddr, ca_pem: &str) -> WsClient {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.expect("pem")).expect("root");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(Arc::new(roots))
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(addr).await.expect("tcp connect");
        let name = ServerName::try_from(SERVER_NAME).expect("name");
        let tls = connector.connect(name, tcp).await.expect("TLS handshake");
        let url = format!("wss://{SERVER_NAME}:{}/", addr.port());
        Self::upgrade(Box::new(tls), &url).await
    }

    async fn upgrade(stream: Box<dyn Io>, url: &str) -> WsClient {
        let (ws, _) = tokio_tungstenite::client_async(url, stream)
            .await
            .expect("WebSocket handshake");
        WsClient { ws }
    }

    /// Sends one text message.
    pub async fn text(&mut self, text: &str) {
        self.ws
            .send(Message::text(text.to_owned()))
            .await
            .expect("sent");
    }

    /// Sends one binary message.
    pub async fn binary(&mut self, bytes: Vec<u8>) {
        self.ws.send(Message::binary(bytes)).await.expect("sent");
    }

    /// Sends one frame.
    pub async fn send(&mut self, frame: Value) {
        self.text(&frame.to_string()).await;
    }

    /// Sends an input for `actor`.
    pub async fn input(&mut self, actor: &str, message: Value) {
        self.send(json!({"type": "input", "actor": actor, "message": message}))
            .await;
    }

    /// What the gateway sent next (pings are answered and skipped).
    pub async fn next(&mut self) -> Received {
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    return Received::Frame(serde_json::from_str(&text).expect("a JSON frame"));
                }
                Some(Ok(Message::Binary(bytes))) => return Received::Binary(bytes.to_vec()),
                Some(Ok(Message::Close(frame))) => {
                    return Received::Closed(
                        frame.map(|f| (u16::from(f.code), f.reason.to_string())),
                    );
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return Received::Closed(None),
            }
        }
    }

    /// The next frame; panics on the end of the connection.
    pub async fn frame(&mut self) -> Value {
        match self.next().await {
            Received::Frame(frame) => frame,
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// Says hello with the good token; returns the welcome.
    pub async fn hello(&mut self) -> Value {
        let token = std::str::from_utf8(TOKEN).expect("text token");
        self.send(json!({"type": "hello", "version": 1, "token": token}))
            .await;
        let welcome = self.frame().await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        welcome
    }

    /// Binds `actor` and waits for the gateway to say it is bound.
    pub async fn bind(&mut self, actor: &str) {
        self.send(json!({"type": "bind", "actor": actor})).await;
        let bound = self.frame().await;
        assert_eq!(bound, json!({"type": "bound", "actor": actor}));
    }

    /// Reads until the session ends.
    pub async fn ended(mut self) -> Ended {
        let mut closing = None;
        loop {
            match self.next().await {
                Received::Frame(frame) if frame["type"] == "closing" => closing = Some(frame),
                Received::Frame(_) | Received::Binary(_) => {}
                Received::Closed(close) => return Ended { closing, close },
            }
        }
    }
}
