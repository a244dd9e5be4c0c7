//! `ferry bench --crash`: what a crash of a node costs its rooms under a standby policy. Rooms with
//! state play on one node while a client on another node sends each of them numbered inputs and
//! counts the replies (its confirmed inputs); then that node stops at once, as a killed process
//! does (no lease renewed, no frame answered, nothing released), and the bench measures, room by
//! room, what came back: from a checkpoint or from nothing, how old the checkpoint was, how many
//! confirmed inputs it lacks, and how long the room took to play again.
//!
//! A room measures the age of the checkpoint it came back from itself: its state holds the wall
//! time of its latest turn, and the first turn it runs on a new node keeps the one it arrived
//! with. The kill's wall time minus that is how much of the room's play the crash took.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferry::{
    Behavior, Ctx, Node, OverrunPolicy, RecoveryEvent, Registration, Registry, RelocationPolicy,
    SpotId, StandbyPolicy, Tick,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

use super::{BenchArgs, BenchError, StandbyChoice};
use crate::local_cluster::LocalCluster;
use crate::percentiles::{Durations, Percentiles};

/// The factory of the rooms a crash run kills.
pub const ROOM: &str = "bench-crash-room";

/// How often a room's turn runs on its own: a game's simulation step. Each rewrites part of its
/// state, so a checkpoint is always due, and it is the resolution of the age measured.
const TICK: Duration = Duration::from_millis(50);

/// Bytes each tick rewrites.
const REWRITE: usize = 64;

/// How often the client sends each room an input.
const INPUT_EVERY: Duration = Duration::from_millis(250);

/// How long the client waits for one reply before it counts the input unconfirmed and sends the
/// next: short, so that the time a room takes to play again is measured closely.
const REPLY_WITHIN: Duration = Duration::from_millis(500);

/// How long a client waits after the kill before it sends again an input that failed at once
/// (its room is not back yet): closely enough to time the comeback, without spinning.
const RETRY: Duration = Duration::from_millis(10);

/// How long the rooms have to play again after the kill before the run gives up on them.
const BACK_WITHIN: Duration = Duration::from_secs(60);

/// A room of the crash run: a blob of state, the inputs it ran, and the clock of its turns.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CrashRoom {
    #[serde(with = "serde_bytes")]
    blob: Vec<u8>,
    /// Inputs it ran.
    count: u64,
    /// Bytes its ticks rewrote so far: where the next rewrite starts.
    written: u64,
    /// When its latest turn ran, in nanoseconds since the Unix epoch.
    stamp_ns: u64,
    /// The node its latest turn ran on.
    node: Option<String>,
    /// The stamp its state held when it first ran a turn on the node it runs on now, if it came
    /// there with a state (from a checkpoint or a move); `None` for a room that started here.
    arrived_ns: Option<u64>,
}

/// What a crash room is told.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CrashMsg {
    /// Replace the blob with this many bytes.
    Grow(usize),
    /// One input: counted.
    Input,
}

/// What a crash room answers: enough to tell what it came back with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Seen {
    /// Inputs it ran, this one included.
    pub count: u64,
    /// See [`CrashRoom::arrived_ns`].
    pub arrived_ns: Option<u64>,
    /// Bytes of state it holds.
    pub bytes: usize,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl CrashRoom {
    /// Notes a turn on the node it runs on now.
    fn turn(&mut self, ctx: &Ctx<'_>) {
        let here = ctx.node().id().as_str();
        if self.node.as_deref() != Some(here) {
            if self.node.is_some() {
                self.arrived_ns = Some(self.stamp_ns);
            }
            self.node = Some(here.to_owned());
        }
        self.stamp_ns = now_ns();
    }
}

impl Behavior for CrashRoom {
    type Msg = CrashMsg;
    type Reply = Seen;

    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.set_timer("tick", TICK, OverrunPolicy::SkipLateTicks);
    }

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: CrashMsg) -> Seen {
        self.turn(ctx);
        match msg {
            CrashMsg::Grow(bytes) => self.blob = (0..bytes).map(|i| (i % 251) as u8).collect(),
            CrashMsg::Input => self.count += 1,
        }
        Seen {
            count: self.count,
            arrived_ns: self.arrived_ns,
            bytes: self.blob.len(),
        }
    }

    fn on_tick(&mut self, ctx: &mut Ctx<'_>, _tick: &Tick) {
        self.turn(ctx);
        let len = self.blob.len();
        if len == 0 {
            return;
        }
        for i in 0..REWRITE.min(len) {
            let at = (self.written as usize + i) % len;
            self.blob[at] = self.blob[at].wrapping_add(1);
        }
        self.written += REWRITE as u64;
    }
}

/// Registers the crash room with a standby of `standby`.
pub fn register(registry: &mut Registry, standby: StandbyPolicy) {
    registry.register(
        Registration::spot(ROOM, |_| CrashRoom::default())
            .policy(RelocationPolicy::serde())
            .standby(standby),
    );
}

/// What one room's client saw.
#[derive(Debug, Default)]
struct Client {
    /// The count of the latest reply to an input sent before the kill: inputs confirmed.
    confirmed: u64,
    /// The first reply to an input sent after the kill, and when it came.
    back: Option<(Instant, Seen)>,
}

/// How much of one core a stretch of the run took, and what the killed node's checkpoints sent.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Running {
    /// How long the stretch lasted, in seconds.
    pub seconds: f64,
    /// The process's CPU time over it, as a share of one core in percent (`None` where the CPU
    /// time cannot be read).
    pub cpu_percent_of_core: Option<f64>,
    /// Checkpoints the node sent over it.
    pub checkpoints: u64,
    /// Checkpoint bytes the node sent over it.
    pub checkpoint_bytes: u64,
    /// Checkpoint bytes a second.
    pub checkpoint_bytes_per_s: f64,
}

/// A stretch of the run being measured.
pub struct Stretch {
    started: Instant,
    cpu: Option<Duration>,
    checkpoints: u64,
    bytes: u64,
}

impl Stretch {
    /// Starts measuring `node`'s checkpoints and the process's CPU.
    pub fn start(node: &Node) -> Stretch {
        let status = node.standby_status();
        Stretch {
            started: Instant::now(),
            cpu: ferry_host::metrics::process_cpu_time(),
            checkpoints: status.checkpoints_sent,
            bytes: status.bytes_sent,
        }
    }

    /// What the stretch took, up to now.
    pub fn end(self, node: &Node) -> Running {
        let took = self.started.elapsed();
        let status = node.standby_status();
        let cpu = ferry_host::metrics::process_cpu_time()
            .zip(self.cpu)
            .map(|(now, then)| now.saturating_sub(then));
        let bytes = status.bytes_sent.saturating_sub(self.bytes);
        Running {
            seconds: crate::percentiles::secs(took),
            cpu_percent_of_core: cpu.map(|cpu| 100.0 * cpu.as_secs_f64() / took.as_secs_f64()),
            checkpoints: status.checkpoints_sent.saturating_sub(self.checkpoints),
            checkpoint_bytes: bytes,
            checkpoint_bytes_per_s: bytes as f64 / took.as_secs_f64().max(f64::EPSILON),
        }
    }
}

/// What the crash did to the rooms.
#[derive(Debug, Clone, Serialize)]
pub struct CrashReport {
    /// Rooms on the killed node.
    pub rooms: usize,
    /// Rooms that answered an input sent after the kill within the run's limit.
    pub played_again: usize,
    /// Rooms that came back from a checkpoint of their standby (their state came with them).
    pub promoted: usize,
    /// Rooms that came back with nothing (a fresh state).
    pub rebuilt: usize,
    /// Inputs the client had a reply for before the kill that the rooms no longer count.
    pub confirmed_inputs_lost: u64,
    /// From the kill until each room answered an input sent after it.
    pub back: Percentiles,
    /// For each promoted room: from the latest turn its checkpoint holds to the kill.
    pub checkpoint_age: Percentiles,
    /// What the survivors' recovery said it did, event by event.
    pub recovery: RecoverySaid,
}

/// The survivors' recovery events of a crash run, counted: what recovery says beside what the
/// rooms showed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoverySaid {
    /// Rooms named in `Promoted` events.
    pub promoted: u64,
    /// `FromNothing` events, by why the room's standby could not be promoted.
    pub from_nothing: BTreeMap<String, u64>,
}

impl RecoverySaid {
    /// Counts the events the receivers hold now.
    fn read(receivers: &mut [broadcast::Receiver<RecoveryEvent>]) -> RecoverySaid {
        let mut said = RecoverySaid::default();
        for events in receivers {
            loop {
                match events.try_recv() {
                    Ok(RecoveryEvent::Promoted { ids, .. }) => said.promoted += ids.len() as u64,
                    Ok(RecoveryEvent::FromNothing { why, .. }) => {
                        *said.from_nothing.entry(format!("{why:?}")).or_default() += 1;
                    }
                    Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                    Err(_) => break,
                }
            }
        }
        said
    }
}

/// What a crash run measured: the rooms playing before the kill, and what the kill did.
#[derive(Debug, Clone, Serialize)]
pub struct CrashRun {
    /// The rooms' standby policy.
    pub standby: StandbyChoice,
    /// Bytes of state in each room.
    pub state_bytes: u32,
    /// The nodes' owner lease, in milliseconds.
    pub lease_ms: u64,
    /// The rooms playing on the node about to be killed.
    pub running: Running,
    /// What the kill did.
    pub crash: CrashReport,
}

impl CrashRun {
    /// Why the run failed, if it did: a room that never played again.
    pub fn problem(&self) -> Option<String> {
        let c = &self.crash;
        (c.played_again < c.rooms).then(|| {
            format!(
                "{} of {} rooms did not play again within {} s of the kill",
                c.rooms - c.played_again,
                c.rooms,
                BACK_WITHIN.as_secs()
            )
        })
    }

    /// The report for a person.
    pub fn text(&self) -> String {
        let r = &self.running;
        let c = &self.crash;
        let ms = |us: u64| us as f64 / 1000.0;
        format!(
            "Crash of a node with {rooms} rooms of {bytes} B, standby {standby:?}, lease {lease} ms\n\
             \x20 while running ({secs:.1} s): {cpu} of one core, {checkpoints} checkpoints, {cbps:.0} B/s\n\
             \x20 played again: {again} of {rooms} ({promoted} from a checkpoint, {rebuilt} rebuilt from nothing)\n\
             \x20 back after the kill: p50 {b50:.1} ms, p99 {b99:.1} ms, max {bmax:.1} ms\n\
             \x20 checkpoint age: p50 {a50:.1} ms, p99 {a99:.1} ms, max {amax:.1} ms ({aged} rooms)\n\
             \x20 confirmed inputs lost: {lost}\n\
             \x20 recovery said: {said_promoted} promoted, rebuilt from nothing: {from_nothing}\n",
            rooms = c.rooms,
            bytes = self.state_bytes,
            standby = self.standby,
            lease = self.lease_ms,
            secs = r.seconds,
            cpu = r
                .cpu_percent_of_core
                .map_or("unknown".to_owned(), |p| format!("{p:.1}%")),
            checkpoints = r.checkpoints,
            cbps = r.checkpoint_bytes_per_s,
            again = c.played_again,
            promoted = c.promoted,
            rebuilt = c.rebuilt,
            b50 = ms(c.back.p50_us),
            b99 = ms(c.back.p99_us),
            bmax = ms(c.back.max_us),
            a50 = ms(c.checkpoint_age.p50_us),
            a99 = ms(c.checkpoint_age.p99_us),
            amax = ms(c.checkpoint_age.max_us),
            aged = c.checkpoint_age.count,
            lost = c.confirmed_inputs_lost,
            said_promoted = c.recovery.promoted,
            from_nothing = if c.recovery.from_nothing.is_empty() {
                "none".to_owned()
            } else {
                c.recovery
                    .from_nothing
                    .iter()
                    .map(|(why, n)| format!("{n} {why}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        )
    }
}

/// Runs the crash run: three nodes with leases of `args.lease`, the rooms on the first, the
/// client on the second; the rooms play for `args.duration`, then the first node is killed.
pub async fn run(args: &BenchArgs) -> Result<CrashRun, BenchError> {
    let standby = args.standby.policy();
    let registry = move || {
        let mut registry = Registry::new();
        register(&mut registry, standby);
        registry
    };
    let cluster =
        LocalCluster::start_leased(super::NODES, &args.store, registry, args.lease).await?;
    let result = measure(&cluster, args).await;
    cluster.shutdown().await;
    result
}

async fn measure(cluster: &LocalCluster, args: &BenchArgs) -> Result<CrashRun, BenchError> {
    let (owner, client) = (&cluster.nodes[0], &cluster.nodes[1]);
    let mut ids = Vec::with_capacity(args.rooms as usize);
    for i in 0..args.rooms {
        let id = SpotId::new(format!("crash-{i}"))?;
        owner.create_spot_on(owner.id(), ROOM, &id).await?;
        let _: Seen = owner
            .request(
                &id,
                CrashMsg::Grow(args.state_bytes as usize),
                ferry_benches::rooms::T,
            )
            .await
            .map_err(|e| BenchError::Crash(format!("{id} did not take its state: {e}")))?;
        ids.push(id);
    }
    let (killed, kill) = watch::channel(None::<Instant>);
    let clients: Vec<Arc<Mutex<Client>>> = ids.iter().map(|_| Arc::default()).collect();
    let mut tasks = Vec::with_capacity(ids.len());
    for (id, seen) in ids.iter().zip(&clients) {
        tasks.push(tokio::spawn(play(
            client.clone(),
            id.clone(),
            seen.clone(),
            kill.clone(),
        )));
    }
    let stretch = Stretch::start(owner);
    tokio::time::sleep(args.duration).await;
    let running = stretch.end(owner);
    let mut recovery: Vec<_> = cluster.nodes[1..]
        .iter()
        .map(Node::recovery_events)
        .collect();
    let killed_ns = now_ns();
    killed.send_replace(Some(Instant::now()));
    let kill_at = Instant::now();
    owner.abort().await;
    for task in tasks {
        // A client task that panicked leaves its room counted as not back.
        let _ = task.await;
    }
    let mut report = CrashReport {
        rooms: ids.len(),
        played_again: 0,
        promoted: 0,
        rebuilt: 0,
        confirmed_inputs_lost: 0,
        back: Durations::new().summary(),
        checkpoint_age: Durations::new().summary(),
        recovery: RecoverySaid::read(&mut recovery),
    };
    let (mut back, mut ages) = (Durations::new(), Durations::new());
    for seen in &clients {
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((at, reply)) = &seen.back else {
            continue;
        };
        report.played_again += 1;
        back.record(at.saturating_duration_since(kill_at));
        // The reply counts the input it answers: the room held one fewer before it.
        report.confirmed_inputs_lost += seen.confirmed.saturating_sub(reply.count - 1);
        match reply.arrived_ns {
            Some(arrived) if reply.bytes > 0 => {
                report.promoted += 1;
                ages.record(Duration::from_nanos(killed_ns.saturating_sub(arrived)));
            }
            _ => report.rebuilt += 1,
        }
    }
    report.back = back.summary();
    report.checkpoint_age = ages.summary();
    Ok(CrashRun {
        standby: args.standby,
        state_bytes: args.state_bytes,
        lease_ms: u64::try_from(args.lease.as_millis()).unwrap_or(u64::MAX),
        running,
        crash: report,
    })
}

/// One room's client: an input every [`INPUT_EVERY`] until the kill, then one after another
/// until the room answers one (or [`BACK_WITHIN`] passed).
async fn play(
    node: Node,
    room: SpotId,
    seen: Arc<Mutex<Client>>,
    mut kill: watch::Receiver<Option<Instant>>,
) {
    let mut every = tokio::time::interval(INPUT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let killed = *kill.borrow();
        match killed {
            None => {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = kill.changed() => continue,
                }
            }
            Some(at) if at.elapsed() > BACK_WITHIN => return,
            Some(_) => {}
        }
        let answer: Result<Seen, _> = node.request(&room, CrashMsg::Input, REPLY_WITHIN).await;
        let Ok(reply) = answer else {
            if killed.is_some() {
                // Not back yet: try again soon, so the time it comes back is seen closely.
                tokio::time::sleep(RETRY).await;
            }
            continue;
        };
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        match killed {
            // Sent before the kill: confirmed, whenever the reply came.
            None => seen.confirmed = seen.confirmed.max(reply.count),
            Some(_) => {
                seen.back = Some((Instant::now(), reply));
                return;
            }
        }
    }
}
