//! The network namespaces tests cut real links with: a node's namespace reaches what runs in the
//! hub over the bridge, a cut stops it, and mending lets it through again.

use std::process::Stdio;

use ferry_tests::netns::Net;

/// Asks the redis-server in the hub for PONG from node 0's namespace, giving up after 2 s (a
/// cut link drops the connection's packets: it would wait for ever).
async fn pong(net: &Net) -> bool {
    let out = net
        .command(net.node(0), "timeout")
        .args([
            "2",
            "redis-cli",
            "-h",
            &net.hub_addr().to_string(),
            "-p",
            "6390",
            "ping",
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim() == "PONG"
}

#[tokio::test]
async fn a_cut_stops_a_nodes_traffic_and_mending_lets_it_through() {
    let Some(net) = Net::create_or_skip(2) else {
        return;
    };
    let mut redis = net
        .command(net.hub(), "redis-server")
        .args(["--bind", &net.hub_addr().to_string(), "--port", "6390"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server starts");
    {
        use tokio::io::AsyncBufReadExt;
        let stdout = redis.stdout.take().expect("piped");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Some(line) = lines.next_line().await.expect("stdout") {
            if line.contains("Ready to accept connections") {
                break;
            }
        }
    }
    assert!(pong(&net).await, "linked through the bridge");
    net.cut(0);
    assert!(!pong(&net).await, "cut off");
    net.mend(0);
    assert!(pong(&net).await, "mended");
    redis.kill().await.expect("redis-server stopped");
}
