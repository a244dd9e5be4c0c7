//! `ferry drain ADDR`: moves every unit off a node through its admin endpoint, showing progress,
//! and exits 0 only when all of them moved.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use ferry_host::admin::wire::{
    DrainReport, Mode, Outcome, ProgressBody, RelocateRequest, StatusBody, advice, millis,
};
use ferry_host::admin::{AdminClient, ClientError};

/// The exit code of a drain that ended Blocked: the units that stayed run on the node again.
pub const EXIT_BLOCKED: u8 = 3;
/// The exit code of a drain that ended Undecided: some units wait, running nowhere, for the
/// location store to say whether they moved.
pub const EXIT_UNDECIDED: u8 = 4;

/// How often progress is read from `/status` while the drain runs.
const POLL: Duration = Duration::from_millis(200);

/// The exit codes, for `--help`.
const EXIT_CODES: &str = "Exit codes: 0 every unit moved (Relocated); 1 the drain did not run \
    (bad address, node unreachable, request refused) or the node went away during it; 2 bad \
    arguments; 3 Blocked: some units stayed and run on the node again (the reason is printed); \
    4 Undecided: some units wait for the location store to say whether they moved.";

/// Which node, and how to drain it.
#[derive(Args, Debug, Clone)]
#[command(after_help = EXIT_CODES)]
pub struct DrainArgs {
    /// The node's admin endpoint, HOST:PORT (the admin= part of its ready line).
    addr: String,
    #[command(flatten)]
    access: crate::admin_access::AdminArgs,
    /// A rolling update: move the units only to nodes of this application version.
    #[arg(long, value_name = "VERSION")]
    rolling_update: Option<String>,
    /// How long the drain may take, such as 500ms, 30s, 2m or 1h; units still there then stay.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::durations::parse)]
    deadline: Duration,
}

/// Why the drain did not move every unit.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The request did not get through.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The drain ended with units left on the node.
    #[error(
        "the drain of {addr} was blocked ({reason:?}): {} stayed on the node and run there again; {advice}{resumable}",
        units(*.stayed)
    )]
    Blocked {
        /// The node's admin address.
        addr: String,
        /// Why the node said the drain was blocked.
        reason: ferry::BlockedReason,
        /// How many units stayed.
        stayed: usize,
        /// What to do.
        advice: &'static str,
        /// The drained nodes `ferry resume` would bring back, when that is the way out.
        resumable: String,
    },
    /// The deadline passed with units past the point of no return whose owner the store did not
    /// say.
    #[error(
        "the drain of {addr} hit its deadline while the location store could not say who owns {}: they are held, running nowhere, and open where the store says once it answers; {} stayed on the node; check the store's health",
        units(*.held),
        units(*.stayed)
    )]
    Undecided {
        /// The node's admin address.
        addr: String,
        /// How many units are held.
        held: usize,
        /// How many stayed.
        stayed: usize,
    },
}

impl DrainError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            DrainError::Client(_) => 1,
            DrainError::Blocked { .. } => EXIT_BLOCKED,
            DrainError::Undecided { .. } => EXIT_UNDECIDED,
        }
    }

    /// The error for a drain that did not relocate everything, if it did not.
    pub fn from_report(addr: &str, report: &DrainReport) -> Option<DrainError> {
        match report.outcome {
            Outcome::Relocated => None,
            Outcome::Blocked => {
                let reason = report
                    .reason
                    .unwrap_or(ferry::BlockedReason::RelocationFailed);
                let resumable = if report.drained_peers.is_empty() {
                    String::new()
                } else {
                    format!(" (drained nodes: {})", report.drained_peers.join(", "))
                };
                Some(DrainError::Blocked {
                    addr: addr.to_owned(),
                    reason,
                    stayed: report.stayed.len(),
                    advice: advice(reason),
                    resumable,
                })
            }
            Outcome::Undecided => Some(DrainError::Undecided {
                addr: addr.to_owned(),
                held: report.undecided.len(),
                stayed: report.stayed.len(),
            }),
        }
    }
}

/// Drains the node, shows its progress on stderr, and prints the result.
pub async fn run(args: DrainArgs) -> Result<(), DrainError> {
    let client = args.access.client(&args.addr)?;
    let (mode, version) = match args.rolling_update {
        Some(version) => (Mode::RollingUpdate, Some(version)),
        None => (Mode::Maintenance, None),
    };
    let request = RelocateRequest {
        mode,
        version,
        deadline_ms: Some(millis(args.deadline)),
    };
    let report = with_progress(&client, "draining", client.relocate(&request)).await?;
    if let Some(error) = DrainError::from_report(client.addr(), &report) {
        return Err(error);
    }
    println!("{}", relocated(client.addr(), &report));
    Ok(())
}

/// What a drain that moved every unit prints.
pub fn relocated(addr: &str, report: &DrainReport) -> String {
    if report.moved == 0 {
        return format!(
            "relocated: {addr} hosted no unit, so nothing moved; it is safe to shut down"
        );
    }
    format!(
        "relocated: {} moved off {addr} ({}) in {} (a room and each player in it are a unit \
         each); it hosts none and is safe to shut down",
        units(report.moved),
        bytes(report.bytes),
        took(report.elapsed_ms)
    )
}

/// Awaits `operation`, showing the node's drain progress meanwhile: a bar when stderr is a
/// terminal, a line per change otherwise.
pub async fn with_progress<T>(
    client: &AdminClient,
    what: &str,
    operation: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    let mut display = Display::new(client.addr(), what);
    let mut operation = std::pin::pin!(operation);
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            result = &mut operation => {
                display.finish();
                return result;
            }
            _ = poll.tick() => {
                // Progress is a courtesy: a status that fails to come does not stop the drain.
                if let Ok(status) = client.status::<StatusBody>().await
                    && status.running.is_some()
                {
                    display.show(status.progress);
                }
            }
        }
    }
}

/// Progress on stderr.
enum Display {
    Bar(ProgressBar),
    Lines {
        prefix: String,
        last: Option<ProgressBody>,
    },
}

impl Display {
    fn new(addr: &str, what: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Display::Lines {
                prefix: format!("{what} {addr}"),
                last: None,
            };
        }
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} units moved {msg} ({elapsed})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(format!("{what} {addr}"));
        Display::Bar(bar)
    }

    fn show(&mut self, progress: ProgressBody) {
        match self {
            Display::Bar(bar) => {
                bar.set_length(progress.total as u64);
                bar.set_position(progress.moved as u64);
                bar.set_message(format!(
                    "{} failed, {}",
                    progress.failed,
                    bytes(progress.bytes)
                ));
            }
            Display::Lines { prefix, last } => {
                if *last != Some(progress) {
                    eprintln!(
                        "{prefix}: {}/{} units moved, {} failed, {}",
                        progress.moved,
                        progress.total,
                        progress.failed,
                        bytes(progress.bytes)
                    );
                    *last = Some(progress);
                }
            }
        }
    }

    fn finish(&self) {
        if let Display::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// A count of units for people: `1 unit`, `2 units`.
pub fn units(n: usize) -> String {
    if n == 1 {
        "1 unit".to_owned()
    } else {
        format!("{n} units")
    }
}

/// A duration for people: milliseconds below a second, else seconds to a tenth.
pub fn took(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// A byte count for people: B, KiB or MiB.
pub fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    match n {
        n if n < KIB => format!("{n} B"),
        n if n < KIB * KIB => format!("{:.1} KiB", n as f64 / KIB as f64),
        n => format!("{:.1} MiB", n as f64 / (KIB * KIB) as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_well() {
        assert_eq!(bytes(12), "12 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn unit_counts_read_well() {
        assert_eq!(units(0), "0 units");
        assert_eq!(units(1), "1 unit");
        assert_eq!(units(30), "30 units");
    }
}
