//! The `ferry` command: the demo, bot players, node processes and what operators do to them.
//!
//! Layout, in the order a user meets them:
//! - [`demo`]: a three-node cluster in this process with bot players, a drain while they play,
//!   and a report of what the players saw; built from [`local_cluster`], [`bots`],
//!   [`drain_watch`] and [`percentiles`].
//! - [`bots`]: bot players, real clients that check every input and tick they see.
//! - [`bench`]: the end-to-end benchmark: moves and a drain while bots play, beside the
//!   stop-the-room baseline; built from the same parts as the demo, and [`move_reports`].
//! - [`durations`]: durations as operators type them (`500ms`, `30s`, `1m30s`, `1h`), on every command.
//! - [`certs`]: a development cluster CA and node certificates, written as files.
//! - [`node_cmd`]: one node process, from its config file until SIGTERM, on the host library
//!   (`ferry-host`: the config, the gateway, the admin endpoint and the signals live there).
//! - [`status_cmd`], [`drain_cmd`], [`resume_cmd`], [`shutdown_cmd`]: what an operator does to a
//!   running node, through the host library's admin client, with [`admin_access`]: the token
//!   they send, and the cluster CA they check the endpoint's HTTPS against.

/// A node allocates and frees small buffers at a high rate (frames, messages, captures, tasks),
/// from many threads: with mimalloc in place of the system's allocator, a drain of 10,000 rooms
/// ran 1.5 to 2 times as fast on memory, 1.4 to 2 on Redis (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin_access;
mod bench;
mod bots;
mod certs;
mod demo;
#[cfg(test)]
mod doc_tests;
mod drain_cmd;
mod drain_watch;
mod durations;
mod local_cluster;
mod move_reports;
mod node_cmd;
mod percentiles;
mod resume_cmd;
mod shutdown_cmd;
mod status_cmd;

use clap::{Parser, Subcommand};

/// Ferry: game servers whose live rooms and players move between hosts while they run.
#[derive(Parser)]
#[command(name = "ferry", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a three-node cluster in this process with bot players, drain a node while they play,
    /// and print what moved and what the players saw.
    Demo(demo::DemoArgs),
    /// Make a development cluster CA and a certificate for each node.
    Certs(certs::CertsArgs),
    /// Run one node of a cluster, configured by a TOML file, until SIGTERM or Ctrl-C.
    Node(node_cmd::NodeArgs),
    /// Show what a running node is doing, from its admin endpoint.
    Status(status_cmd::StatusArgs),
    /// Move every unit off a running node (maintenance or a rolling update).
    Drain(drain_cmd::DrainArgs),
    /// Put a drained node back into service, so it takes units again.
    Resume(resume_cmd::ResumeArgs),
    /// Drain a running node, then stop it.
    Shutdown(shutdown_cmd::ShutdownArgs),
    /// Play rooms of a running cluster with bot players through its client gateways, and report
    /// what they saw.
    Bots(bots::cmd::BotsArgs),
    /// Measure room pauses, a drain and what bot players see, each beside the stop-the-room
    /// handoff on the same rooms; print a table (or JSON), and write an SVG chart.
    Bench(bench::BenchArgs),
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Demo(#[from] demo::DemoError),
    #[error(transparent)]
    Certs(#[from] certs::CertsError),
    #[error(transparent)]
    Node(#[from] node_cmd::NodeError),
    #[error(transparent)]
    Status(#[from] status_cmd::StatusError),
    #[error(transparent)]
    Drain(#[from] drain_cmd::DrainError),
    #[error(transparent)]
    Resume(#[from] resume_cmd::ResumeError),
    #[error(transparent)]
    Shutdown(#[from] shutdown_cmd::ShutdownError),
    #[error(transparent)]
    Bots(#[from] bots::cmd::BotsError),
    #[error(transparent)]
    Bench(#[from] bench::BenchError),
}

impl Failure {
    /// The process exit code: 1, or a command's own code for an outcome scripts tell apart.
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Drain(error) => error.exit_code(),
            Failure::Shutdown(error) => error.exit_code(),
            _ => 1,
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // A node installs the log format its config names; every other command logs as text.
    if !matches!(cli.command, Command::Node(_)) {
        ferry_host::logs::init(ferry_host::logs::LogFormat::Text);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: could not start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await.map_err(Failure::from),
            Command::Certs(args) => certs::run(args).map_err(Failure::from),
            Command::Node(args) => node_cmd::run(args).await.map_err(Failure::from),
            Command::Status(args) => status_cmd::run(args).await.map_err(Failure::from),
            Command::Drain(args) => drain_cmd::run(args).await.map_err(Failure::from),
            Command::Resume(args) => resume_cmd::run(args).await.map_err(Failure::from),
            Command::Shutdown(args) => shutdown_cmd::run(args).await.map_err(Failure::from),
            Command::Bots(args) => bots::cmd::run(args).await.map_err(Failure::from),
            Command::Bench(args) => bench::run(args).await.map_err(Failure::from),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // As a JSON event when a node's log is JSON, so each line of it is one object.
            ferry_host::logs::print_error(&error.to_string());
            std::process::ExitCode::from(error.exit_code())
        }
    }
}
