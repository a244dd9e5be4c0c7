//! `ferry demo`: chat rooms full of players on an embedded node, and a report of what they saw.

use std::time::{Duration, Instant};

use clap::Args;
use ferry::{ActorId, Node, NodeConfig, NodeId, Registry, SpotId};
use ferry_samples::chat::{self, ChatterMsg, Heard, RoomMsg};
use serde::Serialize;

/// Sizes of the demo; the defaults finish in a few seconds.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Chat rooms to open.
    #[arg(long, default_value_t = 20)]
    rooms: usize,
    /// Players in each room.
    #[arg(long, default_value_t = 4)]
    players: usize,
    /// Lines each player says.
    #[arg(long, default_value_t = 50)]
    lines: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// What the demo prints.
#[derive(Debug, Serialize)]
struct Report {
    rooms: usize,
    players: usize,
    lines_said: u64,
    lines_heard: u64,
    lines_lost: u64,
    lines_out_of_order: u64,
    elapsed_ms: u128,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A node did not start.
    #[error("the demo node did not start: {0}")]
    Start(#[from] ferry::StartError),
    /// Creating or joining a unit failed.
    #[error("setting up rooms failed: {0}")]
    Unit(#[from] ferry::UnitError),
    /// A message could not be delivered.
    #[error("a message was not delivered: {0}")]
    Message(#[from] ferry::MessageError),
    /// An id was not valid.
    #[error(transparent)]
    Id(#[from] ferry::InvalidId),
    /// The report could not be written as JSON.
    #[error("could not write the report: {0}")]
    Json(#[from] serde_json::Error),
}

const ASK: Duration = Duration::from_secs(10);

/// Runs the demo and prints its report.
pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    let started = Instant::now();
    let mut registry = Registry::new();
    registry.register(chat::room()).register(chat::chatter());
    let node = Node::start(NodeConfig::new(NodeId::new("demo-1")?), registry).await?;

    let mut rooms = Vec::new();
    for r in 0..args.rooms {
        let room = SpotId::new(format!("room-{r}"))?;
        node.create_spot(chat::ROOM, &room).await?;
        let mut players = Vec::new();
        for p in 0..args.players {
            let player = ActorId::new(format!("player-{r}-{p}"))?;
            node.create_actor(chat::CHATTER, &player).await?;
            node.join(&player, &room).await?;
            players.push(player);
        }
        rooms.push((room, players));
    }

    for n in 0..args.lines {
        for (room, players) in &rooms {
            for player in players {
                let text = format!("line {n}");
                node.tell(
                    room,
                    RoomMsg::Say {
                        from: player.clone(),
                        text,
                    },
                )?;
            }
        }
    }

    let mut report = Report {
        rooms: args.rooms,
        players: args.rooms * args.players,
        lines_said: (args.rooms * args.players * args.lines) as u64,
        lines_heard: 0,
        lines_lost: 0,
        lines_out_of_order: 0,
        elapsed_ms: 0,
    };
    let per_room = (args.players * args.lines) as u64;
    for (room, players) in &rooms {
        // The room has taken every line once it answers this; what it told members is queued by then.
        let _: chat::RoomReply = node.request(room, RoomMsg::History, ASK).await?;
        for player in players {
            let heard: Heard = node.request(player, ChatterMsg::Count, ASK).await?;
            report.lines_heard += heard.lines;
            report.lines_lost += per_room.saturating_sub(heard.lines);
            report.lines_out_of_order += heard.out_of_order;
        }
    }
    node.shutdown().await;
    report.elapsed_ms = started.elapsed().as_millis();

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "Ferry demo: {} rooms, {} players on one node",
            report.rooms, report.players
        );
        println!("  lines said        {}", report.lines_said);
        println!(
            "  lines heard       {} (every member hears every line of its room)",
            report.lines_heard
        );
        println!("  lost              {}", report.lines_lost);
        println!("  out of order      {}", report.lines_out_of_order);
        println!("  took              {} ms", report.elapsed_ms);
    }
    Ok(())
}
