//! `ferry bench`: the end-to-end figures that criterion does not suit. A three-node cluster in this
//! process, bot players in FPS, chat and bingo rooms on one node, and rooms that carry state on another.
//! While the bots play, the rooms with state move one at a time and then are drained off their
//! node, each step beside the stop-the-room handoff on the same rooms; then the bots' own rooms
//! move. Prints a table, or JSON with `--json`; writes an SVG chart of the pause distribution on
//! request.
//!
//! Two other runs measure warm standbys instead: `--crash` kills the node the rooms play on and
//! reports what each room came back with and when ([`crash`]), and `--steady` measures what
//! keeping standbys costs while nothing fails ([`steady`]).
//!
//! Layout, in the order a run goes:
//! - [`rooms`]: the rooms that carry state, and the count each should have.
//! - [`one_by_one`]: rooms moved one at a time with a queue, beside the baseline.
//! - [`drains`]: every room drained off its node, beside the baseline handing them off.
//! - [`report`]: the table and the JSON.
//! - [`chart`]: the SVG chart of the pause distribution.
//! - [`crash`]: the crash run.
//! - [`steady`]: the standby run at rest.

mod chart;
mod crash;
mod drains;
mod one_by_one;
mod report;
mod rooms;
mod steady;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use ferry::relocation::protocol::MoveEnd;
use ferry::{Registry, UnitError, UnitId};
use ferry_benches::rooms::{ChangeRate, RoomError};
use serde::Serialize;

use self::report::Report;
use self::rooms::StateRooms;
use crate::bots::Team;
use crate::bots::games::{self, GameKind, Past};
use crate::local_cluster::{ClusterError, LocalCluster, StoreChoice};
use crate::move_reports::MoveRecord;

/// Nodes in the bench cluster: the rooms with state start on the first and move to the second
/// one at a time; the drain sends them to the second and third; the game rooms start on the third.
const NODES: usize = 3;

/// How long the bots play on once their rooms moved, so each sees ticks from the new node.
const PLAY_ON: Duration = Duration::from_secs(1);

/// Sizes and length of a run; the defaults take about a minute on two cores.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Rooms that carry state, on the node the bench drains.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rooms: u32,
    /// Bytes of state in each of those rooms.
    #[arg(long, default_value_t = 4_096, value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    state_bytes: u32,
    /// The share of each of those rooms' state that its turns rewrite a second while it runs,
    /// such as 0.1 (a tenth a second) or 1, or `every-turn` (all of it at every turn, the worst
    /// case for pre-copy).
    #[arg(long, value_name = "RATE", default_value = "0", value_parser = rooms::parse_change_rate)]
    change_rate: ChangeRate,
    /// Messages queued in a room when it moves (and buffered by the baseline meanwhile).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    queued: u32,
    /// FPS rooms and chat rooms (this many of each) that bots play in.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=100))]
    game_rooms: u16,
    /// Bot players in each game room.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=16))]
    players: u16,
    /// How long rooms move one at a time beside the baseline before the drain, such as 30s.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::durations::parse)]
    duration: Duration,
    /// The location store: `memory` (in this process), a redis:// URL or an etcd:// list.
    #[arg(long, default_value = "memory", value_parser = StoreChoice::parse)]
    store: StoreChoice,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write an SVG chart of the pause distribution to this file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["crash", "steady"])]
    svg: Option<PathBuf>,
    /// Instead of moves and a drain: kill the node the rooms play on, as a crash would, and
    /// report what each room came back with (its checkpoint's age, the confirmed inputs it
    /// lacks) and how long it took to play again.
    #[arg(long, conflicts_with = "steady")]
    crash: bool,
    /// Instead of moves and a drain: measure the CPU and the traffic of the rooms' standbys
    /// while nothing fails, beside the same rooms with no standby (use `--change-rate` for how
    /// much of each room changes a second).
    #[arg(long)]
    steady: bool,
    /// The standby the rooms of `--crash` and `--steady` keep.
    #[arg(long, value_enum, default_value = "periodic")]
    standby: StandbyChoice,
    /// The nodes' owner lease in a `--crash` run: how soon the killed node is found dead.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = crate::durations::parse)]
    lease: Duration,
}

pub use crate::bots::games::StandbyChoice;

/// Why the bench failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The cluster did not start.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A room could not be opened.
    #[error("opening the rooms failed: {0}")]
    Rooms(#[from] UnitError),
    /// An id was not valid.
    #[error(transparent)]
    Id(#[from] ferry::InvalidId),
    /// A room with state failed a step (a Ferry move or a baseline handoff).
    #[error("a room of the bench failed: {0}")]
    Room(#[from] RoomError),
    /// The drain did not move every room.
    #[error(
        "{0}; the report above has what it measured (a drain has {secs} s in this bench: try \
         fewer or smaller rooms, or a lower --change-rate)",
        secs = drains::DEADLINE.as_secs()
    )]
    Unfinished(String),
    /// A game room did not move.
    #[error("game rooms did not move: {0}")]
    GameRooms(String),
    /// Ferry lost or doubled messages, or the bots saw something wrong.
    #[error("{0}; this is a bug in Ferry: please report it with the output above")]
    Faults(String),
    /// A report file could not be written.
    #[error("could not write {}: {source}; check that its directory exists and is writable", path.display())]
    Write {
        /// The report file being written.
        path: PathBuf,
        /// What writing it met.
        source: std::io::Error,
    },
    /// The report could not be encoded.
    #[error("could not encode the report: {0}")]
    Json(#[from] serde_json::Error),
    /// A step of a `--crash` or `--steady` run could not be done.
    #[error("{0}; the run could not measure what it set out to")]
    Crash(String),
    /// Rooms of a `--crash` run did not play again after the kill.
    #[error("{0}; this is a bug in Ferry: please report it with the output above")]
    NotBack(String),
}

/// What a run measured, before it is summarised.
struct Measured {
    one_by_one: one_by_one::OneByOne,
    drains: drains::Drains,
    game_rooms: GameRooms,
    tallies: Vec<crate::bots::player::Tally>,
}

/// The bots' own rooms moving while they play.
struct GameRooms {
    rooms: usize,
    moves: MoveRecord,
    elapsed: Duration,
}

/// Runs the bench, prints the table (or the JSON) and writes the chart if asked for; fails if Ferry lost or
/// doubled a message, a bot saw something wrong, the drain did not move every room, or a step could
/// not be done.
pub async fn run(args: BenchArgs) -> Result<(), BenchError> {
    if args.crash {
        let run = crash::run(&args).await?;
        print(&args, &run, run.text())?;
        return match run.problem() {
            Some(problem) => Err(BenchError::NotBack(problem)),
            None => Ok(()),
        };
    }
    if args.steady {
        let run = steady::run(&args).await?;
        return print(&args, &run, run.text());
    }
    let started = Instant::now();
    // Watched, so that each room moved one at a time seals with its queue in it.
    let cluster =
        LocalCluster::start_wrapped(NODES, &args.store, registry, ferry_benches::rooms::watched)
            .await?;
    let result = measure(&cluster, &args).await;
    cluster.shutdown().await;
    let measured = result?;
    let report = Report::new(&args, &measured, started.elapsed());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    if let Some(path) = &args.svg {
        let o = &measured.one_by_one;
        let series = [
            ("Ferry pause", &o.ferry.pauses),
            ("Ferry seal to answer", &o.answered),
            ("baseline: stop, save, start, load", &o.baseline),
        ];
        write(path, &chart::pause_chart(&report.chart_title(), &series))?;
    }
    if let Some(problem) = report.problem() {
        return Err(BenchError::Faults(problem));
    }
    match report.unfinished() {
        Some(drain) => Err(BenchError::Unfinished(drain)),
        None => Ok(()),
    }
}

/// Prints a run's report: the JSON with `--json`, else `text`.
fn print(args: &BenchArgs, report: &impl Serialize, text: String) -> Result<(), BenchError> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{text}");
    }
    Ok(())
}

/// The factories of the sample games and of the rooms with state.
fn registry() -> Registry {
    let mut registry = games::registry(StandbyChoice::None);
    ferry_benches::rooms::register(&mut registry);
    registry
}

/// Opens the rooms, starts the bots, and runs every step while they play.
async fn measure(cluster: &LocalCluster, args: &BenchArgs) -> Result<Measured, BenchError> {
    let mut rooms = StateRooms::open(
        &cluster.nodes[0],
        args.rooms as usize,
        args.state_bytes as usize,
        args.change_rate,
    )
    .await?;
    let game_rooms = usize::from(args.game_rooms);
    let players = crate::demo::rooms::open::<BenchError>(
        &cluster.nodes[2..],
        game_rooms,
        usize::from(args.players),
    )
    .await?;
    let mut team = Team::new();
    for (game, me) in players {
        let config = cluster.access.client(team.size());
        team.add(game, config, me, Past::New);
    }
    let queued = args.queued as usize;
    let seconds = args.duration;
    let one_by_one = one_by_one::run(cluster, &mut rooms, queued, seconds).await?;
    let drains = drains::run(cluster, &mut rooms, queued).await?;
    let game_rooms = move_game_rooms(cluster, game_rooms).await?;
    tokio::time::sleep(PLAY_ON).await;
    let tallies = team.finish().await;
    Ok(Measured {
        one_by_one,
        drains,
        game_rooms,
        tallies,
    })
}

/// Moves every game room from the third node to the second, all at once, while the bots play.
async fn move_game_rooms(cluster: &LocalCluster, rooms: usize) -> Result<GameRooms, BenchError> {
    let from = &cluster.nodes[2];
    let to = cluster.nodes[1].id();
    let mut ids = Vec::new();
    for game in GameKind::ALL {
        for r in 0..rooms {
            ids.push(UnitId::Spot(game.room(r)?));
        }
    }
    let started = Instant::now();
    let moves = ids.iter().map(|id| from.move_unit(id, Some(to.clone())));
    let reports = futures_util::future::join_all(moves).await;
    let elapsed = started.elapsed();
    let mut record = MoveRecord::default();
    let mut failed = Vec::new();
    for (id, report) in ids.iter().zip(reports) {
        match report {
            Ok(report) if report.end == MoveEnd::Moved => record.record(&report),
            Ok(report) => failed.push(format!("{id} ended {:?}", report.end)),
            Err(error) => failed.push(format!("{id}: {error}")),
        }
    }
    if !failed.is_empty() {
        return Err(BenchError::GameRooms(failed.join("; ")));
    }
    Ok(GameRooms {
        rooms: ids.len(),
        moves: record,
        elapsed,
    })
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|source| BenchError::Write {
        path: path.to_owned(),
        source,
    })
}
