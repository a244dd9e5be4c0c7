//! Pre-copy over real QUIC: a large room's state goes to its target while the room runs, and the
//! seal ships only what changed since; a state that changes wholly between snapshots, a target
//! that lost what was pre-copied, and a target that died before the seal all end in a whole
//! transfer or a room that runs on, never in a state other than the one sealed. A room whose
//! state is a log with its newest entry first has its adapter's own delta sent at the seal in
//! place of every shifted block, and a wrong delta costs the whole image, never a wrong state.
//! A round cut by a link reset (pre-copy travels on the link's best-effort bulk stream) goes
//! unanswered, and the seal sends the whole image.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferry::registry::{AdapterError, SerdeAdapter, StateAdapter};
use ferry::relocation::precopy::{BLOCK, ROUNDS};
use ferry::relocation::protocol::MoveEnd;
use ferry::{
    Behavior, Ctx, MoveReport, Node, ReadinessMode, ReadyOutcome, Registration, Registry,
    RelocationPolicy, SpotId,
};
use ferry_tests::cluster::{Cluster, wait_link_lost};
use ferry_tests::cut_socket::CutSockets;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

const T: Duration = Duration::from_secs(10);

/// A room with a large blob of state and a count of the messages it ran.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Big {
    blob: Vec<u8>,
    count: u64,
    /// How many of its defers no move took (it carried on where it was).
    continued: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    /// Makes the blob `len` bytes, each a function of its place and `seed`.
    Fill { len: usize, seed: u8 },
    /// Inserts a `len`-byte entry at the blob's front, as a log's newest: every byte after it
    /// shifts.
    Push { len: usize, seed: u8 },
    /// Counts one message.
    Add,
    /// Says the state is whole (a room that seals only where the application says).
    Defer,
    /// Answers the summary only.
    Get,
}

/// What a room answers: enough to tell its state from any other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Summary {
    len: usize,
    hash: u64,
    count: u64,
}

impl Behavior for Big {
    type Msg = Cmd;
    type Reply = (Summary, u64);

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: Cmd) -> (Summary, u64) {
        match msg {
            Cmd::Fill { len, seed } => {
                self.blob = (0..len).map(|i| (i % 251) as u8 ^ seed).collect();
            }
            Cmd::Push { len, seed } => {
                let entry = (0..len).map(|i| (i % 13) as u8 ^ seed);
                self.blob.splice(0..0, entry);
            }
            Cmd::Add => self.count += 1,
            Cmd::Defer => {
                let _ = ctx.relocation_ready_defer();
            }
            Cmd::Get => {}
        }
        (self.summary(), self.continued)
    }

    fn on_relocation_ready_completed(&mut self, _ctx: &mut Ctx<'_>, outcome: ReadyOutcome) {
        if outcome == ReadyOutcome::Continued {
            self.continued += 1;
        }
    }
}

impl Big {
    fn summary(&self) -> Summary {
        Summary {
            len: self.blob.len(),
            hash: {
                let mut hasher = DefaultHasher::new();
                self.blob.hash(&mut hasher);
                hasher.finish()
            },
            count: self.count,
        }
    }
}

/// The serde adapter, counting its captures so a test knows when a move took its snapshots, and
/// the deltas its delta-making kin ([`Fronted`]) applied.
#[derive(Clone, Default)]
struct Counted {
    captures: Arc<AtomicUsize>,
    took: Arc<Notify>,
    applied: Arc<AtomicUsize>,
}

impl Counted {
    /// Waits until the adapter captured at least `n` times in all.
    async fn captured(&self, n: usize) {
        loop {
            let took = self.took.notified();
            if self.captures.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::timeout(T, took).await.expect("a capture");
        }
    }
}

impl StateAdapter<Big> for Counted {
    fn capture(&self, unit: &Big) -> Result<Vec<u8>, AdapterError> {
        let bytes = SerdeAdapter.capture(unit);
        self.captures.fetch_add(1, Ordering::SeqCst);
        self.took.notify_waiters();
        bytes
    }

    fn restore(&self, unit: &mut Big, bytes: &[u8]) -> Result<(), AdapterError> {
        SerdeAdapter.restore(unit, bytes)
    }
}

/// The serde adapter of a room whose blob is a log, newest entry first, with a delta of its own:
/// the room as it is now with only the entries added at the front of its blob. `wrong` rebuilds
/// the count one too high, as if a message had run twice.
#[derive(Clone)]
struct Fronted {
    counted: Counted,
    wrong: bool,
}

/// A room from an adapter's bytes.
fn decoded(bytes: &[u8]) -> Result<Big, AdapterError> {
    let mut room = Big::default();
    SerdeAdapter.restore(&mut room, bytes)?;
    Ok(room)
}

impl StateAdapter<Big> for Fronted {
    fn capture(&self, unit: &Big) -> Result<Vec<u8>, AdapterError> {
        self.counted.capture(unit)
    }

    fn restore(&self, unit: &mut Big, bytes: &[u8]) -> Result<(), AdapterError> {
        self.counted.restore(unit, bytes)
    }

    fn delta(&self, base: &[u8], now: &[u8]) -> Option<Vec<u8>> {
        let (base, now) = (decoded(base).ok()?, decoded(now).ok()?);
        let added = now.blob.len().checked_sub(base.blob.len())?;
        if now.blob[added..] != base.blob[..] {
            return None;
        }
        let front = Big {
            blob: now.blob[..added].to_vec(),
            ..now
        };
        SerdeAdapter.capture(&front).ok()
    }

    fn apply_delta(&self, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, AdapterError> {
        self.counted.applied.fetch_add(1, Ordering::SeqCst);
        let (base, front) = (decoded(base)?, decoded(delta)?);
        let now = Big {
            blob: [front.blob, base.blob].concat(),
            count: front.count + u64::from(self.wrong),
            continued: front.continued,
        };
        SerdeAdapter.capture(&now)
    }
}

/// An adapter whose every capture differs from the last in every byte, as a state its turns
/// rewrite wholly would: each capture is the serde bytes masked by a fresh byte, that byte first.
#[derive(Clone, Default)]
struct Shifting {
    captures: Arc<AtomicUsize>,
}

impl StateAdapter<Big> for Shifting {
    fn capture(&self, unit: &Big) -> Result<Vec<u8>, AdapterError> {
        let mask = (self.captures.fetch_add(1, Ordering::SeqCst) % 255 + 1) as u8;
        let mut bytes = vec![mask];
        bytes.extend(SerdeAdapter.capture(unit)?.iter().map(|b| b ^ mask));
        Ok(bytes)
    }

    fn restore(&self, unit: &mut Big, bytes: &[u8]) -> Result<(), AdapterError> {
        let (mask, rest) = bytes
            .split_first()
            .ok_or_else(|| AdapterError("empty capture".into()))?;
        let plain: Vec<u8> = rest.iter().map(|b| b ^ mask).collect();
        SerdeAdapter.restore(unit, &plain)
    }
}

fn registry(counted: &Counted) -> Registry {
    let mut reg = Registry::new();
    reg.register(Registration::spot("big", |_| Big::default()).policy(RelocationPolicy::serde()));
    reg.register(Registration::spot("shifting", |_| Big::default()).policy(
        RelocationPolicy::PreserveState(Arc::new(Shifting::default())),
    ));
    reg.register(
        Registration::spot("signaled", |_| Big::default())
            .policy(RelocationPolicy::PreserveState(Arc::new(counted.clone())))
            .readiness(ReadinessMode::ApplicationSignaled),
    );
    for (kind, wrong) in [("fronted", false), ("fronted-wrong", true)] {
        let adapter = Fronted {
            counted: counted.clone(),
            wrong,
        };
        reg.register(
            Registration::spot(kind, |_| Big::default())
                .policy(RelocationPolicy::PreserveState(Arc::new(adapter)))
                .readiness(ReadinessMode::ApplicationSignaled),
        );
    }
    reg
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

const MIB: usize = 1 << 20;

/// Opens a room of `kind` on `node` with a 1 MiB blob and `adds` messages counted.
async fn open(node: &Node, kind: &str, id: &SpotId, adds: u64) -> Summary {
    node.create_spot_on(node.id(), kind, id)
        .await
        .expect("room");
    let _: (Summary, u64) = node
        .request(id, Cmd::Fill { len: MIB, seed: 7 }, T)
        .await
        .expect("filled");
    for _ in 0..adds {
        node.tell(id, Cmd::Add).expect("told");
    }
    summary(node, id).await
}

async fn summary(node: &Node, id: &SpotId) -> Summary {
    let (summary, _): (Summary, u64) = node.request(id, Cmd::Get, T).await.expect("answers");
    summary
}

/// Says the signaled room's state is whole until a move takes the defer, and returns the move's
/// report. A defer that ran before the move asked to seal is one no move took: the room hears
/// it carries on before its next turn, and is told again.
async fn defer_until_taken(
    node: &Node,
    id: &SpotId,
    mut moving: tokio::task::JoinHandle<MoveReport>,
) -> MoveReport {
    loop {
        let (_, before): (Summary, u64) = node.request(id, Cmd::Defer, T).await.expect("defers");
        let (_, after): (Summary, u64) = node.request(id, Cmd::Get, T).await.expect("answers");
        if after == before || moving.is_finished() {
            break;
        }
    }
    tokio::time::timeout(Duration::from_secs(40), &mut moving)
        .await
        .expect("the move ends")
        .expect("the move's task")
}

fn moved(report: &MoveReport) {
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
}

/// The move sent its whole image once the unit was sealed (a difference may have gone first).
fn sent_whole_after_seal(report: &MoveReport) {
    assert!(
        report.copied.after_seal >= report.bytes,
        "{:?} of {} bytes",
        report.copied,
        report.bytes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_room_ships_its_state_while_it_runs_and_only_what_changed_after_the_seal() {
    let counted = Counted::default();
    let cluster = Cluster::start(2, || registry(&counted)).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let id = spot("big");
    let before = open(n1, "big", &id, 100).await;
    // Messages queued behind the seal move with the room and run there once each.
    for _ in 0..100 {
        n1.tell(&id, Cmd::Add).expect("told");
    }
    let report = n1
        .move_unit(&id.clone().into(), Some(n2.id().clone()))
        .await
        .expect("move");
    moved(&report);
    assert!(report.copied.rounds >= 1, "{:?}", report.copied);
    assert!(
        report.copied.before_seal >= MIB as u64,
        "{:?}",
        report.copied
    );
    // The blob did not change after the first round: the seal sends the queue and the blocks
    // that hold the trailer, not the state again.
    assert!(
        report.copied.after_seal <= 2 * BLOCK as u64,
        "{:?}",
        report.copied
    );
    let after = summary(n2, &id).await;
    assert_eq!(
        after,
        Summary {
            count: 200,
            ..before
        }
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_that_changes_wholly_between_snapshots_stops_precopy_and_goes_whole_at_the_seal() {
    let counted = Counted::default();
    let cluster = Cluster::start(2, || registry(&counted)).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let id = spot("shifting");
    let before = open(n1, "shifting", &id, 10).await;
    let report = n1
        .move_unit(&id.clone().into(), Some(n2.id().clone()))
        .await
        .expect("move");
    moved(&report);
    // The second snapshot differs in every block: the round would not send less than the
    // first, so pre-copy stops there, and the seal sends the whole image.
    assert_eq!(report.copied.rounds, 1, "{:?}", report.copied);
    assert!(report.copied.rounds <= ROUNDS);
    assert!(
        report.copied.after_seal >= MIB as u64,
        "{:?}",
        report.copied
    );
    assert_eq!(report.copied.after_seal, report.bytes);
    let after = summary(n2, &id).await;
    assert_eq!(after, before);
    cluster.shutdown().await;
}

/// Starts a move of the signaled room `id` from n1 to `to` and waits until its pre-copy is over:
/// two snapshots taken (the second found nothing worth another round), so the move waits for
/// the room's application to say its state is whole.
async fn precopied(
    n1: &Node,
    to: &Node,
    id: &SpotId,
    counted: &Counted,
) -> tokio::task::JoinHandle<MoveReport> {
    let taken = counted.captures.load(Ordering::SeqCst);
    let (node, unit, target) = (n1.clone(), id.clone().into(), to.id().clone());
    let moving = tokio::spawn(async move {
        node.move_unit(&unit, Some(target))
            .await
            .expect("move starts")
    });
    counted.captured(taken + 2).await;
    moving
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_lost_the_precopy_before_the_seal_is_sent_the_whole_image() {
    let counted = Counted::default();
    let mut cluster = Cluster::start(2, || registry(&counted)).await;
    let n1 = cluster.nodes[0].clone();
    let n2 = cluster.nodes[1].clone();
    let id = spot("signaled");
    let before = open(&n1, "signaled", &id, 50).await;
    let moving = precopied(&n1, &n2, &id, &counted).await;
    // The target restarts: the new process holds nothing of the pre-copy.
    n2.abort().await;
    cluster.nodes.retain(|n| n.id() != n2.id());
    let n2 = cluster.add("n2", registry(&counted)).await;
    let report = defer_until_taken(&n1, &id, moving).await;
    moved(&report);
    assert_eq!(report.copied.rounds, 1, "{:?}", report.copied);
    // The difference went first, then the whole image once the target said it lacked the base.
    sent_whole_after_seal(&report);
    let after = summary(&n2, &id).await;
    assert_eq!(after, before);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_dies_between_precopy_and_seal_leaves_the_room_running_with_its_state() {
    let counted = Counted::default();
    let mut cluster = Cluster::start(3, || registry(&counted)).await;
    let n1 = cluster.nodes[0].clone();
    let n2 = cluster.nodes[1].clone();
    let n3 = cluster.nodes[2].clone();
    let id = spot("signaled");
    let before = open(&n1, "signaled", &id, 50).await;
    let moving = precopied(&n1, &n2, &id, &counted).await;
    n2.abort().await;
    cluster.nodes.retain(|n| n.id() != n2.id());
    let report = defer_until_taken(&n1, &id, moving).await;
    assert!(
        matches!(report.end, MoveEnd::Restored(_) | MoveEnd::NotSealed(_)),
        "{report:?}"
    );
    // It runs on where it was, with every message it ran, and moves on to a live node.
    let here = summary(&n1, &id).await;
    assert_eq!(here, before);
    let moving = precopied(&n1, &n3, &id, &counted).await;
    let report = defer_until_taken(&n1, &id, moving).await;
    moved(&report);
    let after = summary(&n3, &id).await;
    assert_eq!(after, before);
    cluster.shutdown().await;
}

/// Moves a room of `kind` (sealed where its application says) from n1 to n2 after a new entry
/// went to the front of its log between its pre-copy and its seal, with messages it ran before
/// and after the entry, and checks that messages sent through n1 then run once each on n2; the
/// move's report, and the room as sealed and as restored.
async fn moved_after_a_new_entry(kind: &str, counted: &Counted) -> (MoveReport, Summary, Summary) {
    let cluster = Cluster::start(2, || registry(counted)).await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);
    let id = spot(kind);
    open(n1, kind, &id, 30).await;
    let moving = precopied(n1, n2, &id, counted).await;
    // The move waits for the room's safe point: meanwhile every byte of its state shifts.
    let _: (Summary, u64) = n1
        .request(&id, Cmd::Push { len: 256, seed: 9 }, T)
        .await
        .expect("pushed");
    for _ in 0..20 {
        n1.tell(&id, Cmd::Add).expect("told");
    }
    let sealed = summary(n1, &id).await;
    assert_eq!(sealed.count, 50, "{sealed:?}");
    let report = defer_until_taken(n1, &id, moving).await;
    moved(&report);
    let restored = summary(n2, &id).await;
    // It runs on n2 alone: messages sent through n1 now run there, each once.
    for _ in 0..10 {
        n1.tell(&id, Cmd::Add).expect("told");
    }
    let later = summary(n1, &id).await;
    assert_eq!(later.count, restored.count + 10, "{later:?}");
    cluster.shutdown().await;
    (report, sealed, restored)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_whose_entries_shift_every_byte_sends_its_adapters_delta_at_the_seal() {
    let counted = Counted::default();
    let (report, sealed, restored) = moved_after_a_new_entry("fronted", &counted).await;
    assert_eq!(restored, sealed);
    assert!(report.copied.rounds >= 1, "{:?}", report.copied);
    // The entry and the queue went, not the shifted megabyte: a recipe with the delta.
    assert!(
        report.copied.after_seal < 4096 && report.copied.after_seal * 100 < report.bytes,
        "{:?} of {} bytes",
        report.copied,
        report.bytes
    );
    assert_eq!(counted.applied.load(Ordering::SeqCst), 1);

    // The same room with the serde adapter alone sends every block at the seal.
    let counted = Counted::default();
    let (report, sealed, restored) = moved_after_a_new_entry("signaled", &counted).await;
    assert_eq!(restored, sealed);
    assert!(
        report.copied.after_seal >= MIB as u64,
        "{:?} of {} bytes",
        report.copied,
        report.bytes
    );
    assert_eq!(counted.applied.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_delta_is_caught_and_the_room_arrives_whole_with_every_message_run_once() {
    let counted = Counted::default();
    let (report, sealed, restored) = moved_after_a_new_entry("fronted-wrong", &counted).await;
    // The delta rebuilt the count one too high: the image's checksum refused it, and the whole
    // image went after the recipe.
    assert_eq!(counted.applied.load(Ordering::SeqCst), 1);
    sent_whole_after_seal(&report);
    assert_eq!(restored, sealed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_precopy_cut_by_a_link_reset_is_lost_and_the_seal_sends_the_whole_image() {
    let counted = Counted::default();
    let mut cluster = Cluster::start(1, || registry(&counted)).await;
    let n1 = cluster.nodes[0].clone();
    let cut = CutSockets::default();
    let mut config = cluster.config("n2");
    if let Some(mesh) = config.mesh.as_mut() {
        mesh.sockets = Arc::new(cut.clone());
        mesh.keep_alive = Duration::from_millis(200);
        mesh.idle_timeout = Duration::from_secs(1);
    }
    let n2 = cluster.add_with(config, registry(&counted)).await;
    let id = spot("signaled");
    let before = open(&n1, "signaled", &id, 50).await;
    // The link goes silent before the move: its pre-copy round is written to a connection that
    // never delivers it.
    let taken = counted.captures.load(Ordering::SeqCst);
    cut.cut(n1.mesh_addr().expect("n1 has a mesh"));
    let (node, unit, target) = (n1.clone(), id.clone().into(), n2.id().clone());
    let moving = tokio::spawn(async move {
        node.move_unit(&unit, Some(target))
            .await
            .expect("move starts")
    });
    counted.captured(taken + 1).await;
    wait_link_lost(&n1, &n2).await;
    cut.heal();
    let report = defer_until_taken(&n1, &id, moving).await;
    moved(&report);
    assert_eq!(report.copied.rounds, 0, "{:?}", report.copied);
    sent_whole_after_seal(&report);
    let after = summary(&n2, &id).await;
    assert_eq!(after, before);
    cluster.shutdown().await;
}
