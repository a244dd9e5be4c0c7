//! `ferry bots`: a load generator with the demo's checks, for a running cluster. Bots connect to
//! its client gateways, bind the player Actors of rooms (named as [`GameKind::room`] and
//! [`GameKind::player`] say), play for a while, and report what they saw. With `--admin` the rooms
//! and players are created first, through the nodes' admin endpoints; otherwise they must exist.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::games::{self, GameKind, Past};
use super::{BotsSummary, GatewayAccess, Team, provision};
use crate::percentiles::readable_us;
use ferry_host::admin::ClientError;

/// Where the cluster's gateways are, how to trust them, and how hard to play.
#[derive(Args, Debug, Clone)]
pub struct BotsArgs {
    /// A client gateway of the cluster (`host:port`); repeat it, or separate with commas, to
    /// spread the bots over several.
    #[arg(
        long = "cluster",
        value_name = "ADDR",
        required = true,
        value_delimiter = ','
    )]
    gateways: Vec<SocketAddr>,
    /// The PEM file of the CA (or self-signed certificate) the gateways present.
    #[arg(long, value_name = "FILE")]
    ca: PathBuf,
    /// The token the gateways accept.
    #[arg(long, value_name = "T")]
    token: String,
    /// The DNS name in the gateways' certificate.
    #[arg(long, value_name = "NAME", default_value = "localhost")]
    server_name: String,
    /// The admin endpoint (`host:port`) of a node to create the rooms and players on before
    /// playing; repeat it, or separate with commas, to spread the rooms over several. Without it,
    /// the rooms and players must exist.
    #[arg(long = "admin", value_name = "ADDR", value_delimiter = ',')]
    admins: Vec<String>,
    #[command(flatten)]
    admin_access: crate::admin_access::AdminArgs,
    /// The sample games the rooms run; separate several with commas to play each.
    #[arg(
        long = "game",
        value_name = "GAME",
        value_enum,
        value_delimiter = ',',
        default_value = "fps"
    )]
    games: Vec<GameKind>,
    /// Rooms of each game to play.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    rooms: u16,
    /// The number of the first room, so that a second run with `--admin` can create fresh rooms
    /// next to those of the first.
    #[arg(long, value_name = "N", default_value_t = 0)]
    first_room: u16,
    /// Players in each room, numbered from 0.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    players: u16,
    /// How long to play, such as 10s, 2m or 1h.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::durations::parse)]
    duration: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Why `ferry bots` failed.
#[derive(Debug, thiserror::Error)]
pub enum BotsError {
    /// The CA file could not be read.
    #[error("cannot read the gateways' CA from {}: {source}; pass the PEM file with --ca", path.display())]
    Ca {
        /// The CA file `--ca` named.
        path: PathBuf,
        /// What reading it met.
        source: std::io::Error,
    },
    /// A room or player id could not be made.
    #[error(transparent)]
    Id(#[from] ferry::InvalidId),
    /// An admin address is wrong.
    #[error(transparent)]
    Admin(ClientError),
    /// The rooms or players could not be created.
    #[error(
        "could not create the bots' rooms and players: {0}; to play rooms made by an earlier run \
         leave out --admin, or pick fresh ones with --first-room"
    )]
    Provision(ClientError),
    /// The bots saw inputs lost, duplicated or reordered, or could not play.
    #[error("{0}")]
    Players(String),
    /// The report could not be written.
    #[error("could not write the report: {0}")]
    Json(#[from] serde_json::Error),
}

/// Plays the rooms and prints what the bots saw; fails if any input was lost, duplicated or
/// reordered, or a bot could not play.
pub async fn run(args: BotsArgs) -> Result<(), BotsError> {
    let ca_pem = std::fs::read_to_string(&args.ca).map_err(|source| BotsError::Ca {
        path: args.ca.clone(),
        source,
    })?;
    let access = GatewayAccess {
        servers: args.gateways.clone(),
        server_name: args.server_name.clone(),
        ca_pem,
        token: args.token.clone().into_bytes(),
    };
    let admins = args
        .admins
        .iter()
        .map(|addr| args.admin_access.client(addr))
        .collect::<Result<Vec<_>, _>>()
        .map_err(BotsError::Admin)?;
    let mut kinds: Vec<GameKind> = Vec::new();
    for game in &args.games {
        if !kinds.contains(game) {
            kinds.push(*game);
        }
    }
    let first = usize::from(args.first_room);
    let plans = games::lineup(
        &kinds,
        first..first + usize::from(args.rooms),
        usize::from(args.players),
    )?;
    provision::open(&admins, &plans)
        .await
        .map_err(BotsError::Provision)?;
    // Players made here have no past; without --admin an earlier client may have played them.
    let past = if admins.is_empty() {
        Past::Unknown
    } else {
        Past::New
    };
    let mut team = Team::new();
    for plan in &plans {
        for player in &plan.players {
            let config = access.client(team.size());
            team.add(plan.game, config, player.clone(), past);
        }
    }
    tokio::time::sleep(args.duration).await;
    let tallies = team.finish().await;
    let summary = BotsSummary::of(&tallies);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", text(&summary));
    }
    match summary.problem() {
        Some(problem) => Err(BotsError::Players(problem)),
        None => Ok(()),
    }
}

fn text(s: &BotsSummary) -> String {
    format!(
        "{} bots: {} inputs sent, {} applied; lost by the server {}, duplicated {}, reordered {}; \
         not delivered by the client {}; answers lost with a dead gateway {}; lost in rebuilt rooms \
         {}; {} mismatches; tick gap p50 {} \
         p99 {} longest {:.1} ms; {} reconnected; {} bound again after being unbound; rooms rebuilt after \
         a crash: {}; crashes: {}\n",
        s.players,
        s.inputs_sent,
        s.inputs_applied,
        s.inputs.lost,
        s.inputs.duplicated,
        s.inputs.reordered,
        s.inputs_undelivered,
        s.answers_lost_with_gateways,
        s.inputs_lost_in_rebuilds,
        s.mismatches,
        readable_us(s.tick_gaps.p50_us),
        readable_us(s.tick_gaps.p99_us),
        s.longest_tick_gap_ms,
        s.reconnected,
        s.rebound,
        s.rebuilt_text(),
        s.crash_text()
    )
}
