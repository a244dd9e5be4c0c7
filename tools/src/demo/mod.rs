//! `ferry demo`: a three-node cluster in this process, sample game rooms full of bot players
//! connected as real clients, one node drained while they play, and a report of what moved and
//! what the players saw.
//!
//! - [`rooms`]: opens the sample rooms across the nodes, with their player Actors (the bench
//!   opens its game rooms with it too).
//! - `report`: the report, as text or as JSON (its shape is documented in docs/demo.md).

mod report;
pub mod rooms;

use std::time::{Duration, Instant};

use crate::bots::Team;
use crate::bots::games::{self, Past};
use crate::bots::player::Tally;
use crate::drain_watch;
use crate::local_cluster::{ClusterError, LocalCluster, StoreChoice};
use clap::Args;
use ferry::{RelocateOptions, UnitError};

use self::report::Report;

/// Nodes in the demo cluster.
const NODES: usize = 3;

/// How long a drain may take before it gives up on the units still there.
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);

/// Sizes and length of the demo; the defaults finish in about ten seconds.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Rooms of each sample game (chat, FPS, bingo).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=200))]
    rooms: u16,
    /// Bot players in each room.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=16))]
    players: u16,
    /// How long the bots play, such as 10s or 2m; the drain starts after the first third.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::durations::parse)]
    duration: Duration,
    /// The location store: `memory` (in this process), a redis:// URL or an etcd:// list.
    #[arg(long, default_value = "memory", value_parser = StoreChoice::parse)]
    store: StoreChoice,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The cluster did not start.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A room or player could not be opened.
    #[error("opening the sample rooms failed: {0}")]
    Rooms(#[from] UnitError),
    /// An id was not valid.
    #[error(transparent)]
    Id(#[from] ferry::InvalidId),
    /// The drain did not move every unit.
    #[error(
        "the drain of {node} ended {outcome}; the report above counts what stayed, and the log at warn level names each unit and why"
    )]
    Drain {
        /// The node drained.
        node: String,
        /// How it ended.
        outcome: String,
    },
    /// The bots saw inputs lost, duplicated or reordered, or could not play.
    #[error("{0}; this is a bug in Ferry: please report it with the output above")]
    Players(String),
    /// The report could not be written.
    #[error("could not write the report: {0}")]
    Json(#[from] serde_json::Error),
}

/// Runs the demo and prints its report; fails if anything a player would notice went wrong.
pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    let started = Instant::now();
    let cluster = LocalCluster::start(NODES, &args.store, || {
        games::registry(games::StandbyChoice::Confirmed)
    })
    .await?;
    let result = play(&cluster, &args).await;
    cluster.shutdown().await;
    let (drained, tallies) = result?;
    let report = Report::new(&args, &drained, &tallies, started.elapsed());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    if !drained.relocated() {
        let summary = drained.summary();
        return Err(DemoError::Drain {
            node: summary.node,
            outcome: summary.outcome,
        });
    }
    match report.bots.problem() {
        Some(problem) => Err(DemoError::Players(problem)),
        None => Ok(()),
    }
}

/// Opens the rooms, lets the bots play, drains the first node a third of the way in, and
/// returns the drain and every bot's tally.
async fn play(
    cluster: &LocalCluster,
    args: &DemoArgs,
) -> Result<(drain_watch::Drained, Vec<Tally>), DemoError> {
    let players = rooms::open::<DemoError>(
        &cluster.nodes,
        usize::from(args.rooms),
        usize::from(args.players),
    )
    .await?;
    let mut team = Team::new();
    for (game, me) in players {
        let config = cluster.access.client(team.size());
        team.add(game, config, me, Past::New);
    }
    let play_for = args.duration;
    let play_until = tokio::time::Instant::now() + play_for;
    tokio::time::sleep(play_for / 3).await;
    let options = RelocateOptions {
        deadline: DRAIN_DEADLINE,
        ..RelocateOptions::default()
    };
    let drained = drain_watch::drain(&cluster.nodes[0], options).await;
    tokio::time::sleep_until(play_until).await;
    Ok((drained, team.finish().await))
}
