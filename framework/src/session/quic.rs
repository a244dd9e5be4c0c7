//! The QUIC listener of game clients: one bidirectional stream per client (ALPN
//! [`super::wire::ALPN`]), length-delimited postcard frames each way, fed to the hub.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use quinn::{Connection, Endpoint, SendStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{Decoder, FramedRead};
use tracing::{debug, info};

use super::connection::{CLOSE_LINGER, Live, ReadError, Sessions};
use super::host::SessionHost;
use super::wire::{ClientFrame, CloseCode, Encoding, ServerFrame};
use super::{SessionError, SessionSettings};
use crate::mesh::OsSockets;
use crate::mesh::codec::FrameCodec;
use crate::mesh::socket::bind_endpoint;

/// The longest close reason put in a QUIC close frame (it must fit one packet).
const MAX_REASON: usize = 400;
/// How many kinds of client frame this gateway knows (the enum tags 0..KINDS).
const CLIENT_FRAME_KINDS: u32 = 5;

/// The bound QUIC endpoint of a gateway.
pub(super) struct QuicListener {
    local_addr: SocketAddr,
    endpoint: Mutex<Option<Endpoint>>,
    socket_released: Mutex<Option<oneshot::Receiver<()>>>,
}

impl QuicListener {
    /// Binds the endpoint; nothing is accepted until [`QuicListener::accept`] runs.
    pub async fn bind(settings: &SessionSettings) -> Result<QuicListener, SessionError> {
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
        Ok(QuicListener {
            local_addr,
            endpoint: Mutex::new(Some(endpoint)),
            socket_released: Mutex::new(Some(socket_released)),
        })
    }

    /// Where it is bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The loop that accepts clients until the node stops, unless the endpoint is closed.
    pub fn accept<H: SessionHost>(
        &self,
        node: &H,
        sessions: &Arc<Sessions>,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let endpoint = self.endpoint.lock().clone()?;
        info!(node = %node.id(), addr = %self.local_addr, "client listener open (QUIC)");
        Some(accept_loop(node.clone(), sessions.clone(), endpoint))
    }

    /// Closes the endpoint and waits for its connections to go.
    pub async fn close(&self) {
        let endpoint = self.endpoint.lock().take();
        if let Some(endpoint) = endpoint {
            endpoint.close(
                quinn::VarInt::from_u32(CloseCode::Shutdown.to_u32()),
                b"node stopped",
            );
            endpoint.wait_idle().await;
        }
    }

    /// Waits until the UDP socket is released (every connection handle is gone).
    pub async fn released(&self) {
        let released = self.socket_released.lock().take();
        if let Some(released) = released {
            let _ = released.await;
        }
    }
}

/// Accepts clients until the node stops.
async fn accept_loop<H: SessionHost>(node: H, sessions: Arc<Sessions>, endpoint: Endpoint) {
    loop {
        let incoming = tokio::select! {
            biased;
            () = sessions.stop.cancelled() => break,
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => break,
            },
        };
        let session = run_session(node.clone(), sessions.clone(), incoming);
        sessions.spawn_task(session);
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
async fn run_session<H: SessionHost>(node: H, sessions: Arc<Sessions>, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let limits = sessions.limits;
    let conn = match incoming.await {
        Ok(conn) => conn,
        Err(error) => {
            debug!(%remote, %error, "client refused: TLS handshake failed");
            return;
        }
    };
    let stream = tokio::select! {
        () = sessions.stop.cancelled() => return close_connection(&conn, CloseCode::Shutdown, "node shutting down"),
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
    let (live, out) = sessions.open(&node, Encoding::Postcard);
    debug!(session = %live.id, %remote, "client connected (QUIC)");
    let writer = tokio::spawn(write_frames(
        conn.clone(),
        send,
        out,
        live.clone(),
        sessions.clone(),
    ));
    let reader = FramedRead::new(recv, ClientDecoder::new(limits.max_frame));
    sessions.serve(&node, &live, reader).await;
    let _ = writer.await;
    debug!(session = %live.id, "session ended");
}

/// Writes queued frames to the client; once the session ends, tells the client why and closes.
async fn write_frames(
    conn: Connection,
    mut send: SendStream,
    mut out: mpsc::Receiver<Bytes>,
    live: Arc<Live>,
    sessions: Arc<Sessions>,
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
    let Some((code, reason)) = live.ending() else {
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
            if let Ok(bytes) = sessions.encode(Encoding::Postcard, &closing) {
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
