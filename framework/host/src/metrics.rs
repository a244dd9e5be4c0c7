//! The process's Prometheus recorder: fixed histogram buckets for every duration, and the help
//! text of every metric, so that `promtool check metrics` and dashboards read them as they are.

use ferry::NodeId;
use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Why the metrics recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot record metrics: {0}")]
pub struct MetricsError(String);

/// The bucket bounds, in seconds, of every histogram (pauses and move phases): from 100 µs to
/// 30 s, so a room pause of any length lands in a bucket that says how long it was.
const BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Installs the process's Prometheus recorder and returns the handle `GET /metrics` renders.
/// Durations are histograms with fixed buckets, not summaries: a summary's quantiles cover a
/// sliding window and read 0 a few minutes after the last drain, while buckets keep counting and
/// Prometheus works out quantiles over whatever range a dashboard asks. Upkeep runs at each
/// scrape and every second ([`spawn_upkeep`]).
///
/// Every series carries the label `node`, so that a cluster's series add up in one query.
pub fn install(node: &NodeId) -> Result<PrometheusHandle, MetricsError> {
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| MetricsError(e.to_string()))?
        .add_global_label("node", node.as_str())
        .install_recorder()
        .map_err(|e| MetricsError(e.to_string()))?;
    describe();
    Ok(handle)
}

/// What each metric is, as kind, name and help text: the exporter writes them as `# TYPE` and
/// `# HELP` lines. docs/operations.md's table lists the same metrics.
pub const METRICS: &[(Kind, &str, &str)] = &[
    (
        Kind::Gauge,
        "ferry_node_state",
        "1 for the node's lifecycle state (label state), 0 for the others",
    ),
    (
        Kind::Gauge,
        "ferry_node_units",
        "Units (spots and actors) the node hosts",
    ),
    (
        Kind::Gauge,
        "ferry_node_sessions",
        "Game client sessions the node's gateway holds (gateways only)",
    ),
    (
        Kind::Gauge,
        "ferry_node_peers_ready",
        "Mesh peers with a link up",
    ),
    (
        Kind::Gauge,
        "ferry_node_safe_to_shutdown",
        "1 when stopping the node loses nothing",
    ),
    (
        Kind::Gauge,
        "ferry_drain_units",
        "Units in the current or last drain",
    ),
    (
        Kind::Gauge,
        "ferry_drain_moved_units",
        "Units of the current or last drain moved so far",
    ),
    (
        Kind::Gauge,
        "ferry_drain_failed_units",
        "Units of the current or last drain that failed to move",
    ),
    (
        Kind::Gauge,
        "ferry_drain_bytes",
        "Bytes of state the current or last drain moved",
    ),
    (
        Kind::Counter,
        "ferry_relocation_units_moved_total",
        "Moves off this node that succeeded",
    ),
    (
        Kind::Counter,
        "ferry_relocation_units_failed_total",
        "Moves off this node that failed; the unit stayed",
    ),
    (
        Kind::Counter,
        "ferry_relocation_bytes_total",
        "Bytes of state moved off this node",
    ),
    (
        Kind::Histogram,
        "ferry_relocation_interruption_seconds",
        "How long each moved unit was paused on this node, seal to cutover",
    ),
    (
        Kind::Histogram,
        "ferry_relocation_target_resume_seconds",
        "On the receiving node, commit to the unit running again",
    ),
    (
        Kind::Histogram,
        "ferry_relocation_phase_seconds",
        "Time of each phase of a move (label phase)",
    ),
    (
        Kind::Counter,
        "ferry_mesh_frames_lost_total",
        "Mesh frames a peer never acknowledged because it left or restarted",
    ),
    (
        Kind::Counter,
        "ferry_tells_lost_total",
        "Tells this node sent that were lost with a peer",
    ),
    (
        Kind::Counter,
        "ferry_route_lookup_tells_dropped_total",
        "Tells given up while the location store failed to give their route",
    ),
    (
        Kind::Counter,
        "ferry_tells_dropped_unreachable_total",
        "Tells given up because their unit's node could not be reached within the hops allowed",
    ),
    (
        Kind::Counter,
        "ferry_messages_total",
        "Messages (tells and requests) the node's units handled",
    ),
    (
        Kind::Histogram,
        "ferry_turn_seconds",
        "How long each turn of a unit took: a message, a tick or a callback",
    ),
    (
        Kind::Gauge,
        "ferry_standby_rooms",
        "Rooms the node owns that keep a standby",
    ),
    (
        Kind::Gauge,
        "ferry_standby_current_rooms",
        "Of those, rooms whose standby holds a recent checkpoint",
    ),
    (
        Kind::Gauge,
        "ferry_standby_behind_rooms",
        "Of those, rooms whose changes waited too long for their standby",
    ),
    (
        Kind::Gauge,
        "ferry_standby_alone_rooms",
        "Of those, rooms no node can hold a copy of now: a crash rebuilds them from nothing",
    ),
    (
        Kind::Gauge,
        "ferry_standby_oldest_unheld_seconds",
        "How long the oldest change not yet held by its standby has waited (0: none waits)",
    ),
    (
        Kind::Gauge,
        "ferry_standby_copies",
        "Standby copies the node keeps for rooms other nodes own",
    ),
    (
        Kind::Counter,
        "ferry_standby_checkpoints_total",
        "Checkpoints the node sent to its rooms' standbys",
    ),
    (
        Kind::Counter,
        "ferry_standby_checkpoint_bytes_total",
        "Checkpoint bytes the node sent to its rooms' standbys",
    ),
];

/// The Prometheus type of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A count that only rises.
    Counter,
    /// Observations in buckets, here always durations in seconds.
    Histogram,
}

/// How often histogram samples are folded into their buckets between scrapes, so that a busy
/// node's per-turn samples take memory for at most this long.
const UPKEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// Folds histogram samples into their buckets every [`UPKEEP`] until the task is aborted.
pub fn spawn_upkeep(handle: PrometheusHandle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP);
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    })
}

/// Registers the help text of every metric with the recorder.
fn describe() {
    for (kind, name, help) in METRICS {
        match kind {
            Kind::Gauge => describe_gauge!(*name, *help),
            Kind::Counter => {
                describe_counter!(*name, *help);
                // From 0 at start, so `rate()` and alerts see the first one, not a new series.
                metrics::counter!(*name).increment(0);
            }
            Kind::Histogram => describe_histogram!(*name, Unit::Seconds, *help),
        }
    }
}

/// The process metrics Prometheus's client libraries name alike (`process_cpu_seconds_total`,
/// ...), read from `/proc` at each scrape and written as exposition text, labelled with `node`.
/// Empty where `/proc` cannot be read (not Linux).
pub fn process_text(node: &NodeId) -> String {
    let Some(process) = Process::read() else {
        return String::new();
    };
    let node = node.as_str().replace('\\', "\\\\").replace('"', "\\\"");
    let mut text = String::new();
    let series = [
        (
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time the process spent, in seconds",
            process.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the process, in bytes",
            process.resident_bytes,
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "When the process started, in seconds since the Unix epoch",
            process.start_time,
        ),
        (
            "process_open_fds",
            "gauge",
            "File descriptors the process holds open",
            process.open_fds,
        ),
        (
            "process_threads",
            "gauge",
            "Threads of the process",
            process.threads,
        ),
    ];
    for (name, kind, help, value) in series {
        text.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{node=\"{node}\"}} {value}\n\n"
        ));
    }
    text
}

/// The CPU time this process has used so far, user and system, from `/proc` (`None` where it
/// cannot be read, off Linux): what a benchmark divides by its wall time to say how much of a core
/// a run took.
pub fn process_cpu_time() -> Option<std::time::Duration> {
    Process::read().map(|p| std::time::Duration::from_secs_f64(p.cpu_seconds))
}

/// What `/proc` says about this process.
struct Process {
    cpu_seconds: f64,
    resident_bytes: f64,
    start_time: f64,
    open_fds: f64,
    threads: f64,
}

impl Process {
    /// Linux's clock ticks per second in `/proc` (USER_HZ), the same on every architecture.
    const TICKS: f64 = 100.0;

    fn read() -> Option<Process> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces; the first
        // of them is field 3 of proc(5).
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        let cpu_seconds = (field(14)? + field(15)?) / Self::TICKS;
        let threads = field(20)?;
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<f64>()
            .ok()?;
        let start_time = boot + field(22)? / Self::TICKS;
        let resident_kib = std::fs::read_to_string("/proc/self/status")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<f64>()
            .ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
        Some(Process {
            cpu_seconds,
            resident_bytes: resident_kib * 1024.0,
            start_time,
            open_fds,
            threads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_metrics_are_read_from_proc() {
        let node = NodeId::new("n1").expect("node id");
        let text = process_text(&node);
        if !std::path::Path::new("/proc/self/stat").exists() {
            assert_eq!(text, "");
            return;
        }
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{text}");
        }
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes{node=\"n1\"} "))
            .and_then(|v| v.parse().ok())
            .expect("a resident size");
        assert!(
            rss > 1_000_000.0,
            "a test process holds more than 1 MB: {rss}"
        );
    }
}
