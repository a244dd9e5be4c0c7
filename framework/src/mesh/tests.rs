//! Mesh tests over real QUIC on 127.0.0.1.
//!
//! Every test waits on events (a peer becoming ready, a frame arriving, a connection
//! closing); the only clock is an outer guard that fails a test that hangs.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::handshake::{Hello, Wire};
use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum TestFrame {
    Seq(u32),
    Blob(Vec<u8>),
    /// A bulk frame: its number, and bytes to make it large.
    Bulk(u32, Vec<u8>),
}

type Rx = mpsc::Receiver<Inbound<TestFrame>>;

fn node(id: &str) -> NodeId {
    NodeId::new(id).unwrap()
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Fails a test that hangs instead of letting it run forever; never asserts on timing.
async fn guard<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the test hung: an awaited event never came")
}

fn config(ca: &ClusterCa, id: &str, listen: SocketAddr) -> MeshConfig {
    let mut config = MeshConfig::new(node(id), listen, ca.node_tls(&node(id)).unwrap());
    config.reconnect_min = Duration::from_millis(20);
    config.reconnect_max = Duration::from_millis(300);
    config.keep_alive = Duration::from_millis(500);
    config.idle_timeout = Duration::from_secs(5);
    // Loopback: keeps close() short when a peer was redialling a node already gone.
    config.initial_rtt = Duration::from_millis(10);
    config
}

async fn start(ca: &ClusterCa, id: &str) -> (Mesh<TestFrame>, Rx) {
    Mesh::bind(config(ca, id, loopback())).await.unwrap()
}

async fn take(rx: &mut Rx, n: usize) -> Vec<Inbound<TestFrame>> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        got.push(rx.recv().await.expect("the inbound stream ended early"));
    }
    got
}

fn send_seq(mesh: &Mesh<TestFrame>, to: &str, range: std::ops::Range<u32>) {
    for n in range {
        mesh.send(&node(to), TestFrame::Seq(n)).unwrap();
    }
}

/// The sequence numbers each sender's frames carried, in arrival order.
fn by_sender(frames: Vec<Inbound<TestFrame>>) -> HashMap<String, Vec<u32>> {
    let mut out: HashMap<String, Vec<u32>> = HashMap::new();
    for f in frames {
        match f.frame {
            TestFrame::Seq(n) => out.entry(f.from.as_str().to_owned()).or_default().push(n),
            other => panic!("unexpected frame {other:?}"),
        }
    }
    out
}

fn peer(mesh: &Mesh<TestFrame>, id: &str) -> PeerInfo {
    mesh.peers()
        .into_iter()
        .find(|p| p.node.as_str() == id)
        .unwrap_or_else(|| panic!("{id} is not a peer of {}", mesh.node()))
}

#[tokio::test]
async fn two_nodes_exchange_frames_in_order_both_ways() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, mut a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;
        // Only a knows where b is; b learns a when a connects.
        a.add_peer(node("b"), b.local_addr()).unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        b.wait_ready(&node("a")).await.unwrap();

        send_seq(&a, "b", 0..2000);
        send_seq(&b, "a", 0..2000);
        let at_b = by_sender(take(&mut b_rx, 2000).await);
        let at_a = by_sender(take(&mut a_rx, 2000).await);
        assert_eq!(at_b["a"], (0..2000).collect::<Vec<_>>());
        assert_eq!(at_a["b"], (0..2000).collect::<Vec<_>>());

        let info = peer(&b, "a");
        assert_eq!(info.state, PeerState::Ready);
        assert_eq!(info.direction, Some(Direction::Accepted));
        assert_eq!(info.addr, Some(a.local_addr()));

        a.close().await;
        b.close().await;
        // After close the inbound streams end.
        assert!(a_rx.recv().await.is_none());
        assert!(b_rx.recv().await.is_none());
    })
    .await;
}

#[tokio::test]
async fn an_unserved_mesh_holds_frames_until_served_then_serves_them_in_order() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, _a_rx) = start(&ca, "a").await;
        let b = Mesh::<TestFrame>::bind_unserved(config(&ca, "b", loopback()))
            .await
            .unwrap();
        a.add_peer(node("b"), b.local_addr()).unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        send_seq(&a, "b", 0..2000);

        let (tx, mut rx) = mpsc::unbounded_channel();
        assert!(b.serve(move |inbound| {
            let _ = tx.send(inbound);
        }));
        assert!(!b.serve(|_| {}), "a mesh is served once");
        assert!(!a.serve(|_| {}), "a queued mesh is not served");
        send_seq(&a, "b", 2000..4000);
        let mut got = Vec::new();
        while got.len() < 4000 {
            got.push(rx.recv().await.expect("served frames ended early"));
        }
        assert_eq!(by_sender(got)["a"], (0..4000).collect::<Vec<_>>());

        a.close().await;
        b.close().await;
        assert!(
            rx.recv().await.is_none(),
            "closing drops the function that served"
        );
    })
    .await;
}

#[tokio::test]
async fn three_nodes_exchange_frames_in_order_per_sender() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let ids = ["n1", "n2", "n3"];
        let mut nodes = Vec::new();
        for id in ids {
            nodes.push(start(&ca, id).await);
        }
        for (i, (mesh, _)) in nodes.iter().enumerate() {
            for (j, (other, _)) in nodes.iter().enumerate() {
                if i != j {
                    mesh.add_peer(node(ids[j]), other.local_addr()).unwrap();
                }
            }
        }
        for (i, (mesh, _)) in nodes.iter().enumerate() {
            for (j, id) in ids.iter().enumerate() {
                if i != j {
                    mesh.wait_ready(&node(id)).await.unwrap();
                }
            }
        }
        for (i, (mesh, _)) in nodes.iter().enumerate() {
            for (j, id) in ids.iter().enumerate() {
                if i != j {
                    send_seq(mesh, id, 0..500);
                }
            }
        }
        for (i, (_, rx)) in nodes.iter_mut().enumerate() {
            let got = by_sender(take(rx, 1000).await);
            for (j, id) in ids.iter().enumerate() {
                if i != j {
                    assert_eq!(got[*id], (0..500).collect::<Vec<_>>(), "{id} -> {}", ids[i]);
                }
            }
        }
        for (mesh, _) in &nodes {
            mesh.close().await;
        }
    })
    .await;
}

#[tokio::test]
async fn simultaneous_dial_keeps_the_connection_dialled_by_the_lower_node() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, mut a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;
        // Both dial before either task runs: on this single-threaded runtime the two
        // dials are in flight at once.
        a.add_peer(node("b"), b.local_addr()).unwrap();
        b.add_peer(node("a"), a.local_addr()).unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        b.wait_ready(&node("a")).await.unwrap();

        // Frames flow both ways, which also means both sides hold the same connection.
        send_seq(&a, "b", 0..100);
        send_seq(&b, "a", 0..100);
        assert_eq!(
            by_sender(take(&mut b_rx, 100).await)["a"],
            (0..100).collect::<Vec<_>>()
        );
        assert_eq!(
            by_sender(take(&mut a_rx, 100).await)["b"],
            (0..100).collect::<Vec<_>>()
        );

        let at_a = peer(&a, "b");
        let at_b = peer(&b, "a");
        assert_eq!(at_a.direction, Some(Direction::Dialled));
        assert_eq!(at_b.direction, Some(Direction::Accepted));
        assert_eq!(
            (at_a.links, at_b.links),
            (1, 1),
            "exactly one connection came up"
        );

        a.close().await;
        b.close().await;
    })
    .await;
}

/// A bare QUIC client, to behave in ways a mesh node never would.
struct RawClient {
    endpoint: quinn::Endpoint,
}

impl RawClient {
    fn new(crypto: rustls::ClientConfig) -> Self {
        let mut endpoint = quinn::Endpoint::client(loopback()).unwrap();
        let quic = QuicClientConfig::try_from(crypto).unwrap();
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        Self { endpoint }
    }

    /// A client holding a valid certificate of the cluster for `id`.
    fn member(ca: &ClusterCa, id: &str) -> Self {
        Self::new(ca.node_tls(&node(id)).unwrap().client_config().unwrap())
    }

    /// Connects and returns how the connection ended, whether during or after the handshake.
    async fn refused_by(&self, server: &Mesh<TestFrame>) -> quinn::ConnectionError {
        let connecting = self
            .endpoint
            .connect(server.local_addr(), &node_dns_name(server.node()))
            .unwrap();
        match connecting.await {
            Err(e) => e,
            Ok(conn) => conn.closed().await,
        }
    }

    async fn connect(&self, server: &Mesh<TestFrame>) -> quinn::Connection {
        self.endpoint
            .connect(server.local_addr(), &node_dns_name(server.node()))
            .unwrap()
            .await
            .unwrap()
    }

    async fn close(self) {
        self.endpoint
            .close(quinn::VarInt::from_u32(0), b"test done");
        self.endpoint.wait_idle().await;
    }
}

fn client_config_with(ca_pem: &str, client_cert: Option<&NodeCert>) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client_cert {
        Some(cert) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.cert_pem().as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(cert.key_pem().as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![tls::ALPN.to_vec()];
    config
}

fn is_tls_refusal(e: &quinn::ConnectionError) -> bool {
    let code = match e {
        quinn::ConnectionError::ConnectionClosed(c) => c.error_code,
        quinn::ConnectionError::TransportError(t) => t.code,
        _ => return false,
    };
    (0x100..=0x1ff).contains(&u64::from(code))
}

/// Checks that `a` and `b` still exchange frames after something was refused.
async fn still_works(a: &Mesh<TestFrame>, b: &Mesh<TestFrame>, b_rx: &mut Rx) {
    a.add_peer(node("b"), b.local_addr()).unwrap();
    a.wait_ready(&node("b")).await.unwrap();
    send_seq(a, "b", 0..50);
    assert_eq!(
        by_sender(take(b_rx, 50).await)["a"],
        (0..50).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_client_with_a_certificate_from_another_ca_is_refused() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, _a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;

        let foreign = ClusterCa::generate()
            .unwrap()
            .issue_node(&node("a"))
            .unwrap();
        let client = RawClient::new(client_config_with(ca.cert_pem(), Some(&foreign)));
        let ended = client.refused_by(&b).await;
        assert!(
            is_tls_refusal(&ended),
            "expected a TLS refusal, got {ended}"
        );
        assert!(b.peers().is_empty(), "no peer entry for a refused client");
        client.close().await;

        still_works(&a, &b, &mut b_rx).await;
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, _a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;

        let client = RawClient::new(client_config_with(ca.cert_pem(), None));
        let ended = client.refused_by(&b).await;
        assert!(
            is_tls_refusal(&ended),
            "expected a TLS refusal, got {ended}"
        );
        assert!(b.peers().is_empty());
        client.close().await;

        still_works(&a, &b, &mut b_rx).await;
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_node_dialling_a_server_of_another_cluster_does_not_connect() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let other = ClusterCa::generate().unwrap();
        let (a, _a_rx) = start(&ca, "a").await;
        let (b, _b_rx) = start(&other, "b").await;
        a.add_peer(node("b"), b.local_addr()).unwrap();
        // The dial fails in the TLS handshake and the peer goes to backoff.
        let mut status = a.shared.status(&node("b")).unwrap();
        status
            .wait_for(|s| s.state == PeerState::Backoff)
            .await
            .unwrap();
        assert_eq!(peer(&a, "b").links, 0);
        assert!(b.peers().is_empty());
        a.close().await;
        b.close().await;
    })
    .await;
}

/// How the connection `conn` was closed by the mesh.
async fn closed_with(conn: &quinn::Connection) -> Option<CloseCode> {
    CloseCode::of(&conn.closed().await)
}

async fn raw_stream(conn: &quinn::Connection, bytes: &[u8]) -> quinn::SendStream {
    let mut send = conn.open_uni().await.unwrap();
    send.write_all(bytes).await.unwrap();
    send
}

fn hello_bytes(id: &str) -> bytes::Bytes {
    FrameCodec::<Wire<TestFrame>>::new(DEFAULT_MAX_FRAME)
        .encode_frame(&Wire::Hello(Hello::new(node(id), 7)))
        .unwrap()
}

#[tokio::test]
async fn bad_first_frames_close_that_connection_only() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, mut a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;
        still_works(&a, &b, &mut b_rx).await;
        let client = RawClient::member(&ca, "intruder");

        // Garbage where the hello should be: a 3-byte body that is no valid frame.
        let conn = client.connect(&b).await;
        let _s = raw_stream(&conn, &[0, 0, 0, 3, 0xff, 0xff, 0xff]).await;
        assert_eq!(closed_with(&conn).await, Some(CloseCode::Malformed));

        // A length prefix over the limit.
        let conn = client.connect(&b).await;
        let _s = raw_stream(&conn, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await;
        assert_eq!(closed_with(&conn).await, Some(CloseCode::TooLarge));

        // An application frame before the hello.
        let data = FrameCodec::<Wire<TestFrame>>::new(64)
            .encode_frame(&Wire::Frame(TestFrame::Seq(1)))
            .unwrap();
        let conn = client.connect(&b).await;
        let _s = raw_stream(&conn, &data).await;
        assert_eq!(closed_with(&conn).await, Some(CloseCode::Unexpected));

        // A hello naming a node the certificate does not prove.
        let conn = client.connect(&b).await;
        let _s = raw_stream(&conn, &hello_bytes("a")).await;
        assert_eq!(closed_with(&conn).await, Some(CloseCode::WrongNode));

        // A hello of another protocol version.
        let newer = Hello {
            version: super::PROTOCOL_VERSION + 1,
            ..Hello::new(node("intruder"), 7)
        };
        let newer = FrameCodec::<Wire<TestFrame>>::new(DEFAULT_MAX_FRAME)
            .encode_frame(&Wire::Hello(newer))
            .unwrap();
        let conn = client.connect(&b).await;
        let _s = raw_stream(&conn, &newer).await;
        assert_eq!(closed_with(&conn).await, Some(CloseCode::Version));

        // The stream ends before the hello.
        let conn = client.connect(&b).await;
        let mut s = raw_stream(&conn, &[0, 0]).await;
        s.finish().unwrap();
        assert_eq!(closed_with(&conn).await, Some(CloseCode::StreamEnded));

        // a was never disturbed: its link to b still carries frames both ways.
        assert_eq!(peer(&b, "a").links, 1);
        send_seq(&a, "b", 50..60);
        send_seq(&b, "a", 0..10);
        assert_eq!(
            by_sender(take(&mut b_rx, 10).await)["a"],
            (50..60).collect::<Vec<_>>()
        );
        assert_eq!(
            by_sender(take(&mut a_rx, 10).await)["b"],
            (0..10).collect::<Vec<_>>()
        );
        assert!(b.peers().iter().all(|p| p.node.as_str() != "intruder"));

        client.close().await;
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn bad_frames_after_the_handshake_close_that_connection_only() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, mut a_rx) = start(&ca, "a").await;
        let mut b_config = config(&ca, "b", loopback());
        b_config.max_frame = 1024;
        let (b, mut b_rx) = Mesh::<TestFrame>::bind(b_config).await.unwrap();
        still_works(&a, &b, &mut b_rx).await;
        let client = RawClient::member(&ca, "intruder");

        for (round, (garbage, expected)) in [
            (vec![0, 0, 0, 2, 0xff, 0xff], CloseCode::Malformed),
            (vec![0, 0, 0x07, 0xd0], CloseCode::TooLarge),
            (hello_bytes("intruder").to_vec(), CloseCode::Unexpected),
        ]
        .into_iter()
        .enumerate()
        {
            let conn = client.connect(&b).await;
            let mut send = raw_stream(&conn, &hello_bytes("intruder")).await;
            // The welcome proves b took the connection.
            let recv = conn.accept_uni().await.unwrap();
            let mut reader =
                tokio_util::codec::FramedRead::new(recv, FrameCodec::<Wire<TestFrame>>::new(1024));
            use futures_util::StreamExt;
            match reader.next().await {
                Some(Ok(Wire::Welcome(w))) => assert_eq!(w.node, node("b")),
                other => panic!("expected a welcome, got {other:?}"),
            }
            // One good frame first (numbered past the last round's, or it is a repeat), then
            // the bad bytes.
            let codec = FrameCodec::<Wire<TestFrame>>::new(1024);
            let resume = codec.encode_frame(&Wire::Resume(round as u64 + 1)).unwrap();
            let good = codec
                .encode_frame(&Wire::Frame(TestFrame::Seq(99)))
                .unwrap();
            send.write_all(&resume).await.unwrap();
            send.write_all(&good).await.unwrap();
            let got = take(&mut b_rx, 1).await;
            assert_eq!(got[0].from, node("intruder"));
            send.write_all(&garbage).await.unwrap();
            assert_eq!(closed_with(&conn).await, Some(expected));
        }

        // a is untouched.
        send_seq(&a, "b", 50..60);
        send_seq(&b, "a", 0..10);
        assert_eq!(
            by_sender(take(&mut b_rx, 10).await)["a"],
            (50..60).collect::<Vec<_>>()
        );
        assert_eq!(
            by_sender(take(&mut a_rx, 10).await)["b"],
            (0..10).collect::<Vec<_>>()
        );
        assert_eq!(peer(&b, "a").links, 1);

        client.close().await;
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_restarted_peer_is_redialled_and_frames_flow_again() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, mut a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;
        let b_addr = b.local_addr();
        a.add_peer(node("b"), b_addr).unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        send_seq(&a, "b", 0..10);
        assert_eq!(
            by_sender(take(&mut b_rx, 10).await)["a"],
            (0..10).collect::<Vec<_>>()
        );

        b.close().await;
        assert!(b_rx.recv().await.is_none());
        // close() returned, so the port is free for the new incarnation.
        let (b2, mut b2_rx) = Mesh::<TestFrame>::bind(config(&ca, "b", b_addr))
            .await
            .unwrap();
        b2.wait_ready(&node("a")).await.unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        assert_eq!(peer(&a, "b").links, 2);

        send_seq(&a, "b", 10..20);
        send_seq(&b2, "a", 0..10);
        assert_eq!(
            by_sender(take(&mut b2_rx, 10).await)["a"],
            (10..20).collect::<Vec<_>>()
        );
        assert_eq!(
            by_sender(take(&mut a_rx, 10).await)["b"],
            (0..10).collect::<Vec<_>>()
        );

        a.close().await;
        b2.close().await;
    })
    .await;
}

#[tokio::test]
async fn send_reports_unknown_peers_oversized_frames_and_a_closed_mesh() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let mut config = config(&ca, "a", loopback());
        config.max_frame = 64;
        let (a, _rx) = Mesh::<TestFrame>::bind(config).await.unwrap();
        assert!(matches!(
            a.send(&node("nobody"), TestFrame::Seq(1)),
            Err(MeshError::UnknownPeer(_))
        ));
        assert!(matches!(
            a.add_peer(node("a"), a.local_addr()),
            Err(MeshError::SelfPeer(_))
        ));
        // An unreachable peer still queues frames.
        a.add_peer(node("b"), "127.0.0.1:9".parse().unwrap())
            .unwrap();
        assert!(a.send(&node("b"), TestFrame::Seq(1)).is_ok());
        assert!(matches!(
            a.send(&node("b"), TestFrame::Blob(vec![0; 100])),
            Err(MeshError::Encode(EncodeError::TooLarge { max: 64 }))
        ));
        assert_eq!(peer(&a, "b").queued, 1);
        a.close().await;
        assert!(matches!(
            a.send(&node("b"), TestFrame::Seq(2)),
            Err(MeshError::Closed)
        ));
        assert!(matches!(
            a.wait_ready(&node("b")).await,
            Err(MeshError::Closed)
        ));
    })
    .await;
}

#[tokio::test]
async fn bind_refuses_credentials_of_another_node_and_bad_settings() {
    let ca = ClusterCa::generate().unwrap();
    let mut wrong = config(&ca, "a", loopback());
    wrong.tls = ca.node_tls(&node("b")).unwrap();
    assert!(matches!(
        Mesh::<TestFrame>::bind(wrong).await,
        Err(MeshError::Tls(TlsError::WrongNode { .. }))
    ));
    let mut slow = config(&ca, "a", loopback());
    slow.keep_alive = slow.idle_timeout;
    assert!(matches!(
        Mesh::<TestFrame>::bind(slow).await,
        Err(MeshError::Config(_))
    ));
}

/// Binds real sockets that drop every datagram to and from one address while it is cut: a
/// link that goes silent without either side closing it.
#[derive(Debug, Clone, Default)]
struct Cuttable {
    cut: Arc<parking_lot::Mutex<Option<SocketAddr>>>,
}

impl Cuttable {
    fn cut(&self, peer: SocketAddr) {
        *self.cut.lock() = Some(peer);
    }

    fn heal(&self) {
        *self.cut.lock() = None;
    }
}

impl SocketFactory for Cuttable {
    fn bind(
        &self,
        addr: SocketAddr,
    ) -> crate::store::BoxFuture<'_, std::io::Result<Arc<dyn quinn::AsyncUdpSocket>>> {
        Box::pin(async move {
            let inner = OsSockets.bind(addr).await?;
            let socket: Arc<dyn quinn::AsyncUdpSocket> = Arc::new(CutSocket {
                inner,
                cut: self.cut.clone(),
            });
            Ok(socket)
        })
    }
}

#[derive(Debug)]
struct CutSocket {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    cut: Arc<parking_lot::Mutex<Option<SocketAddr>>>,
}

impl quinn::AsyncUdpSocket for CutSocket {
    fn create_io_poller(self: Arc<Self>) -> std::pin::Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit<'_>) -> std::io::Result<()> {
        if *self.cut.lock() == Some(transmit.destination) {
            return Ok(());
        }
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
        bufs: &mut [std::io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> std::task::Poll<std::io::Result<usize>> {
        loop {
            match self.inner.poll_recv(cx, bufs, meta) {
                // A batch with a datagram from the cut peer is dropped whole; QUIC recovers
                // whatever else was in it.
                std::task::Poll::Ready(Ok(n))
                    if self
                        .cut
                        .lock()
                        .is_some_and(|c| meta[..n].iter().any(|m| m.addr == c)) => {}
                other => return other,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
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

/// Two nodes whose link a notices dead within a second; a's datagrams to and from b can be cut.
/// a dials b.
async fn cuttable_pair(ca: &ClusterCa) -> (Mesh<TestFrame>, Mesh<TestFrame>, Rx, Cuttable) {
    cuttable_pair_dialled_by(ca, "a").await
}

/// As [`cuttable_pair`], the link dialled by `dialler`: the other only waits to be dialled.
async fn cuttable_pair_dialled_by(
    ca: &ClusterCa,
    dialler: &str,
) -> (Mesh<TestFrame>, Mesh<TestFrame>, Rx, Cuttable) {
    let cut = Cuttable::default();
    let quick = |mut config: MeshConfig| {
        config.keep_alive = Duration::from_millis(200);
        config.idle_timeout = Duration::from_secs(1);
        config
    };
    let mut a_config = quick(config(ca, "a", loopback()));
    a_config.sockets = Arc::new(cut.clone());
    let (a, _) = Mesh::<TestFrame>::bind(a_config).await.unwrap();
    let (b, b_rx) = Mesh::<TestFrame>::bind(quick(config(ca, "b", loopback())))
        .await
        .unwrap();
    if dialler == "a" {
        a.add_peer(node("b"), b.local_addr()).unwrap();
    } else {
        b.add_peer(node("a"), a.local_addr()).unwrap();
    }
    a.wait_ready(&node("b")).await.unwrap();
    b.wait_ready(&node("a")).await.unwrap();
    (a, b, b_rx, cut)
}

/// Waits until `mesh` no longer holds a working link to `peer`.
async fn wait_lost(mesh: &Mesh<TestFrame>, peer: &str) {
    let mut status = mesh.shared.status(&node(peer)).unwrap();
    status
        .wait_for(|s| s.state != PeerState::Ready)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_link_silent_past_its_idle_timeout_loses_no_frame_and_repeats_none() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, b, mut b_rx, cut) = cuttable_pair(&ca).await;
        send_seq(&a, "b", 0..1000);
        cut.cut(b.local_addr());
        // Written to a connection that will never deliver them.
        send_seq(&a, "b", 1000..2000);
        wait_lost(&a, "b").await;
        wait_lost(&b, "a").await;
        // Queued while no connection is up.
        send_seq(&a, "b", 2000..3000);
        cut.heal();
        a.send(&node("b"), TestFrame::Seq(u32::MAX)).unwrap();
        let mut got = Vec::new();
        loop {
            match b_rx.recv().await.expect("b's inbound ended").frame {
                TestFrame::Seq(u32::MAX) => break,
                TestFrame::Seq(n) => got.push(n),
                other => panic!("unexpected frame {other:?}"),
            }
        }
        // Each frame exactly once, in the order sent.
        assert_eq!(got.len(), 3000, "frames delivered");
        assert_eq!(got, (0..3000).collect::<Vec<_>>());
        assert!(peer(&a, "b").links >= 2, "the link was replaced");
        assert_eq!(a.frames_lost(), 0);
        a.close().await;
        b.close().await;
    })
    .await;
}

/// A node cut off that may have lost its owner lease sends nothing it held from before when the
/// cut heals: another node may have done that work by now. It counts those frames lost.
#[tokio::test]
async fn a_fenced_node_sends_nothing_it_held_when_its_link_comes_back() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, b, mut b_rx, cut) = cuttable_pair(&ca).await;
        send_seq(&a, "b", 0..10);
        assert_eq!(
            by_sender(take(&mut b_rx, 10).await)["a"],
            (0..10).collect::<Vec<_>>()
        );
        // Written to a connection that is cut but still up when the node is fenced: it is
        // closed at once, so it does not carry them over when the cut heals, long before its
        // idle timeout.
        cut.cut(b.local_addr());
        send_seq(&a, "b", 10..20);
        a.fence();
        send_seq(&a, "b", 20..30);
        cut.heal();
        let mut status = a.shared.status(&node("b")).unwrap();
        status
            .wait_for(|s| s.state == PeerState::Ready && s.links >= 2)
            .await
            .unwrap();
        send_seq(&a, "b", 30..40);
        assert_eq!(
            by_sender(take(&mut b_rx, 10).await)["a"],
            (30..40).collect::<Vec<_>>(),
            "only what was sent after the link came back"
        );
        // Counted lost: the twenty never delivered, and any of the first ten whose
        // acknowledgement had not come back before the cut.
        assert!((20..=30).contains(&a.frames_lost()), "{}", a.frames_lost());
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_mesh_closed_right_after_sending_to_a_live_peer_loses_nothing() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, _a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;
        a.add_peer(node("b"), b.local_addr()).unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        // The last frames of a clean shutdown are still on their way when it closes.
        send_seq(&a, "b", 0..2000);
        a.close().await;
        assert_eq!(a.frames_lost(), 0, "nothing reported lost to a live peer");
        let got = by_sender(take(&mut b_rx, 2000).await);
        assert_eq!(got["a"], (0..2000).collect::<Vec<_>>());
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn frames_a_removed_peer_never_acknowledged_are_counted_lost() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, b, mut b_rx, cut) = cuttable_pair(&ca).await;
        send_seq(&a, "b", 0..10);
        take(&mut b_rx, 10).await;
        cut.cut(b.local_addr());
        // b dies while the link is silent; nothing a sends now is acknowledged.
        send_seq(&a, "b", 10..510);
        b.close().await;
        assert!(a.remove_peer(&node("b")));
        // close() waits for every peer task, so the count is final.
        a.close().await;
        let lost = a.frames_lost();
        // The first ten may have been acknowledged before the cut, or not.
        assert!((500..=510).contains(&lost), "{lost} frames reported lost");
    })
    .await;
}

fn send_bulk(mesh: &Mesh<TestFrame>, to: &str, range: std::ops::Range<u32>, len: usize) {
    for n in range {
        mesh.send_bulk(&node(to), TestFrame::Bulk(n, vec![0; len]))
            .unwrap();
    }
}

/// Receives until the main frame `Seq(last)` and the bulk frame `Bulk(last_bulk)` are both in:
/// the main numbers and the bulk numbers, each in arrival order, and how many bulk frames came
/// before `Seq(last)`.
async fn take_both(rx: &mut Rx, last: u32, last_bulk: u32) -> (Vec<u32>, Vec<u32>, usize) {
    let (mut main, mut bulk) = (Vec::new(), Vec::new());
    let mut bulk_before_last = None;
    while main.last() != Some(&last) || bulk.last() != Some(&last_bulk) {
        match rx
            .recv()
            .await
            .expect("the inbound stream ended early")
            .frame
        {
            TestFrame::Seq(n) => {
                main.push(n);
                if n == last {
                    bulk_before_last = Some(bulk.len());
                }
            }
            TestFrame::Bulk(n, _) => bulk.push(n),
            other => panic!("unexpected frame {other:?}"),
        }
    }
    let before = bulk_before_last.unwrap_or(bulk.len());
    (main, bulk, before)
}

#[tokio::test]
async fn a_bulk_backlog_does_not_hold_back_a_main_frame_sent_after_it() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, _a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;
        a.add_peer(node("b"), b.local_addr()).unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        // 16 MiB of bulk frames, then one main frame.
        send_bulk(&a, "b", 0..64, 256 * 1024);
        a.send(&node("b"), TestFrame::Seq(0)).unwrap();
        let (main, bulk, bulk_before) = take_both(&mut b_rx, 0, 63).await;
        assert_eq!(main, [0]);
        assert_eq!(
            bulk,
            (0..64).collect::<Vec<_>>(),
            "every bulk frame, in order"
        );
        assert!(
            bulk_before < 64,
            "the main frame came after the whole bulk backlog"
        );
        assert_eq!(a.frames_lost(), 0);
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn bulk_frames_arrive_in_order_among_themselves_beside_main_frames() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, _a_rx) = start(&ca, "a").await;
        let (b, mut b_rx) = start(&ca, "b").await;
        a.add_peer(node("b"), b.local_addr()).unwrap();
        a.wait_ready(&node("b")).await.unwrap();
        // Small and large bulk frames, interleaved with main frames.
        for n in 0..2000 {
            let len = if n % 100 == 0 { 300 * 1024 } else { 16 };
            send_bulk(&a, "b", n..n + 1, len);
            send_seq(&a, "b", n..n + 1);
        }
        let (main, bulk, _) = take_both(&mut b_rx, 1999, 1999).await;
        assert_eq!(
            main,
            (0..2000).collect::<Vec<_>>(),
            "main frames once each, in order"
        );
        assert_eq!(
            bulk,
            (0..2000).collect::<Vec<_>>(),
            "bulk frames once each, in order"
        );
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_link_reset_loses_bulk_frames_without_counting_main_frames_lost() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, b, mut b_rx, cut) = cuttable_pair(&ca).await;
        send_bulk(&a, "b", 0..100, 1024);
        send_seq(&a, "b", 0..100);
        let (main, bulk, _) = take_both(&mut b_rx, 99, 99).await;
        assert_eq!((main.len(), bulk.len()), (100, 100));
        cut.cut(b.local_addr());
        // Written to a connection that will never deliver them: the main frames are sent again
        // on the next one, the bulk frames are gone with it.
        send_bulk(&a, "b", 100..200, 1024);
        send_seq(&a, "b", 100..200);
        wait_lost(&a, "b").await;
        wait_lost(&b, "a").await;
        cut.heal();
        a.wait_ready(&node("b")).await.unwrap();
        send_bulk(&a, "b", 200..201, 1024);
        a.send(&node("b"), TestFrame::Seq(200)).unwrap();
        let (main, bulk, _) = take_both(&mut b_rx, 200, 200).await;
        assert_eq!(
            main,
            (100..201).collect::<Vec<_>>(),
            "main frames once each, in order"
        );
        assert_eq!(
            bulk,
            [200],
            "the bulk frames of the dead connection are gone"
        );
        assert_eq!(
            a.frames_lost(),
            0,
            "lost bulk frames are not lost main frames"
        );
        a.close().await;
        b.close().await;
    })
    .await;
}

/// Cuts a off from b after b delivered a's frames 0 to 9, and has a send 10 to 19, which b
/// never acknowledges: a holds them to send again on its next link. Returns once both noticed.
async fn cut_off_holding_frames(
    a: &Mesh<TestFrame>,
    b: &Mesh<TestFrame>,
    b_rx: &mut Rx,
    cut: &Cuttable,
) {
    send_seq(a, "b", 0..10);
    assert_eq!(
        by_sender(take(b_rx, 10).await)["a"],
        (0..10).collect::<Vec<_>>()
    );
    cut.cut(b.local_addr());
    send_seq(a, "b", 10..20);
    wait_lost(b, "a").await;
    wait_lost(a, "b").await;
}

/// A new process of a links with b: its frame must be the first b gets since the cut, none of
/// the old process's, neither those it held nor those b had delivered.
async fn a_new_process_is_heard_first(ca: &ClusterCa, b: &Mesh<TestFrame>, b_rx: &mut Rx) {
    let (a2, _a2_rx) = start(ca, "a").await;
    a2.add_peer(node("b"), b.local_addr()).unwrap();
    a2.send(&node("b"), TestFrame::Seq(u32::MAX)).unwrap();
    let first = b_rx.recv().await.expect("b's inbound ended");
    assert_eq!(first.frame, TestFrame::Seq(u32::MAX), "from {}", first.from);
    a2.close().await;
}

#[tokio::test]
async fn a_peer_taken_for_dead_that_dials_again_is_refused_for_good() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, b, mut b_rx, cut) = cuttable_pair_dialled_by(&ca, "a").await;
        cut_off_holding_frames(&a, &b, &mut b_rx, &cut).await;
        // b's cluster took a for dead: what a's frames were for runs elsewhere now.
        assert!(b.forget_peer(&node("a")));
        cut.heal();
        let mut status = a.shared.status(&node("b")).unwrap();
        status
            .wait_for(|s| s.state == PeerState::Removed)
            .await
            .unwrap();
        a_new_process_is_heard_first(&ca, &b, &mut b_rx).await;
        assert_eq!(
            peer(&a, "b").state,
            PeerState::Removed,
            "a never dials again"
        );
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_peer_taken_for_dead_that_answers_a_dial_is_refused_for_good() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        // a never dials: b does, as a node dials a seed it took for dead again.
        let (a, b, mut b_rx, cut) = cuttable_pair_dialled_by(&ca, "b").await;
        cut_off_holding_frames(&a, &b, &mut b_rx, &cut).await;
        assert!(b.forget_peer(&node("a")));
        b.add_peer(node("a"), a.local_addr()).unwrap();
        cut.heal();
        // a welcomes b's dial, and b refuses the welcome of the process it forgot.
        let mut status = a.shared.status(&node("b")).unwrap();
        status
            .wait_for(|s| s.state == PeerState::Removed)
            .await
            .unwrap();
        a_new_process_is_heard_first(&ca, &b, &mut b_rx).await;
        a.close().await;
        b.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_peer_forgotten_while_its_link_is_up_links_again() {
    guard(async {
        let ca = ClusterCa::generate().unwrap();
        let (a, b, mut b_rx, _cut) = cuttable_pair(&ca).await;
        // b's membership took a for gone while a linked: a process restarted under the id, say,
        // that dialled before its descriptor was read. It is heard from, so it is not shut out.
        assert!(b.forget_peer(&node("a")));
        send_seq(&a, "b", 0..10);
        assert_eq!(
            by_sender(take(&mut b_rx, 10).await)["a"],
            (0..10).collect::<Vec<_>>()
        );
        a.close().await;
        b.close().await;
    })
    .await;
}
