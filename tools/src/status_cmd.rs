//! `ferry status ADDR`: what a node is doing, from its admin endpoint.

use clap::Args;

use crate::drain_cmd::{bytes, took, units};
use ferry_host::admin::ClientError;
use ferry_host::admin::wire::{DrainReport, StandbyBody, StatusBody};

/// Which node, and how to print it.
#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// The node's admin endpoint, HOST:PORT (the admin= part of its ready line).
    addr: String,
    #[command(flatten)]
    access: crate::admin_access::AdminArgs,
    /// Print the node's answer as JSON, as `GET /status` gives it.
    #[arg(long)]
    json: bool,
}

/// Why the status could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The request did not get through.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The JSON could not be printed.
    #[error("cannot print the status as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Prints the node's status.
pub async fn run(args: StatusArgs) -> Result<(), StatusError> {
    let client = args.access.client(&args.addr)?;
    if args.json {
        let status: serde_json::Value = client.status().await?;
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", render(&client.status::<StatusBody>().await?));
    }
    Ok(())
}

/// The status as lines for a person.
fn render(s: &StatusBody) -> String {
    let mut out = format!("node {} (version {}): {}\n", s.node, s.app_version, s.state);
    out.push_str(&format!("  units             {}\n", s.units));
    if let Some(sessions) = s.sessions {
        out.push_str(&format!("  client sessions   {sessions}\n"));
    }
    let peers: Vec<String> = s
        .peers
        .iter()
        .map(|p| format!("{} {}", p.node, p.link))
        .collect();
    let peers = if peers.is_empty() {
        "none".to_owned()
    } else {
        peers.join(", ")
    };
    out.push_str(&format!("  peers             {peers}\n"));
    let p = s.progress;
    match &s.running {
        Some(r) => out.push_str(&format!(
            "  running           {} ({}{}) for {:.1} s: {}/{} units moved, {} failed, {}\n",
            r.operation,
            r.mode.name(),
            r.version
                .as_ref()
                .map(|v| format!(" to version {v}"))
                .unwrap_or_default(),
            r.elapsed_ms as f64 / 1000.0,
            p.moved,
            p.total,
            p.failed,
            bytes(p.bytes)
        )),
        None => out.push_str("  running           nothing\n"),
    }
    out.push_str(&format!(
        "  last drain        {}\n",
        s.last_drain
            .as_ref()
            .map_or("none yet".to_owned(), describe)
    ));
    if let Some(w) = &s.recovery_waiting {
        let units = w.units.map_or("the units".to_owned(), units);
        out.push_str(&format!(
            "  recovery          waiting: {units} of dead node {} cannot be rebuilt: {}\n",
            w.dead.join(", "),
            w.reason
        ));
    }
    out.push_str(&format!("  standby           {}\n", standby(&s.standby)));
    out.push_str(&format!(
        "  safe to shut down {}\n",
        if s.safe_to_shutdown { "yes" } else { "no" }
    ));
    out
}

/// The node's standbys in a line: how many of its rooms a crash would keep, how far behind the
/// worst is, and what the checkpoints cost so far.
fn standby(s: &StandbyBody) -> String {
    let oldest = s
        .oldest_unheld_ms
        .map_or("nothing unheld".to_owned(), |ms| {
            format!("oldest unheld {}", took(ms))
        });
    let rooms = if s.rooms == 1 { "room" } else { "rooms" };
    let copies = if s.copies == 1 { "copy" } else { "copies" };
    let checkpoints = if s.checkpoints_sent == 1 {
        "checkpoint"
    } else {
        "checkpoints"
    };
    let alone = if s.alone > 0 {
        format!(", {} with no node to hold a copy", grouped(s.alone as u64))
    } else {
        String::new()
    };
    format!(
        "{} {rooms}, {} current, {} behind{alone}, {oldest}; {} {copies} kept for others; {} {checkpoints}, {} sent",
        grouped(s.rooms as u64),
        grouped(s.current as u64),
        grouped(s.behind as u64),
        grouped(s.copies as u64),
        grouped(s.checkpoints_sent),
        bytes(s.bytes_sent)
    )
}

/// A count with its thousands grouped, as `1,234`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// One drain report in a line.
fn describe(r: &DrainReport) -> String {
    let mut line = format!("{:?}", r.outcome);
    if let Some(reason) = r.reason {
        line.push_str(&format!(" ({reason:?})"));
    }
    line.push_str(&format!(
        ": {} moved ({}) in {}",
        units(r.moved),
        bytes(r.bytes),
        took(r.elapsed_ms)
    ));
    if !r.stayed.is_empty() {
        line.push_str(&format!(", {} stayed", r.stayed.len()));
    }
    if !r.undecided.is_empty() {
        line.push_str(&format!(", {} undecided", r.undecided.len()));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_host::admin::wire::{ProgressBody, RecoveryWaiting};

    fn status(units: usize, safe: bool, waiting: Option<RecoveryWaiting>) -> StatusBody {
        StatusBody {
            node: "p1".into(),
            state: "Relocated".into(),
            app_version: "7".into(),
            units,
            sessions: None,
            peers: Vec::new(),
            progress: ProgressBody {
                total: 0,
                moved: 0,
                failed: 0,
                bytes: 0,
            },
            safe_to_shutdown: safe,
            running: None,
            last_drain: None,
            recovery_waiting: waiting,
            standby: StandbyBody::default(),
        }
    }

    #[test]
    fn the_standby_line_says_what_a_crash_would_keep_and_what_it_costs() {
        let mut shown = status(45, false, None);
        shown.standby = StandbyBody {
            rooms: 45,
            current: 45,
            behind: 0,
            alone: 0,
            oldest_unheld_ms: Some(80),
            copies: 30,
            checkpoints_sent: 1_234,
            bytes_sent: 5_872_026,
        };
        let text = render(&shown);
        assert!(
            text.contains(
                "  standby           45 rooms, 45 current, 0 behind, oldest unheld 80 ms; 30 copies kept for others; 1,234 checkpoints, 5.6 MiB sent\n"
            ),
            "{text}"
        );
        shown.standby = StandbyBody {
            rooms: 1,
            alone: 1,
            copies: 1,
            checkpoints_sent: 1,
            ..StandbyBody::default()
        };
        let text = render(&shown);
        assert!(
            text.contains(
                "  standby           1 room, 0 current, 0 behind, 1 with no node to hold a copy, nothing unheld; 1 copy kept for others; 1 checkpoint, 0 B sent\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }

    #[test]
    fn recovery_that_waits_is_shown_with_what_to_do_and_only_then() {
        let shown = render(&status(0, true, None));
        assert!(!shown.contains("recovery"), "{shown}");
        let waiting = RecoveryWaiting {
            dead: vec!["p3".into()],
            units: Some(1),
            reason: "start a node".into(),
        };
        let shown = render(&status(0, true, Some(waiting)));
        assert!(
            shown.contains(
                "  recovery          waiting: 1 unit of dead node p3 cannot be rebuilt: start a node\n"
            ),
            "{shown}"
        );
    }
}
