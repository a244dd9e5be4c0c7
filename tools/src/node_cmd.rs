//! `ferry node`: one node process hosting every sample game, with the host library around it
//! (`ferry_host`, which says what the process does from start to stop; its admin endpoint serves
//! the play page, which plays any of them).

use std::path::PathBuf;

use clap::Args;
use ferry_host::{ConfigError, Host, HostError};

use crate::bots::games::StandbyChoice;

/// Which config file to run.
#[derive(Args, Debug, Clone)]
pub struct NodeArgs {
    /// The node's TOML config (keys and defaults: docs/configuration.md); every key can be
    /// overridden as FERRY_<KEY> in the environment.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The standby the sample games' rooms keep: confirmed (a crash loses nothing a player was
    /// told), periodic (100 ms) or none.
    #[arg(long, value_enum, default_value = "confirmed")]
    standby: StandbyChoice,
}

/// Why the node did not start, or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The config is missing or wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The log could not be set up.
    #[error(transparent)]
    Logs(#[from] ferry_host::logs::LogsError),
    /// The node failed to start or stopped on its own.
    #[error(transparent)]
    Host(#[from] HostError),
}

/// Runs the node of `args.config` until it is told to stop.
pub async fn run(args: NodeArgs) -> Result<(), NodeError> {
    let settings = ferry_host::config::load(&args.config)?;
    // Kept to the end: dropping it sends the spans not yet exported.
    let _logs = ferry_host::logs::install(
        settings.log_format,
        settings.otlp_endpoint.as_deref(),
        &settings.id,
    )?;
    // Every sample, as the demo's nodes host them, so `ferry bots` can play any of them.
    Host::new(settings, crate::bots::games::registry(args.standby))
        .run()
        .await?;
    Ok(())
}
