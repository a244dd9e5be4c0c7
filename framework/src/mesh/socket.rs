//! The UDP socket under the mesh's QUIC endpoint: where it comes from, and when it is free.
//!
//! A [`SocketFactory`] binds it: the operating system's by default, a simulated network's
//! in fault tests. quinn closes the socket from a background driver some time after the
//! endpoint is dropped; `Mesh::close` waits for the wrapper here to report that, so when
//! it returns the port is free and a restarted node can bind it again at once.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::sync::oneshot;

use crate::store::BoxFuture;

/// Binds the UDP socket a mesh endpoint runs on.
///
/// The default, [`OsSockets`], binds a real one. A network simulator (turmoil, for one)
/// supplies its own sockets here, so a whole cluster can run over simulated links, with
/// partitions and delays, on simulated time. The sockets implement quinn 0.11's
/// [`AsyncUdpSocket`]; the address a socket reports is the one the node publishes to its peers.
pub trait SocketFactory: Send + Sync + fmt::Debug {
    /// Binds a socket on `addr`; port 0 picks a free one.
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Arc<dyn AsyncUdpSocket>>>;
}

/// Binds operating-system UDP sockets, driven by tokio.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsSockets;

impl SocketFactory for OsSockets {
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Arc<dyn AsyncUdpSocket>>> {
        Box::pin(async move {
            let socket = std::net::UdpSocket::bind(addr)?;
            quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket)
        })
    }
}

/// A bound endpoint, its address, and the report that quinn has let go of its socket.
pub(crate) type BoundEndpoint = (quinn::Endpoint, SocketAddr, oneshot::Receiver<()>);

/// Binds a QUIC endpoint on `listen` over a tracked socket from `sockets`, serving with `server`.
pub(crate) async fn bind_endpoint(
    sockets: &dyn SocketFactory,
    listen: SocketAddr,
    server: quinn::ServerConfig,
) -> io::Result<BoundEndpoint> {
    let runtime = Arc::new(quinn::TokioRuntime);
    let (socket, released) = Tracked::new(sockets.bind(listen).await?);
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        runtime,
    )?;
    let local_addr = endpoint.local_addr()?;
    Ok((endpoint, local_addr, released))
}

/// Wraps a socket; the receiver returned by [`Tracked::new`] resolves once every
/// reference to the inner socket is gone.
pub(crate) struct Tracked {
    // Field order matters: the socket is dropped before the report is sent.
    inner: Arc<dyn AsyncUdpSocket>,
    _released: oneshot::Sender<()>,
}

impl fmt::Debug for Tracked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracked")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Tracked {
    pub fn new(inner: Arc<dyn AsyncUdpSocket>) -> (Arc<Self>, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (
            Arc::new(Self {
                inner,
                _released: tx,
            }),
            rx,
        )
    }
}

/// A poller that keeps the wrapper (and so the report) alive as long as it lives.
struct TrackedPoller {
    inner: Pin<Box<dyn UdpPoller>>,
    _owner: Arc<Tracked>,
}

impl fmt::Debug for TrackedPoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackedPoller").finish_non_exhaustive()
    }
}

impl UdpPoller for TrackedPoller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().inner.as_mut().poll_writable(cx)
    }
}

impl AsyncUdpSocket for Tracked {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        let inner = self.inner.clone().create_io_poller();
        Box::pin(TrackedPoller {
            inner,
            _owner: self,
        })
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
