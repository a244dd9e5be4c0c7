//! `ferry bench --steady`: what keeping standbys costs while nothing fails. Many rooms with state
//! play on one node, their turns rewriting a share of it each second; the run measures the
//! process's CPU and the node's checkpoint traffic, then does the same with no standby in the same
//! process, so the CPU that checkpoints take shows as a ratio and a difference.

use ferry::{Node, Registration, Registry, RelocationPolicy, SpotId, StandbyPolicy};
use ferry_benches::rooms::{Answer, ChangeRate, Room, RoomMsg, T};
use serde::Serialize;

use super::crash::{Running, Stretch};
use super::{BenchArgs, BenchError, StandbyChoice};
use crate::local_cluster::LocalCluster;

/// The factory of the rooms a steady run plays.
const ROOM: &str = "bench-steady-room";

/// What a steady run measured, with the policy asked for and without a standby.
#[derive(Debug, Clone, Serialize)]
pub struct SteadyRun {
    /// The rooms' standby policy.
    pub standby: StandbyChoice,
    /// Rooms on the node.
    pub rooms: u32,
    /// Bytes of state in each room.
    pub state_bytes: u32,
    /// The share of each room's state its turns rewrite a second.
    pub change_rate: f64,
    /// The run with the standby asked for.
    pub with_standby: Running,
    /// The same run with no standby.
    pub without_standby: Running,
    /// CPU with the standby over CPU without (`None` where the CPU time cannot be read).
    pub cpu_ratio: Option<f64>,
    /// The CPU the standby added, in percent of one core.
    pub checkpoint_cpu_percent_of_core: Option<f64>,
}

impl SteadyRun {
    /// The report for a person.
    pub fn text(&self) -> String {
        let cpu = |r: &Running| {
            r.cpu_percent_of_core
                .map_or("unknown".to_owned(), |p| format!("{p:.1}%"))
        };
        format!(
            "Standby at rest: {rooms} rooms of {bytes} B, {rate} of each rewritten a second, \
             standby {standby:?}\n\
             \x20 with the standby ({ws:.1} s): {wcpu} of one core, {checkpoints} checkpoints, \
             {bps:.0} B/s\n\
             \x20 without ({os:.1} s): {ocpu} of one core\n\
             \x20 checkpoints took {added} of one core ({ratio})\n",
            rooms = self.rooms,
            bytes = self.state_bytes,
            rate = self.change_rate,
            standby = self.standby,
            ws = self.with_standby.seconds,
            wcpu = cpu(&self.with_standby),
            checkpoints = self.with_standby.checkpoints,
            bps = self.with_standby.checkpoint_bytes_per_s,
            os = self.without_standby.seconds,
            ocpu = cpu(&self.without_standby),
            added = self
                .checkpoint_cpu_percent_of_core
                .map_or("unknown".to_owned(), |p| format!("{p:.1}%")),
            ratio = self.cpu_ratio.map_or(
                "no CPU measured without: run longer for a ratio".to_owned(),
                |r| format!("{r:.2}x the CPU without")
            ),
        )
    }
}

/// Runs the rooms once with `args.standby` and once without, each for `args.duration`.
pub async fn run(args: &BenchArgs) -> Result<SteadyRun, BenchError> {
    let with_standby = once(args, args.standby.policy()).await?;
    let without_standby = once(args, StandbyPolicy::None).await?;
    let cpu_ratio = with_standby
        .cpu_percent_of_core
        .zip(without_standby.cpu_percent_of_core)
        .and_then(|(with, without)| (without > 0.0).then(|| with / without));
    let checkpoint_cpu_percent_of_core = with_standby
        .cpu_percent_of_core
        .zip(without_standby.cpu_percent_of_core)
        .map(|(with, without)| with - without);
    let change_rate = match args.change_rate {
        ChangeRate::PerSecond(share) => share,
        ChangeRate::EveryTurn => f64::INFINITY,
    };
    Ok(SteadyRun {
        standby: args.standby,
        rooms: args.rooms,
        state_bytes: args.state_bytes,
        change_rate,
        with_standby,
        without_standby,
        cpu_ratio,
        checkpoint_cpu_percent_of_core,
    })
}

/// One run of the rooms under `standby`, in a cluster of its own.
async fn once(args: &BenchArgs, standby: StandbyPolicy) -> Result<Running, BenchError> {
    let registry = move || {
        let mut registry = Registry::new();
        registry.register(
            Registration::spot(ROOM, |_| Room::default())
                .policy(RelocationPolicy::serde())
                .standby(standby),
        );
        registry
    };
    let cluster = super::LocalCluster::start(super::NODES, &args.store, registry).await?;
    let result = play(&cluster, args).await;
    cluster.shutdown().await;
    result
}

async fn play(cluster: &LocalCluster, args: &BenchArgs) -> Result<Running, BenchError> {
    let node = &cluster.nodes[0];
    for i in 0..args.rooms {
        let id = SpotId::new(format!("steady-{i}"))?;
        node.create_spot_on(node.id(), ROOM, &id).await?;
        for msg in [
            RoomMsg::Grow(args.state_bytes as usize),
            RoomMsg::Churn(args.change_rate),
        ] {
            let _: Answer = ask(node, &id, msg).await?;
        }
    }
    // Measured once every room has its state, so that the first whole checkpoints of each are
    // not what the run reports.
    settle(node).await;
    let stretch = Stretch::start(node);
    tokio::time::sleep(args.duration).await;
    Ok(stretch.end(node))
}

async fn ask(node: &Node, id: &SpotId, msg: RoomMsg) -> Result<Answer, BenchError> {
    node.request(id, msg, T)
        .await
        .map_err(|e| BenchError::Crash(format!("{id} did not take its state: {e}")))
}

/// Waits until every room's standby holds it (or its node says none keeps one).
async fn settle(node: &Node) {
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    for _ in 0..100 {
        ticks.tick().await;
        let status = node.standby_status();
        if status.current == status.rooms {
            return;
        }
    }
}
