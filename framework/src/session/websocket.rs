//! The WebSocket listener of game clients: the frames of `json`, one per text message, over
//! `wss://` with the gateway's certificate, or plain `ws://` on loopback for development. Each
//! connection is a session of the hub, like a QUIC one: the same machine, limits and close codes
//! (the WebSocket close code is 4000 plus the session's).
//!
//! Browsers cannot send pings, but they answer them: the gateway pings each client every third of
//! the idle timeout, and drops a client it has heard nothing from (not even a pong) for that long.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, Stream, StreamExt};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tracing::{debug, info};

use super::connection::{CLOSE_LINGER, Live, ReadError, Sessions};
use super::host::SessionHost;
use super::wire::{ClientFrame, CloseCode, Encoding, ServerFrame};
use super::{SessionError, WebSocketSettings};

/// WebSocket close codes 4000-4999 are the application's: ours are 4000 plus the session's.
const CLOSE_BASE: u16 = 4000;
/// The longest close reason a WebSocket close frame carries (125 bytes less the code).
const MAX_REASON: usize = 123;

/// The bound TCP listener of a gateway's WebSocket clients.
pub(super) struct WebSocketListener {
    local_addr: SocketAddr,
    listener: Mutex<Option<TcpListener>>,
    tls: Option<TlsAcceptor>,
}

impl WebSocketListener {
    /// Binds the listener; nothing is accepted until [`WebSocketListener::accept`] runs.
    pub async fn bind(settings: &WebSocketSettings) -> Result<WebSocketListener, SessionError> {
        let tls = match &settings.tls {
            Some(tls) => Some(TlsAcceptor::from(Arc::new(tls.websocket_server_config()?))),
            None if settings.listen.ip().is_loopback() => None,
            None => {
                return Err(SessionError::WebSocket(format!(
                    "plain ws:// on {} would carry tokens in the clear; listen on a loopback \
                     address for development, or give a certificate for wss://",
                    settings.listen
                )));
            }
        };
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| SessionError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| SessionError::Bind {
            addr: settings.listen,
            source,
        })?;
        Ok(WebSocketListener {
            local_addr,
            listener: Mutex::new(Some(listener)),
            tls,
        })
    }

    /// Where it is bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The loop that accepts clients until the node stops (it owns the listener, so the port is
    /// free once it has ended).
    pub fn accept<H: SessionHost>(
        &self,
        node: &H,
        sessions: &Arc<Sessions>,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let listener = self.listener.lock().take()?;
        let scheme = if self.tls.is_some() { "wss" } else { "ws" };
        info!(node = %node.id(), addr = %self.local_addr, "client listener open ({scheme}://)");
        Some(accept_loop(
            node.clone(),
            sessions.clone(),
            listener,
            self.tls.clone(),
        ))
    }
}

async fn accept_loop<H: SessionHost>(
    node: H,
    sessions: Arc<Sessions>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
) {
    loop {
        let (tcp, remote) = tokio::select! {
            biased;
            () = sessions.stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    debug!(%error, "a WebSocket client could not be accepted");
                    continue;
                }
            },
        };
        let session = run_session(node.clone(), sessions.clone(), tcp, remote, tls.clone());
        sessions.spawn_task(session);
    }
}

/// Runs one client's session from its TLS and WebSocket handshakes to its end.
async fn run_session<H: SessionHost>(
    node: H,
    sessions: Arc<Sessions>,
    tcp: TcpStream,
    remote: SocketAddr,
    tls: Option<TlsAcceptor>,
) {
    let _ = tcp.set_nodelay(true);
    match tls {
        Some(acceptor) => {
            match tokio::time::timeout(sessions.limits.auth_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => serve(node, sessions, stream, remote).await,
                Ok(Err(error)) => debug!(%remote, %error, "client refused: TLS handshake failed"),
                Err(_) => debug!(%remote, "client refused: no TLS handshake in time"),
            }
        }
        None => serve(node, sessions, tcp, remote).await,
    }
}

async fn serve<H: SessionHost, S>(node: H, sessions: Arc<Sessions>, stream: S, remote: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = sessions.limits;
    let config = WebSocketConfig::default()
        .max_message_size(Some(limits.max_frame))
        .max_frame_size(Some(limits.max_frame));
    let upgrade = tokio_tungstenite::accept_async_with_config(stream, Some(config));
    let ws = match tokio::time::timeout(limits.auth_timeout, upgrade).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(error)) => return debug!(%remote, %error, "WebSocket handshake failed"),
        Err(_) => return debug!(%remote, "client refused: no WebSocket handshake in time"),
    };
    let (sink, stream) = ws.split();
    let (live, out) = sessions.open(&node, Encoding::Json);
    debug!(session = %live.id, %remote, "client connected (WebSocket)");
    let writer = tokio::spawn(write_frames(
        sink,
        out,
        live.clone(),
        sessions.clone(),
        limits.idle_timeout,
    ));
    // Fused: the frames are read on after the session ended, also when they had ended first.
    let mut frames = Box::pin(read_frames(stream, limits.idle_timeout, limits.max_frame).fuse());
    sessions.serve(&node, &live, &mut frames).await;
    let _ = writer.await;
    // Read on until the client answers the close: input left unread would reset the connection
    // and could cut off the reason before the client read it.
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        while frames.next().await.is_some() {}
    })
    .await;
    debug!(session = %live.id, "session ended");
}

/// The client's frames: one a text message; pings and pongs are only signs of life.
fn read_frames<S>(
    stream: futures_util::stream::SplitStream<WebSocketStream<S>>,
    idle: Duration,
    max_frame: usize,
) -> impl Stream<Item = Result<ClientFrame, ReadError>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    futures_util::stream::unfold(stream, move |mut stream| async move {
        loop {
            let Ok(next) = tokio::time::timeout(idle, stream.next()).await else {
                let silent = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("nothing heard from the client for {idle:?}"),
                );
                return Some((Err(ReadError::Io(silent)), stream));
            };
            let frame = match next? {
                Ok(Message::Text(text)) => super::json::client_frame(&text)
                    .map_err(|(code, reason)| ReadError::Bad { code, reason }),
                Ok(Message::Binary(_)) => Err(ReadError::Bad {
                    code: CloseCode::Malformed,
                    reason: "a binary message is no frame; send each frame as one JSON text \
                             message"
                        .to_owned(),
                }),
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                Ok(Message::Close(_)) | Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => {
                    return None;
                }
                Err(WsError::Capacity(error)) => Err(ReadError::Bad {
                    code: CloseCode::TooLarge,
                    reason: format!(
                        "a message over the {max_frame}-byte limit ({error}); send smaller inputs"
                    ),
                }),
                Err(error) => Err(ReadError::Io(std::io::Error::other(error.to_string()))),
            };
            return Some((frame, stream));
        }
    })
}

/// A queued frame (JSON text from `Sessions::encode`) as a WebSocket message.
fn text(bytes: Bytes) -> Message {
    match Utf8Bytes::try_from(bytes) {
        Ok(text) => Message::Text(text),
        // The hub writes JSON frames as UTF-8 only: this is never taken.
        Err(_) => Message::Text(Utf8Bytes::from_static("{}")),
    }
}

/// Writes queued frames to the client and pings it when idle; once the session ends, tells the
/// client why (a `closing` frame, then the close frame) and closes.
async fn write_frames<S>(
    mut sink: SplitSink<WebSocketStream<S>, Message>,
    mut out: mpsc::Receiver<Bytes>,
    live: Arc<Live>,
    sessions: Arc<Sessions>,
    idle: Duration,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut ping = tokio::time::interval(idle / 3);
    ping.tick().await;
    loop {
        let message = tokio::select! {
            biased;
            bytes = out.recv() => match bytes {
                Some(bytes) => text(bytes),
                None => break,
            },
            () = live.ended.cancelled() => break,
            _ = ping.tick() => Message::Ping(Bytes::new()),
        };
        // A message is never cut: once the session has ended, a client gets a moment to read
        // the rest of it, and one that does not read is dropped.
        let cut = async {
            live.ended.cancelled().await;
            tokio::time::sleep(CLOSE_LINGER).await;
        };
        tokio::select! {
            sent = sink.send(message) => if sent.is_err() { return },
            () = cut => return,
        }
    }
    let Some((code, reason)) = live.ending() else {
        return;
    };
    let goodbye = async {
        while let Ok(bytes) = out.try_recv() {
            sink.feed(text(bytes)).await?;
        }
        let closing = ServerFrame::Closing {
            code,
            reason: reason.clone(),
        };
        if let Ok(bytes) = sessions.encode(Encoding::Json, &closing) {
            sink.feed(text(bytes)).await?;
        }
        let frame = CloseFrame {
            code: (CLOSE_BASE + code.to_u32() as u16).into(),
            reason: Utf8Bytes::from(truncated(&reason, MAX_REASON).to_owned()),
        };
        sink.send(Message::Close(Some(frame))).await
    };
    let _ = tokio::time::timeout(CLOSE_LINGER, goodbye).await;
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plain_websocket_is_refused_off_loopback_and_bound_on_it() {
        let off = WebSocketSettings {
            listen: "0.0.0.0:0".parse().unwrap(),
            tls: None,
        };
        assert!(matches!(
            WebSocketListener::bind(&off).await,
            Err(SessionError::WebSocket(reason)) if reason.contains("loopback")
        ));
        let on = WebSocketSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: None,
        };
        let listener = WebSocketListener::bind(&on).await.unwrap();
        assert_ne!(listener.local_addr().port(), 0);
    }
}
