//! `ferry shutdown ADDR`: drains a node through its admin endpoint, then stops it; the node's
//! process exits once it has answered.

use std::time::Duration;

use clap::Args;

use crate::drain_cmd::{DrainError, EXIT_BLOCKED, EXIT_UNDECIDED, with_progress};
use ferry_host::admin::ClientError;
use ferry_host::admin::wire::{ShutdownRequest, millis};

/// The exit codes, for `--help`.
const EXIT_CODES: &str = "Exit codes: 0 every unit moved and the node stopped cleanly; 1 the \
    shutdown did not run (bad address, node unreachable, request refused) or the node went \
    away before it answered; 2 bad arguments; 3 \
    the node stopped, but its drain was blocked, so the units that stayed were closed with it; \
    4 the node stopped, but not cleanly (units whose move the store had not decided at the \
    deadline, or records not released).";

/// Which node, and how long it may take.
#[derive(Args, Debug, Clone)]
#[command(after_help = EXIT_CODES)]
pub struct ShutdownArgs {
    /// The node's admin endpoint, HOST:PORT (the admin= part of its ready line).
    addr: String,
    #[command(flatten)]
    access: crate::admin_access::AdminArgs,
    /// How long the drain and the stop may take together, such as 500ms, 30s or 2m.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::durations::parse)]
    deadline: Duration,
}

/// Why the node did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    /// The request did not get through.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The node stopped, but its drain did not move every unit.
    #[error("{addr} stopped, but {drain}")]
    Drain {
        /// The node's admin address.
        addr: String,
        /// How the drain ended.
        drain: DrainError,
    },
    /// The node stopped, but not cleanly.
    #[error(
        "{addr} stopped, but not cleanly ({outcome:?}): some unit was closed at the deadline or \
         some record was not released (recovery clears those); its log says which"
    )]
    Unclean {
        /// The node's admin address.
        addr: String,
        /// How the stop ended.
        outcome: ferry::ShutdownOutcome,
    },
}

impl ShutdownError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ShutdownError::Client(_) => 1,
            ShutdownError::Drain { drain, .. } if drain.exit_code() == EXIT_BLOCKED => EXIT_BLOCKED,
            ShutdownError::Drain { .. } | ShutdownError::Unclean { .. } => EXIT_UNDECIDED,
        }
    }
}

/// Drains and stops the node, showing the drain's progress on stderr.
pub async fn run(args: ShutdownArgs) -> Result<(), ShutdownError> {
    let client = args.access.client(&args.addr)?;
    let request = ShutdownRequest {
        deadline_ms: Some(millis(args.deadline)),
    };
    let report = with_progress(&client, "shutting down", client.shutdown(&request)).await?;
    let addr = client.addr().to_owned();
    if let Some(drain) = DrainError::from_report(&addr, &report.drain) {
        return Err(ShutdownError::Drain { addr, drain });
    }
    if report.shutdown != ferry::ShutdownOutcome::Stopped {
        return Err(ShutdownError::Unclean {
            addr,
            outcome: report.shutdown,
        });
    }
    println!("{}", stopped(&addr, report.drain.moved));
    Ok(())
}

/// What a clean shutdown that moved `moved` units first prints.
pub fn stopped(addr: &str, moved: usize) -> String {
    match moved {
        0 => format!("stopped: {addr} had no unit left to move and stopped cleanly"),
        moved => format!(
            "stopped: {addr} moved its last {} off and stopped cleanly",
            crate::drain_cmd::units(moved)
        ),
    }
}
