//! The mesh's UDP socket on turmoil's simulated network, so QUIC between nodes crosses links a
//! test can partition, hold and slow down, on simulated time.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use ferry::mesh::SocketFactory;
use ferry::store::BoxFuture;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

type Readable = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// Binds turmoil sockets for the simulated host whose address it was made with. Must be used
/// from that host's software.
#[derive(Debug, Clone, Copy)]
pub struct TurmoilSockets {
    host: IpAddr,
}

impl TurmoilSockets {
    /// Sockets of the host at `host`, the address its peers reach it at.
    pub fn new(host: IpAddr) -> Self {
        TurmoilSockets { host }
    }
}

impl SocketFactory for TurmoilSockets {
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Arc<dyn AsyncUdpSocket>>> {
        Box::pin(async move {
            // turmoil binds the wildcard address only; the socket reports the host's own address,
            // which is what the node publishes for its peers to dial.
            let wildcard = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port());
            let inner = Arc::new(turmoil::net::UdpSocket::bind(wildcard).await?);
            let port = inner.local_addr()?.port();
            let socket: Arc<dyn AsyncUdpSocket> = Arc::new(SimSocket {
                inner,
                addr: SocketAddr::new(self.host, port),
                readable: Mutex::new(None),
            });
            Ok(socket)
        })
    }
}

/// A turmoil socket as quinn sees it: one datagram per call, always writable (turmoil has no
/// send buffer to fill).
struct SimSocket {
    inner: Arc<turmoil::net::UdpSocket>,
    addr: SocketAddr,
    /// The wait for the next datagram, kept across polls.
    readable: Mutex<Option<Readable>>,
}

impl fmt::Debug for SimSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimSocket")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for SimSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        match self
            .inner
            .try_send_to(transmit.contents, transmit.destination)
        {
            Ok(_) => Ok(()),
            // No link to that address: like a real network, the datagram is lost, not refused.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let (Some(buf), Some(meta)) = (bufs.first_mut(), meta.first_mut()) else {
            return Poll::Ready(Ok(0));
        };
        let mut readable = self.readable.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match self.inner.try_recv_from(buf) {
                Ok((len, from)) => {
                    *meta = RecvMeta {
                        addr: from,
                        len,
                        stride: len,
                        ecn: None,
                        dst_ip: Some(self.addr.ip()),
                    };
                    return Poll::Ready(Ok(1));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            let wait = readable.get_or_insert_with(|| {
                let inner = self.inner.clone();
                Box::pin(async move { inner.readable().await })
            });
            let woke = ready!(wait.as_mut().poll(cx));
            *readable = None;
            woke?;
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}
