//! Real UDP sockets for the mesh that drop every datagram to and from one address on command:
//! a link that goes silent without either side closing it, as a dead switch port does.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use ferry::mesh::{OsSockets, SocketFactory};
use ferry::store::BoxFuture;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// Binds operating-system sockets whose traffic with one peer a test can cut and heal.
#[derive(Debug, Clone, Default)]
pub struct CutSockets {
    cut: Arc<Mutex<Option<SocketAddr>>>,
}

impl CutSockets {
    /// Drops every datagram to and from `peer` from now on.
    pub fn cut(&self, peer: SocketAddr) {
        *self.cut.lock().unwrap_or_else(PoisonError::into_inner) = Some(peer);
    }

    /// Lets traffic with the cut peer through again.
    pub fn heal(&self) {
        *self.cut.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn is_cut(cut: &Mutex<Option<SocketAddr>>, addr: SocketAddr) -> bool {
        *cut.lock().unwrap_or_else(PoisonError::into_inner) == Some(addr)
    }
}

impl SocketFactory for CutSockets {
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Arc<dyn AsyncUdpSocket>>> {
        Box::pin(async move {
            let inner = OsSockets.bind(addr).await?;
            let socket: Arc<dyn AsyncUdpSocket> = Arc::new(CutSocket {
                inner,
                cut: self.cut.clone(),
            });
            Ok(socket)
        })
    }
}

#[derive(Debug)]
struct CutSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    cut: Arc<Mutex<Option<SocketAddr>>>,
}

impl AsyncUdpSocket for CutSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        if CutSockets::is_cut(&self.cut, transmit.destination) {
            return Ok(());
        }
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.inner.poll_recv(cx, bufs, meta) {
                // A batch holding a datagram from the cut peer is dropped whole; QUIC recovers
                // whatever else was in it.
                Poll::Ready(Ok(n))
                    if meta[..n]
                        .iter()
                        .any(|m| CutSockets::is_cut(&self.cut, m.addr)) => {}
                other => return other,
            }
        }
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
