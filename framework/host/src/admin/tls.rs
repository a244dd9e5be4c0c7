//! HTTPS for the admin endpoint (`admin_tls`): connections accepted on the TCP listener are
//! TLS sessions, with the node's own certificate, by the time the routes see them. Operators
//! check the endpoint against the cluster CA they already hold.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(5);

/// How many finished handshakes may wait for the server to take them.
const READY: usize = 16;

/// A connection whose handshake is done, and its peer.
type Accepted = (TlsStream<TcpStream>, SocketAddr);

/// A TCP listener that hands out TLS sessions. Each handshake runs on a task of its own, so a
/// client that connects and stays silent holds up no other (a kubelet's probe among them).
pub struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<Accepted>,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    /// Serves `config`'s certificate on `tcp`.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let addr = tcp.local_addr()?;
        let (done, ready) = mpsc::channel(READY);
        let accepting = tokio::spawn(accept(tcp, TlsAcceptor::from(config), done));
        Ok(TlsListener {
            addr,
            ready,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        // The server is done with the listener: stop taking connections.
        self.accepting.abort();
    }
}

/// Takes connections on `tcp` and runs each handshake, passing those that succeed to `done`.
async fn accept(tcp: TcpListener, acceptor: TlsAcceptor, done: mpsc::Sender<Accepted>) {
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: wait a little rather than spin.
                tracing::warn!(%error, "the admin endpoint could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let done = done.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    // An error means the endpoint closed meanwhile: the connection ends.
                    let _ = done.send((tls, peer)).await;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "an admin TLS handshake failed (a plain HTTP client?)");
                }
                Err(_) => tracing::debug!(%peer, "an admin TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> Accepted {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task holds a sender until it is aborted with this listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use ferry::NodeId;
    use ferry::mesh::ClusterCa;

    #[tokio::test]
    async fn a_silent_client_holds_up_no_other_handshake() {
        let ca = ClusterCa::generate().expect("a CA");
        let node = NodeId::new("a").expect("an id");
        let server = ca.node_tls(&node).expect("a node certificate");
        let config = server.https_server_config().expect("HTTPS config");
        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let mut listener = TlsListener::new(tcp, Arc::new(config)).expect("a listener");
        let addr = listener.local_addr().expect("its address");
        let (client, name) =
            ferry::mesh::https_client_config(ca.cert_pem(), Some(&node)).expect("client TLS");
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));

        // Connected first, silent until the second has been served.
        let silent = TcpStream::connect(addr).await.expect("connects");
        let second = TcpStream::connect(addr).await.expect("connects");
        let (client, (_, peer)) =
            tokio::join!(connector.connect(name.clone(), second), listener.accept());
        let client = client.expect("the second handshake passes");
        assert_eq!(peer, client.get_ref().0.local_addr().expect("its address"));
        // The silent one was waited for all along: it can still finish its handshake.
        let (client, (_, peer)) = tokio::join!(connector.connect(name, silent), listener.accept());
        let client = client.expect("the first handshake passes too");
        assert_eq!(peer, client.get_ref().0.local_addr().expect("its address"));
    }
}
