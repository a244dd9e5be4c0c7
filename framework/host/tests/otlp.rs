//! With the `otlp` feature, a drain's spans reach an OTLP/HTTP collector: here a listener on
//! loopback that takes the exporter's POSTs and keeps their bodies.
#![cfg(feature = "otlp")]

use std::time::Duration;

use ferry::{NodeId, RelocateMode, RelocateOptions, SpotId};
use ferry_host::traces::Traces;
use ferry_samples::ping;
use ferry_tests::cluster::Cluster;
use ferry_tests::rooms::ping_registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Takes HTTP requests on `listener` and sends each whole one (head and body) on `bodies`.
async fn collector(listener: tokio::net::TcpListener, bodies: mpsc::UnboundedSender<Vec<u8>>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let bodies = bodies.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                let n = stream.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some((head, _)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= head.len() + 4 + length {
                        break;
                    }
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            let _ = bodies.send(request);
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drains_spans_are_exported_over_otlp() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, mut bodies) = mpsc::unbounded_channel();
    let server = tokio::spawn(collector(listener, tx));
    let traces = Traces::new(
        &format!("http://{addr}/v1/traces"),
        &NodeId::new("n1").expect("id"),
    )
    .expect("an exporter");
    tracing_subscriber::registry().with(traces.layer()).init();

    let cluster = Cluster::start(2, ping_registry).await;
    let n1 = cluster.node("n1");
    let room = SpotId::new("traced").expect("id");
    n1.create_spot_on(n1.id(), ping::PING, &room)
        .await
        .expect("room created");
    let outcome = n1
        .relocate(RelocateOptions {
            mode: RelocateMode::PlannedMaintenance,
            deadline: Duration::from_secs(30),
        })
        .await;
    assert!(
        matches!(outcome, ferry::RelocateOutcome::Relocated { moved: 1 }),
        "{outcome:?}"
    );
    // Dropping the export flushes it: the collector has the drain and the move.
    tokio::task::spawn_blocking(move || drop(traces))
        .await
        .expect("flushed");
    let mut seen = Vec::new();
    while let Ok(request) = bodies.try_recv() {
        seen.extend(request);
    }
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.starts_with("POST /v1/traces"), "{seen}");
    for name in ["drain", "relocation", "traced", "ferry.node"] {
        assert!(seen.contains(name), "{name} in the export:\n{seen}");
    }
    cluster.shutdown().await;
    server.abort();
}
