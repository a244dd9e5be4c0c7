//! The operator commands against real `ferry node` processes on a real redis-server:
//! `ferry status`, `ferry drain`, `ferry shutdown`, their exit codes and errors, and the admin
//! endpoint's answers to bad requests. A driver node inside the test joins the same cluster to
//! place units and check where they run.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::processes::{
    Processes, closed_without_drain, driver, get, post, promtool_problems, raw_http, raw_https,
    run_ferry, settle, status_json, text, within,
};
use common::{TempDir, certs, one_line_failure};
use ferry::store::LocationStore;
use ferry::{Node, NodeId, SpotId};
use ferry_samples::ping::{self, PingMsg, PingReport};
use ferry_tests::redis_server::RedisServer;
use ferry_tests::rooms::ping_registry;
use serde_json::{Value, json};

/// How long one request to a unit may take.
const T: Duration = Duration::from_secs(10);

/// The redis key prefix of these tests' clusters.
const PREFIX: &str = "tools-admin";

/// The application version every node runs.
const VERSION: &str = "7";

fn id(text: &str) -> NodeId {
    NodeId::new(text).expect("valid node id")
}

/// A node's config: on redis, admin endpoint on a free loopback port (the default).
fn node_config(id: &str, redis_url: &str, seeds: &[String]) -> String {
    let seeds: Vec<String> = seeds.iter().map(|s| format!("{s:?}")).collect();
    format!(
        r#"id = "{id}"
app_version = "{VERSION}"
certs = "certs"
store = "{redis_url}"
store_prefix = "{PREFIX}"
refresh_ms = 200
seeds = [{}]
"#,
        seeds.join(", ")
    )
}

/// Starts the test's driver node, with the ping factory.
async fn start_driver(redis: &RedisServer, certs_dir: &Path) -> (Node, Arc<dyn LocationStore>) {
    driver(&redis.url(), PREFIX, VERSION, certs_dir, ping_registry()).await
}

async fn report(driver: &Node, spot: &SpotId) -> PingReport {
    driver
        .request(spot, PingMsg::Report, T)
        .await
        .expect("report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_moves_every_unit_off_a_node_process_and_shutdown_stops_it() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let tmp = TempDir::new("admin-drain");
    let certs_dir = tmp.path().join("certs");
    certs(&certs_dir, "p1,p2,p3,driver");
    let mut processes = Processes::default();
    let mut admins = Vec::new();
    let mut p1_seed = Vec::new();
    for name in ["p1", "p2", "p3"] {
        let config = tmp.path().join(format!("{name}.toml"));
        // p2 and p3 dial p1 at start, from its ready line.
        std::fs::write(&config, node_config(name, &redis.url(), &p1_seed)).expect("config");
        let ready = processes.start(name, &config, tmp.path()).await;
        if name == "p1" {
            p1_seed.push(format!("p1@{}", ready.mesh));
        }
        assert!(ready.sessions.is_none(), "no gateway unless configured");
        admins.push(ready.admin());
    }
    let p1 = admins[0].as_str();
    let (driver, store) = start_driver(&redis, &certs_dir).await;
    let nodes = [id("p1"), id("p2"), id("p3")];
    settle(&driver, &store, &nodes).await;
    // A fresh node hosts nothing: stopping it loses nothing, and its status says so.
    let shown = text(&run_ferry(&["status", p1]).await.stdout);
    assert!(shown.contains("  units             0\n"), "{shown}");
    assert!(shown.contains("  safe to shut down yes\n"), "{shown}");

    const ROOMS: usize = 6;
    let rooms: Vec<SpotId> = (0..ROOMS)
        .map(|i| SpotId::new(format!("room-{i}")).expect("id"))
        .collect();
    let from = SpotId::new("driver-ping").expect("id");
    for (i, room) in rooms.iter().enumerate() {
        driver
            .create_spot_on(&nodes[0], ping::PING, room)
            .await
            .expect("room created");
        driver
            .tell(
                room,
                PingMsg::Ping {
                    from: from.clone(),
                    n: i as u64,
                },
            )
            .expect("told");
        assert_eq!(report(&driver, room).await.node, "p1");
    }

    // ferry status, read by a person, then as JSON.
    let out = run_ferry(&["status", p1]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with(&format!("node p1 (version {VERSION}): Serving\n")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("  units             {ROOMS}\n")),
        "{shown}"
    );
    assert!(
        shown.contains("p2 Ready") && shown.contains("p3 Ready"),
        "{shown}"
    );
    assert!(shown.contains("  last drain        none yet\n"), "{shown}");
    assert!(shown.contains("  safe to shut down no\n"), "{shown}");
    let s = status_json(p1).await;
    assert_eq!(s["node"], "p1");
    assert_eq!(s["state"], "Serving");
    assert_eq!(s["app_version"], VERSION);
    assert_eq!(s["units"], ROOMS);
    assert_eq!(s["safe_to_shutdown"], false);

    // ferry drain: every room moves to p2 or p3, with its state.
    let out = run_ferry(&["drain", p1, "--deadline", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.starts_with(&format!("relocated: {ROOMS} units moved off {p1} (")),
        "{said}"
    );
    assert!(said.contains("safe to shut down"), "{said}");
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .lines()
            .all(|l| l.starts_with(&format!("draining {p1}: "))),
        "only progress lines on stderr: {stderr}"
    );
    let mut hosts = BTreeSet::new();
    for (i, room) in rooms.iter().enumerate() {
        let r = report(&driver, room).await;
        assert!(
            r.node == "p2" || r.node == "p3",
            "{room} runs on {}",
            r.node
        );
        assert_eq!(
            r.pings.get(from.as_str()),
            Some(&vec![i as u64]),
            "{room} kept its state"
        );
        hosts.insert(r.node);
    }
    assert_eq!(hosts.len(), 2, "the rooms are spread over p2 and p3");
    let s = status_json(p1).await;
    assert_eq!(s["state"], "Relocated");
    assert_eq!(s["units"], 0);
    assert_eq!(s["safe_to_shutdown"], true);
    assert_eq!(s["last_drain"]["outcome"], "Relocated");
    assert_eq!(s["last_drain"]["moved"], ROOMS);
    assert_eq!(s["progress"]["moved"], ROOMS);
    let shown = text(&run_ferry(&["status", p1]).await.stdout);
    assert!(shown.contains("  safe to shut down yes\n"), "{shown}");
    assert!(
        shown.contains(&format!(
            "  last drain        Relocated: {ROOMS} units moved ("
        )),
        "{shown}"
    );

    // What a scrape sees.
    let (code, metrics) = raw_http(p1, &get("/metrics")).await;
    assert_eq!(code, 200, "{metrics}");
    for line in [
        // Every series carries the node's label, counters and histograms too.
        format!("ferry_relocation_units_moved_total{{node=\"p1\"}} {ROOMS}"),
        "ferry_node_units{node=\"p1\"} 0".to_owned(),
        "ferry_node_safe_to_shutdown{node=\"p1\"} 1".to_owned(),
        "ferry_node_state{node=\"p1\",state=\"Relocated\"} 1".to_owned(),
        "ferry_node_peers_ready{node=\"p1\"} 3".to_owned(),
        format!("ferry_drain_moved_units{{node=\"p1\"}} {ROOMS}"),
        // Pauses are histograms: their buckets count every move and never decay to 0.
        format!("ferry_relocation_interruption_seconds_bucket{{node=\"p1\",le=\"+Inf\"}} {ROOMS}"),
        format!("ferry_relocation_interruption_seconds_count{{node=\"p1\"}} {ROOMS}"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    assert!(
        !metrics.contains("ferry_relocation_interruption_seconds{quantile="),
        "no sliding-window quantiles:\n{metrics}"
    );
    // Prometheus's own linter takes the scrape as it is: HELP and TYPE for every metric.
    if let Some(problems) = promtool_problems(&metrics) {
        assert_eq!(problems, "", "promtool check metrics on:\n{metrics}");
    }
    for (_, name, _) in ferry_host::metrics::METRICS {
        let help = format!("# HELP {name} ");
        let recorded = metrics.lines().any(|l| l.starts_with(name));
        assert!(!recorded || metrics.contains(&help), "{name} has help text");
    }

    // Bad requests to a real process: a 4xx with a JSON error each, and the node serves on.
    for (request, code, says) in [
        (get("/nope"), 404, "the routes are"),
        (get("/relocate"), 405, "takes POST"),
        (post("/relocate", "{"), 400, "not the JSON"),
        (post("/relocate", r#"{"deadline_ms":0}"#), 422, "above 0"),
        (
            post("/units", r#"{"kind":"spot","id":"x"}"#),
            400,
            "missing field",
        ),
        (
            post("/units", r#"{"kind":"spot","factory":"ping","id":"x"}"#),
            409,
            "not Serving",
        ),
        ("garbage\r\n\r\n".to_owned(), 400, ""),
    ] {
        let (got, body) = raw_http(p1, &request).await;
        assert_eq!(got, code, "{request:?}: {body}");
        if !says.is_empty() {
            let error: Value = serde_json::from_str(&body).expect("a JSON error");
            assert!(
                error["error"].as_str().is_some_and(|e| e.contains(says)),
                "{request:?}: {body}"
            );
        }
    }
    assert_eq!(status_json(p1).await["state"], "Relocated");

    // ferry resume: back into service, p1 takes units again.
    let out = run_ferry(&["resume", p1]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("node p1 at {p1} is back in service (Relocated before): it takes units again\n")
    );
    let s = status_json(p1).await;
    assert_eq!(
        (&s["state"], &s["safe_to_shutdown"]),
        (&json!("Serving"), &json!(true))
    );
    let (code, body) = raw_http(
        p1,
        &post(
            "/units",
            r#"{"kind":"spot","factory":"ping","id":"after-resume"}"#,
        ),
    )
    .await;
    assert_eq!(code, 201, "{body}");

    // ferry shutdown: the new room moves, the node stops, the node stops, its process exits 0.
    let out = run_ferry(&["shutdown", p1]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(&format!("stopped: {p1} moved its last 1 unit off")),
        "{}",
        text(&out.stdout)
    );
    let (name, status, log) = processes.wait(0).await;
    assert_eq!((name.as_str(), status.code()), ("p1", Some(0)), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let error = one_line_failure(&["status".as_ref(), p1.as_ref()]);
    assert!(
        error.contains(&format!("cannot reach the admin endpoint at {p1}")),
        "{error}"
    );

    // The rooms still answer where they went; then everything stops.
    for room in &rooms {
        assert_ne!(report(&driver, room).await.node, "p1");
    }
    driver.shutdown().await;
    for (name, status, log) in processes.terminate_all().await {
        closed_without_drain(&name, status, &log);
    }
    drop(processes);
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_nowhere_to_go_exits_3_with_the_reason() {
    let Some(redis) = RedisServer::start_or_skip().await else {
        return;
    };
    let tmp = TempDir::new("admin-blocked");
    let certs_dir = tmp.path().join("certs");
    certs(&certs_dir, "p1,driver");
    let config = tmp.path().join("p1.toml");
    std::fs::write(&config, node_config("p1", &redis.url(), &[])).expect("config");
    let mut processes = Processes::default();
    let p1 = processes.start("p1", &config, tmp.path()).await.admin();
    let (driver, store) = start_driver(&redis, &certs_dir).await;
    settle(&driver, &store, &[id("p1")]).await;
    let rooms: Vec<SpotId> = (0..2)
        .map(|i| SpotId::new(format!("stuck-{i}")).expect("id"))
        .collect();
    for room in &rooms {
        driver
            .create_spot_on(&id("p1"), ping::PING, room)
            .await
            .expect("room created");
    }

    // The driver takes no units: no node can.
    let out = run_ferry(&["drain", &p1, "--deadline", "500ms"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "error: the drain of {p1} was blocked (TargetUnavailable): 2 units stayed on the node"
        )),
        "{stderr}"
    );
    assert!(last.contains("start a node"), "{last}");
    let s = status_json(&p1).await;
    assert_eq!(s["state"], "Serving");
    assert_eq!(s["units"], 2);
    assert_eq!(s["last_drain"]["reason"], "TargetUnavailable");
    for room in &rooms {
        assert_eq!(report(&driver, room).await.node, "p1", "{room} stayed");
    }
    // The scrape counts both units as failed moves; a node that is no gateway reports no
    // sessions gauge at all, rather than a misleading 0.
    let failed = |metrics: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("ferry_relocation_units_failed_total{node=\"p1\"} "))
            .map(str::to_owned)
    };
    let (code, metrics) = raw_http(&p1, &get("/metrics")).await;
    assert_eq!(code, 200, "{metrics}");
    assert_eq!(failed(&metrics).as_deref(), Some("2"), "{metrics}");
    assert!(!metrics.contains("ferry_node_sessions"), "{metrics}");

    // A rolling update to a version no node runs is blocked the same way.
    let out = run_ferry(&["drain", &p1, "--rolling-update", "8", "--deadline", "300ms"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let (_, metrics) = raw_http(&p1, &get("/metrics")).await;
    assert_eq!(failed(&metrics).as_deref(), Some("4"), "{metrics}");

    // Something that is not an admin endpoint: the redis-server.
    let redis_addr = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let error = one_line_failure(&["status".as_ref(), redis_addr.as_ref()]);
    assert!(
        error.contains(&format!(
            "{redis_addr} did not answer as a ferry admin endpoint"
        )),
        "{error}"
    );

    // Shutdown stops the node anyway, says what it could not move, and exits 3; the process
    // itself exits 1, naming the unclean stop.
    let out = run_ferry(&["shutdown", &p1, "--deadline", "500ms"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr
            .lines()
            .last()
            .unwrap_or_default()
            .starts_with(&format!(
                "error: {p1} stopped, but the drain of {p1} was blocked (TargetUnavailable)"
            )),
        "{stderr}"
    );
    let (_, status, log) = processes.wait(0).await;
    assert_eq!(status.code(), Some(1), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: node p1 stopped, but not cleanly"),
        "{log}"
    );
    // The log names every unit that stayed and why, at warn level: the default shows it.
    for room in &rooms {
        let named = log.lines().filter(|l| {
            l.contains(" WARN ")
                && l.contains(&format!("unit=spot:{room}"))
                && l.contains("no serving node can take it")
        });
        assert!(
            named.count() >= 1,
            "{room} is named with its reason:\n{log}"
        );
    }
    driver.shutdown().await;
    drop(processes);
    drop(redis);
}

#[test]
fn bad_and_unreachable_addresses_are_one_line_errors() {
    for (addr, says) in [
        ("nowhere", "bad admin address \"nowhere\": it has no port"),
        ("127.0.0.1:http", "bad admin address \"127.0.0.1:http\""),
        ("http://127.0.0.1:7100/status", "it is not HOST:PORT"),
        ("127.0.0.1:0", "not a number from 1 to 65535"),
    ] {
        for command in ["status", "drain", "shutdown"] {
            let error = one_line_failure(&[command.as_ref(), addr.as_ref()]);
            assert!(error.contains(says), "ferry {command} {addr}: {error}");
            assert!(error.contains("HOST:PORT"), "{error}");
        }
    }
    // A port that was free a moment ago: nothing listens there.
    let free = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    for command in ["status", "drain", "shutdown"] {
        let error = one_line_failure(&[command.as_ref(), free.as_ref()]);
        assert!(
            error.contains(&format!("cannot reach the admin endpoint at {free}")),
            "{error}"
        );
        assert!(error.contains("admin= address"), "{error}");
    }
    // Bad flags are usage errors: exit 2, naming the flag.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["drain", "127.0.0.1:7100", "--deadline", "soon"])
        .output()
        .expect("the ferry binary runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--deadline"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_bad_or_taken_admin_address_is_a_clear_config_error() {
    let tmp = TempDir::new("admin-config");
    certs(&tmp.path().join("certs"), "p1");
    let config = tmp.path().join("p1.toml");
    std::fs::write(
        &config,
        "id = \"p1\"\ncerts = \"certs\"\nadmin = \"localhost:7100\"\n",
    )
    .expect("config");
    let error = one_line_failure(&["node".as_ref(), "--config".as_ref(), config.as_os_str()]);
    assert!(
        error.contains("bad `admin`") && error.contains("\"off\""),
        "{error}"
    );

    let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a port");
    let addr = taken.local_addr().expect("addr");
    std::fs::write(
        &config,
        format!("id = \"p1\"\ncerts = \"certs\"\nadmin = \"{addr}\"\n"),
    )
    .expect("config");
    let error = one_line_failure(&["node".as_ref(), "--config".as_ref(), config.as_os_str()]);
    assert!(
        error.contains(&format!("cannot listen for the admin endpoint on {addr}")),
        "{error}"
    );
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_node_prints_its_client_address_and_takes_clients_with_a_listed_token() {
    use ferry::client::{Client, ClientConfig};

    let tmp = TempDir::new("admin-gateway");
    let out = run_ferry(&[
        "certs",
        "--out",
        &tmp.path().join("certs").display().to_string(),
        "--nodes",
        "p1",
        "--gateway",
        "localhost",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("gateway.pem"),
        "{}",
        text(&out.stdout)
    );
    std::fs::write(tmp.path().join("tokens.txt"), "# players\nsecret-1 alice\n").expect("tokens");
    let config = tmp.path().join("p1.toml");
    std::fs::write(
        &config,
        r#"id = "p1"
certs = "certs"
admin = "off"
sessions_listen = "127.0.0.1:0"
sessions_cert = "certs/gateway.pem"
sessions_key = "certs/gateway.key"
sessions_tokens = "tokens.txt"
"#,
    )
    .expect("config");
    let mut processes = Processes::default();
    let ready = processes.start("p1", &config, tmp.path()).await;
    assert_eq!(ready.admin, None, "admin = \"off\"");
    let gateway = ready.sessions.expect("sessions= in the ready line");

    let ca = std::fs::read_to_string(tmp.path().join("certs/gateway.pem")).expect("gateway.pem");
    let client = within(
        "a client session",
        Client::connect(ClientConfig::new(
            vec![gateway],
            "localhost",
            ca.clone(),
            "secret-1",
        )),
    )
    .await
    .expect("a listed token connects");
    assert_eq!(client.session().node.as_str(), "p1");
    client.close().await;
    let mut stranger = ClientConfig::new(vec![gateway], "localhost", ca, "guess");
    stranger.reconnect = None;
    let refused = within("a refusal", Client::connect(stranger)).await;
    assert!(refused.is_err(), "an unlisted token is refused");

    for (name, status, log) in processes.terminate_all().await {
        closed_without_drain(&name, status, &log);
    }
}

/// A request with `Authorization: Bearer <token>` when `token` is given.
fn request(method: &str, path: &str, token: Option<&str>) -> String {
    request_with(method, path, token, "")
}

/// A request with `body` (JSON, when not empty), and the token when `token` is given.
fn request_with(method: &str, path: &str, token: Option<&str>, body: &str) -> String {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let kind = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n{auth}{kind}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A valid body for each changing route, so that a refusal can only be the token's.
const CHANGES: [(&str, &str); 4] = [
    (
        "/relocate",
        r#"{"mode": "maintenance", "deadline_ms": 1000}"#,
    ),
    ("/shutdown", r#"{"deadline_ms": 1000}"#),
    ("/resume", ""),
    (
        "/units",
        r#"{"kind": "spot", "factory": "ping", "id": "intruder"}"#,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_every_change_and_beyond_loopback_every_read_but_the_probes() {
    let tmp = TempDir::new("admin-token");
    certs(&tmp.path().join("certs"), "t1,t2,t3,t4");
    std::fs::write(tmp.path().join("admin.token"), "s3cret-token\n").expect("token file");

    // Beyond loopback without a token: the node refuses to start.
    let open = tmp.path().join("open.toml");
    std::fs::write(
        &open,
        "id = \"t1\"\ncerts = \"certs\"\nadmin = \"0.0.0.0:0\"\n",
    )
    .expect("config");
    let out = run_ferry(&["node", "--config", open.to_str().expect("utf-8")]).await;
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(
        said.contains("bad `admin`") && said.contains("admin_token_file"),
        "{said}"
    );

    // On loopback with a token: reads are open, changes need it.
    let local = tmp.path().join("local.toml");
    std::fs::write(
        &local,
        "id = \"t2\"\ncerts = \"certs\"\nadmin_token_file = \"admin.token\"\n",
    )
    .expect("config");
    let mut processes = Processes::default();
    let t2 = processes.start("t2", &local, tmp.path()).await.admin();
    for token in [None, Some("wrong"), Some("s3cret-tokenX")] {
        for (path, valid) in CHANGES {
            let (code, body) = raw_http(&t2, &request_with("POST", path, token, valid)).await;
            assert_eq!(code, 401, "POST {path} with {token:?}: {body}");
            let error: Value = serde_json::from_str(&body).expect("a JSON error");
            assert!(
                error["error"].as_str().is_some_and(|e| e.contains("token")),
                "{body}"
            );
        }
    }
    // Nothing changed: the node serves, drained nothing, hosts no unit, and is ready.
    let s = status_json(&t2).await;
    assert_eq!(
        (s["state"].as_str(), &s["last_drain"], s["units"].as_u64()),
        (Some("Serving"), &Value::Null, Some(0))
    );
    assert_eq!(raw_http(&t2, &get("/readyz")).await.0, 200);
    assert_eq!(raw_http(&t2, &get("/healthz")).await.0, 200);
    // The CLI without the token is refused too; with it, the drain runs and the node is no
    // longer ready.
    let out = run_ferry(&["drain", &t2]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("401"), "{}", text(&out.stderr));
    let token_file = tmp.path().join("admin.token");
    let token_file = token_file.to_str().expect("utf-8");
    let out = run_ferry(&["drain", &t2, "--admin-token-file", token_file]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (code, body) = raw_http(&t2, &get("/readyz")).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("Relocated"), "{body}");

    // Beyond loopback with a token: every read but the probes needs it too.
    let wide = tmp.path().join("wide.toml");
    std::fs::write(
        &wide,
        "id = \"t3\"\ncerts = \"certs\"\nadmin = \"0.0.0.0:0\"\nadmin_token_file = \"admin.token\"\n",
    )
    .expect("config");
    let ready = processes.start("t3", &wide, tmp.path()).await;
    let t3 = format!("127.0.0.1:{}", ready.admin.expect("admin on").port());
    for path in ["/status", "/metrics", "/cluster/node"] {
        assert_eq!(
            raw_http(&t3, &request("GET", path, None)).await.0,
            401,
            "{path}"
        );
        assert_eq!(
            raw_http(&t3, &request("GET", path, Some("wrong"))).await.0,
            401,
            "{path}"
        );
        let (code, body) = raw_http(&t3, &request("GET", path, Some("s3cret-token"))).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    assert_eq!(raw_http(&t3, &get("/readyz")).await.0, 200);
    let out = run_ferry(&["status", &t3]).await;
    assert_eq!(out.status.code(), Some(1));
    let out = within(
        "ferry status with the token from the environment",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["status", &t3])
            .env("FERRY_ADMIN_TOKEN", "s3cret-token")
            .output(),
    )
    .await
    .expect("ferry runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The unit the refused requests asked for is one a node makes with the token: only the
    // token stood in the way.
    let (path, valid) = CHANGES[3];
    let with_token = request_with("POST", path, Some("s3cret-token"), valid);
    let (code, body) = raw_http(&t3, &with_token).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(status_json_with(&t3, "s3cret-token").await["units"], 1);

    // A token in the environment replaces the file's `admin_token_file`: one FERRY_ADMIN_TOKEN
    // for the node and the commands.
    let ready = processes
        .start_with(
            "t4",
            &wide,
            tmp.path(),
            &[
                ("FERRY_ID", "t4"),
                ("FERRY_ADMIN_TOKEN", "env-token"),
                ("FERRY_DRAIN_GRACE_MS", "0"),
            ],
        )
        .await;
    let t4 = format!("127.0.0.1:{}", ready.admin.expect("admin on").port());
    assert_eq!(status_json_with(&t4, "env-token").await["node"], "t4");
    let (code, _) = raw_http(&t4, &request("GET", "/status", Some("s3cret-token"))).await;
    assert_eq!(code, 401, "the file's token is no longer the node's");

    for (name, status, log) in processes.terminate_all().await {
        closed_without_drain(&name, status, &log);
    }
}

/// `ferry status --json ADDR` with FERRY_ADMIN_TOKEN set to `token`, parsed.
async fn status_json_with(addr: &str, token: &str) -> Value {
    let out = within(
        "ferry status with a token",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["status", "--json", addr])
            .env("FERRY_ADMIN_TOKEN", token)
            .output(),
    )
    .await
    .expect("ferry runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// What a plain HTTP client gets for `request`: every byte until the connection closes.
async fn plain_answer(addr: &str, request: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("admin endpoint reachable");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut answer = Vec::new();
    // A reset also ends it: what came before is the answer.
    let _ = within("the connection to close", stream.read_to_end(&mut answer)).await;
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_admin_tls_the_endpoint_answers_https_checked_against_the_cluster_ca_and_the_token_still_rules()
 {
    let tmp = TempDir::new("admin-tls");
    let certs_dir = tmp.path().join("certs");
    certs(&certs_dir, "t4,t5");
    // Another cluster, with a certificate of the same node id.
    let other_dir = tmp.path().join("other");
    certs(&other_dir, "t4");
    std::fs::write(tmp.path().join("admin.token"), "tls-token\n").expect("token file");
    let config = tmp.path().join("t4.toml");
    std::fs::write(
        &config,
        "id = \"t4\"\ncerts = \"certs\"\nadmin_token_file = \"admin.token\"\n",
    )
    .expect("config");
    // `admin_tls` from the environment, as a container sets it.
    let mut processes = Processes::default();
    let t4 = processes
        .start_with(
            "t4",
            &config,
            tmp.path(),
            &[("FERRY_DRAIN_GRACE_MS", "0"), ("FERRY_ADMIN_TLS", "true")],
        )
        .await
        .admin();
    let ca_path = certs_dir.join("ca.pem");
    let ca = ca_path.to_str().expect("utf-8");
    let other_ca = other_dir.join("ca.pem");
    let other_ca = other_ca.to_str().expect("utf-8");
    let token_file = tmp.path().join("admin.token");
    let token_file = token_file.to_str().expect("utf-8");

    // With the cluster CA: the status of any node of the cluster, or of node t4 by name; the
    // CA from the environment works as the flag does.
    let out = run_ferry(&["status", &t4, "--admin-ca", ca]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("node t4 "),
        "{}",
        text(&out.stdout)
    );
    let out = run_ferry(&["status", &t4, "--admin-ca", ca, "--admin-node", "t4"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = within(
        "ferry status with the CA from the environment",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["status", "--json", &t4])
            .env("FERRY_ADMIN_CA", ca)
            .output(),
    )
    .await
    .expect("ferry runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(s["node"], "t4");

    // Refused: another node's name, another cluster's CA, and no CA at all (plain HTTP).
    let refusals = [
        (
            vec!["status", &t4, "--admin-ca", ca, "--admin-node", "t5"],
            "TLS handshake",
        ),
        (vec!["status", &t4, "--admin-ca", other_ca], "TLS handshake"),
        (vec!["status", &t4], "admin_tls"),
    ];
    for (args, said) in refusals {
        let out = run_ferry(&args).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    // A plain HTTP request, a probe's among them, gets no HTTP answer.
    for path in ["/healthz", "/status"] {
        let answer = plain_answer(&t4, &get(path)).await;
        assert!(
            !answer.starts_with(b"HTTP/"),
            "plain GET {path}: {}",
            text(&answer)
        );
    }

    // Over HTTPS the token rules hold: every change without it, or with a wrong one, is 401.
    for token in [None, Some("wrong"), Some("tls-tokenX")] {
        for path in ["/relocate", "/shutdown", "/resume", "/units"] {
            let (code, body) = raw_https(&t4, &ca_path, &request("POST", path, token)).await;
            assert_eq!(code, 401, "POST {path} with {token:?}: {body}");
            let error: Value = serde_json::from_str(&body).expect("a JSON error");
            assert!(
                error["error"].as_str().is_some_and(|e| e.contains("token")),
                "{body}"
            );
        }
    }
    // Nothing changed; the probes answer over HTTPS.
    let (code, body) = raw_https(&t4, &ca_path, &get("/status")).await;
    assert_eq!(code, 200, "{body}");
    let s: Value = serde_json::from_str(&body).expect("status JSON");
    assert_eq!(
        (s["state"].as_str(), &s["last_drain"]),
        (Some("Serving"), &Value::Null)
    );
    assert_eq!(raw_https(&t4, &ca_path, &get("/healthz")).await.0, 200);
    assert_eq!(raw_https(&t4, &ca_path, &get("/readyz")).await.0, 200);
    // The CLI over HTTPS: refused without the token, a drain with it.
    let out = run_ferry(&["drain", &t4, "--admin-ca", ca]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("401"), "{}", text(&out.stderr));
    let out = run_ferry(&[
        "drain",
        &t4,
        "--admin-ca",
        ca,
        "--admin-token-file",
        token_file,
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (code, body) = raw_https(&t4, &ca_path, &get("/readyz")).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("Relocated"), "{body}");
    // And a shutdown: refused without the token, done with it from the environment.
    let out = run_ferry(&["shutdown", &t4, "--admin-ca", ca]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("401"), "{}", text(&out.stderr));
    assert!(processes.running(0), "a refused shutdown stops nothing");
    let out = within(
        "ferry shutdown with the token from the environment",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["shutdown", &t4, "--admin-ca", ca])
            .env("FERRY_ADMIN_TOKEN", "tls-token")
            .output(),
    )
    .await
    .expect("ferry runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (name, status, log) = processes.wait(0).await;
    assert_eq!(status.code(), Some(0), "{name}:\n{log}");
}
