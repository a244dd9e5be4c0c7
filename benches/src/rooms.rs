//! Rooms that carry a blob of state, which their turns may rewrite at a steady rate, on a cluster of
//! Ferry nodes sharing one `MemoryStore`, for the relocation benches; and the baseline they are
//! measured against: the stop-the-room handoff.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use ferry::cluster::authority::unit_key;
use ferry::mesh::ClusterCa;
use ferry::relocation::protocol::MoveEnd;
use ferry::store::{
    BatchOutcome, BoxFuture, Condition, Lease, LocationStore, MemoryStore, Op, Page, StoreError,
    Versioned,
};
use ferry::{
    Behavior, Ctx, MessageError, MoveError, MoveReport, Node, NodeId, OverrunPolicy, Registration,
    Registry, RelocationPolicy, SpotId, Tick, UnitError, UnitId,
};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The factory name of the room spot (SpotWide, `RelocationPolicy::serde()`).
pub const ROOM: &str = "room";

/// How long a bench request may take before the bench fails.
pub const T: Duration = Duration::from_secs(30);

/// A room: a blob of state and a count of what it was told.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Room {
    /// The room's state, as many bytes as the bench asks for, serialized as one slice.
    #[serde(with = "serde_bytes")]
    pub blob: Vec<u8>,
    /// The sum of the `Add`s it handled.
    pub count: u64,
    /// How fast its turns rewrite the blob, and how far they got.
    pub churn: Churn,
    /// The `Add`s it handled since it was made or restored on the node it runs on: not state, so
    /// that a bench can tell whether the messages queued at a move ran on the target.
    #[serde(skip)]
    pub added_here: u64,
}

/// How much of a room's state its turns rewrite while it runs, as a game's turns update its
/// entities: what pre-copy has to send again, round after round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ChangeRate {
    /// This share of the state each second (0 for none, 0.1 for a tenth): a window of contiguous
    /// bytes that moves along the blob, a run of them at each tick of the room's timer.
    PerSecond(f64),
    /// The whole state at every turn, ticks and messages alike: the worst case for pre-copy.
    /// The room's timer gives it a turn every [`EVERY_TURN_TICK`].
    EveryTurn,
}

impl Default for ChangeRate {
    fn default() -> Self {
        ChangeRate::PerSecond(0.0)
    }
}

impl ChangeRate {
    /// Whether the room's turns rewrite nothing.
    pub fn is_none(self) -> bool {
        self == ChangeRate::PerSecond(0.0)
    }
}

/// A room's rewriting: its rate and how many bytes it rewrote so far (where the window is).
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct Churn {
    /// How fast.
    pub rate: ChangeRate,
    /// Bytes rewritten so far; the next rewrite starts at this offset, modulo the blob's length.
    pub written: u64,
}

/// The name of the timer that paces a room's rewriting.
const CHURN: &str = "churn";

/// The shortest period of that timer at a rate: a game's simulation step at 30 Hz, as the FPS
/// rooms tick.
pub const STEP: Duration = Duration::from_micros(33_333);

/// The period of that timer for a room rewritten whole at every turn, which also takes a turn for
/// each message it is told. At [`STEP`], 200 rooms of 1 MiB would ask for 6 GiB of writes a
/// second, more than a small machine's memory bandwidth (a run starved: one room moved alone
/// paused 1.2 s); at this pace they ask for 800 MiB a second.
pub const EVERY_TURN_TICK: Duration = Duration::from_millis(250);

/// The fewest bytes one tick rewrites at a rate: a run of entities. A room whose rate asks for
/// less in a [`STEP`] ticks less often instead, so that 10,000 small rooms take few turns.
pub const RUN: usize = 1024;

/// How often a room of `len` bytes ticks at `rate`, and how many bytes each tick rewrites;
/// `None` when it rewrites nothing on a timer.
pub fn pace(rate: ChangeRate, len: usize) -> Option<(Duration, usize)> {
    match rate {
        _ if len == 0 => None,
        ChangeRate::EveryTurn => Some((EVERY_TURN_TICK, len)),
        ChangeRate::PerSecond(share) => {
            let per_s = share * len as f64;
            if !per_s.is_finite() || per_s <= 0.0 {
                return None;
            }
            let bytes = ((per_s * STEP.as_secs_f64()).ceil() as usize)
                .max(RUN)
                .min(len);
            // The period that makes `bytes` a tick come to `per_s`, to the microsecond.
            let period_us = (bytes as f64 * 1e6 / per_s).round() as u64;
            Some((Duration::from_micros(period_us.max(1)), bytes))
        }
    }
}

impl Room {
    /// Rewrites `n` bytes of the blob (all of it at most) from where the last rewrite ended,
    /// wrapping around; each byte changes, and the length and the count stay as they are.
    fn rewrite(&mut self, n: usize) {
        let len = self.blob.len();
        if len == 0 {
            return;
        }
        let n = n.min(len);
        let start = (self.churn.written % len as u64) as usize;
        let (head, tail) = self.blob.split_at_mut(start);
        let after = n.min(tail.len());
        for byte in tail[..after].iter_mut().chain(&mut head[..n - after]) {
            *byte = byte.wrapping_add(1);
        }
        self.churn.written += n as u64;
    }

    /// Sets the timer that paces the rewriting to the rate and the blob as they are now.
    fn schedule(&self, ctx: &mut Ctx<'_>) {
        match pace(self.churn.rate, self.blob.len()) {
            Some((period, _)) => ctx.set_timer(CHURN, period, OverrunPolicy::SkipLateTicks),
            None => {
                ctx.cancel_timer(CHURN);
            }
        }
    }
}

/// What a room is told.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RoomMsg {
    /// Adds to the count.
    Add(u64),
    /// Replaces the blob with this many bytes.
    Grow(usize),
    /// Holds the room's turn until the gate lets this number through (see [`move_with_queue`]).
    Hold(u64),
    /// Answers the room's whole state, serialized ([`Answer::State`]).
    Snapshot,
    /// Replaces the room's whole state with these serialized bytes.
    Load(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Answers the count.
    Get,
    /// Answers how many `Add`s it handled since it was made or restored where it runs.
    AddedHere,
    /// Sets how fast the room's turns rewrite its blob from now on.
    Churn(ChangeRate),
}

/// What a room answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Answer {
    /// The room's count, after an `Add` or for a `Get`.
    Count(u64),
    /// The state, serialized.
    State(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The state could not be serialized or loaded.
    Invalid(String),
}

impl Answer {
    /// The count, or why there is none.
    pub fn count(self) -> Result<u64, RoomError> {
        match self {
            Answer::Count(n) => Ok(n),
            other => Err(RoomError::Answer(other.what())),
        }
    }

    /// The serialized state, or why there is none.
    fn state(self) -> Result<Vec<u8>, RoomError> {
        match self {
            Answer::State(bytes) => Ok(bytes),
            other => Err(RoomError::Answer(other.what())),
        }
    }

    fn what(&self) -> String {
        match self {
            Answer::Count(n) => format!("a count ({n})"),
            Answer::State(bytes) => format!("a state of {} bytes", bytes.len()),
            Answer::Invalid(why) => format!("that its state is invalid: {why}"),
        }
    }
}

/// Why a bench step on a room failed.
#[derive(Debug, thiserror::Error)]
pub enum RoomError {
    /// A message to the room failed.
    #[error("the room did not take a message: {0}")]
    Message(#[from] MessageError),
    /// The room could not be created or stopped.
    #[error("the room could not be created or stopped: {0}")]
    Unit(#[from] UnitError),
    /// The location store failed.
    #[error("the location store failed: {0}")]
    Store(#[from] StoreError),
    /// The store did not save the room's state.
    #[error("the location store did not save the state of {0}")]
    NotSaved(SpotId),
    /// The room answered something else than what was asked.
    #[error("the room answered {0}")]
    Answer(String),
    /// The move could not start.
    #[error("the move could not start: {0}")]
    Move(#[from] MoveError),
    /// The move did not end with the room on the target.
    #[error("the move ended {0:?}, not with the room on its target")]
    NotMoved(MoveEnd),
    /// A task of the bench panicked or was cancelled.
    #[error("a task of the bench failed: {0}")]
    Task(String),
    /// The messages queued in the room at its move ran on the source, before its seal.
    #[error(
        "{ran} of the {queued} messages queued in {id} at its move ran on the target: the move \
         sealed the room after it ran its queue, so no queue was measured moving; the record read \
         that ferry_benches::rooms::watched holds must be a lone move's last step before its seal"
    )]
    QueueNotCarried {
        /// The room.
        id: SpotId,
        /// Messages queued.
        queued: usize,
        /// Of them, those that ran on the target.
        ran: u64,
    },
    /// The move of this room was not seen reading the room's record before its seal.
    #[error(
        "the move of {0} did not read the room's record through a watched store before its seal; \
         start the source node on a store wrapped by ferry_benches::rooms::watched"
    )]
    Unwatched(SpotId),
}

/// How many `Hold` turns the gate has let through, process-wide: a `Hold(n)` turn waits until
/// it is at least `n`.
static PASSED: Mutex<u64> = Mutex::new(0);
static GATE_CV: Condvar = Condvar::new();
/// The number of the latest `Hold` turn that reached the gate.
static REACHED: AtomicU64 = AtomicU64::new(0);
/// Numbers for `Hold` turns, each used once.
static NEXT_HOLD: AtomicU64 = AtomicU64::new(1);

/// The gate's count; a panic elsewhere while it was locked leaves it as it was, so a poisoned
/// lock is still sound.
fn passed() -> MutexGuard<'static, u64> {
    PASSED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lets every `Hold(n)` turn with `n <= upto` return.
fn let_through(upto: u64) {
    let mut passed = passed();
    *passed = (*passed).max(upto);
    GATE_CV.notify_all();
}

/// Waits until the `Hold(n)` turn reached the gate (or a later one did).
async fn reached(n: u64) -> Result<(), RoomError> {
    let waiting = async {
        while REACHED.load(Ordering::SeqCst) < n {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(T, waiting)
        .await
        .map_err(|_| RoomError::Answer(format!("nothing: it did not take its turn within {T:?}")))
}

impl Behavior for Room {
    type Msg = RoomMsg;
    type Reply = Answer;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: RoomMsg) -> Answer {
        if self.churn.rate == ChangeRate::EveryTurn {
            self.rewrite(self.blob.len());
        }
        match msg {
            RoomMsg::Add(n) => {
                self.count += n;
                self.added_here += 1;
            }
            RoomMsg::Grow(n) => {
                self.blob = (0..n).map(|i| (i % 251) as u8).collect();
                self.schedule(ctx);
            }
            RoomMsg::Churn(rate) => {
                self.churn.rate = rate;
                self.schedule(ctx);
            }
            RoomMsg::Hold(n) => {
                REACHED.fetch_max(n, Ordering::SeqCst);
                let mut passed = passed();
                while *passed < n {
                    passed = GATE_CV.wait(passed).unwrap_or_else(PoisonError::into_inner);
                }
            }
            RoomMsg::Snapshot => {
                return match postcard::to_allocvec(self) {
                    Ok(bytes) => Answer::State(bytes),
                    Err(error) => Answer::Invalid(error.to_string()),
                };
            }
            RoomMsg::Load(bytes) => match postcard::from_bytes(&bytes) {
                // A room made anew has no timer: the loaded rate sets it.
                Ok(room) => {
                    *self = room;
                    self.schedule(ctx);
                }
                Err(error) => return Answer::Invalid(error.to_string()),
            },
            RoomMsg::Get => {}
            RoomMsg::AddedHere => return Answer::Count(self.added_here),
        }
        Answer::Count(self.count)
    }

    fn on_tick(&mut self, _ctx: &mut Ctx<'_>, tick: &Tick) {
        if tick.name != CHURN {
            return;
        }
        // Slots missed while the room ran late are rewritten now, so the rate holds.
        let slots = usize::try_from(tick.skipped.saturating_add(1)).unwrap_or(usize::MAX);
        if let Some((_, bytes)) = pace(self.churn.rate, self.blob.len()) {
            self.rewrite(bytes.saturating_mul(slots));
        }
    }
}

/// A registry with the room.
pub fn registry() -> Registry {
    let mut reg = Registry::new();
    register(&mut reg);
    reg
}

/// Registers the room ([`ROOM`]) in `reg`, beside other factories.
pub fn register(reg: &mut Registry) {
    reg.register(Registration::spot(ROOM, |_| Room::default()).policy(RelocationPolicy::serde()));
}

/// Nodes `n1`, `n2`, ... on one `MemoryStore` ([`watched`], for [`move_with_queue`]), linked over
/// QUIC on loopback.
pub struct Cluster {
    /// The nodes, `n1` first: `nodes[i]` is `n{i + 1}`.
    pub nodes: Vec<Node>,
    /// Their store.
    pub store: Arc<dyn LocationStore>,
}

impl Cluster {
    /// Starts `n` nodes and waits until each links to every other.
    pub async fn start(n: usize) -> Cluster {
        let store = watched(Arc::new(MemoryStore::new()));
        let ca = ClusterCa::generate().expect("a cluster CA");
        let mut nodes = Vec::new();
        for i in 1..=n {
            let config = crate::cross::config(&format!("n{i}"), store.clone(), &ca);
            nodes.push(
                Node::start(config, registry())
                    .await
                    .expect("a node starts"),
            );
        }
        // Twice: the first pass publishes each node, the second reads the others.
        for _ in 0..2 {
            for node in &nodes {
                node.refresh_membership()
                    .await
                    .expect("the membership is read");
            }
        }
        for a in &nodes {
            for b in &nodes {
                if a.id() != b.id() {
                    a.wait_peer_ready(b.id()).await.expect("the link comes up");
                }
            }
        }
        Cluster { nodes, store }
    }

    /// Creates a room on `node` with `bytes` of state.
    pub async fn room(&self, node: usize, id: &SpotId, bytes: usize) {
        let host = &self.nodes[node];
        host.create_spot_on(host.id(), ROOM, id)
            .await
            .expect("the room is created");
        let _: Answer = host
            .request(id, RoomMsg::Grow(bytes), T)
            .await
            .expect("the room grows");
    }

    /// Shuts every node down.
    pub async fn shutdown(self) {
        for node in &self.nodes {
            node.shutdown().await;
        }
    }
}

/// The store key the baseline saves a room's state under.
fn state_key(id: &SpotId) -> String {
    format!("bench/state/{id}")
}

/// What one stop-the-room handoff did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handoff {
    /// The room's count as it answered on the target, the buffered tells included.
    pub count: u64,
    /// Bytes of state saved to the store and read back.
    pub bytes: usize,
}

/// The baseline: hands a room from `source` to `target` the way Akka-style shard handoff and
/// Orleans deactivation do. The room's state is taken and it is stopped on the source, the state is
/// written to the store, the room is created on the target, which reads the state back and loads
/// it; then `buffered` (held by the sender meanwhile) is delivered from the source, and the room's
/// count is asked from the source.
pub async fn stop_the_room_handoff(
    store: &Arc<dyn LocationStore>,
    source: &Node,
    target: &Node,
    id: &SpotId,
    buffered: &[RoomMsg],
) -> Result<Handoff, RoomError> {
    let state = source
        .request::<_, Answer>(id, RoomMsg::Snapshot, T)
        .await?
        .state()?;
    let bytes = state.len();
    source.stop_unit(&UnitId::Spot(id.clone())).await?;
    let key = state_key(id);
    let put = Op::Put {
        key: key.clone(),
        value: Bytes::from(state),
    };
    let BatchOutcome::Committed { .. } = store.batch(Vec::new(), vec![put]).await? else {
        return Err(RoomError::NotSaved(id.clone()));
    };
    source.create_spot_on(target.id(), ROOM, id).await?;
    let saved = store
        .get(&key)
        .await?
        .ok_or_else(|| RoomError::NotSaved(id.clone()))?;
    target
        .request::<_, Answer>(id, RoomMsg::Load(saved.value.to_vec()), T)
        .await?
        .count()?;
    for msg in buffered {
        source.tell(id, msg.clone())?;
    }
    let count = source
        .request::<_, Answer>(id, RoomMsg::Get, T)
        .await?
        .count()?;
    Ok(Handoff { count, bytes })
}

/// What one Ferry move with a queue measured.
#[derive(Debug, Clone)]
pub struct QueuedMove {
    /// The move's own report: its pause and phases.
    pub report: MoveReport,
    /// From the seal until a question queued behind the tells was answered on the target: the
    /// baseline's own measure, taken on Ferry.
    pub answered: Duration,
    /// The room's count in that answer, the queued tells included.
    pub count: u64,
}

/// Polls a future once, so it runs up to its first wait; its output if it already finished.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *fut).poll(cx) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        })
    })
    .await
}

/// Moves room `id` from `source` to `target` with `queued` tells of `Add(1)` queued in it, and a
/// question behind them. The room runs while the move pre-copies it; once the move has quiesced
/// it (caught as the move reads the room's authority record, which it does right before it asks
/// for the seal: see [`watched`]), the room is held in a turn, the tells and the question are
/// queued behind it, and the turn returns only once the seal is asked for: the seal is the first
/// thing the room does, and every tell and the question are saved work the move carries.
///
/// The source must run on a store wrapped by [`watched`]. A held turn blocks a runtime thread until
/// it is let through, so call this from the task that `Runtime::block_on` runs (not a spawned
/// one), on a runtime with at least two worker threads, and for one room at a time.
pub async fn move_with_queue(
    source: &Node,
    target: &NodeId,
    id: &SpotId,
    queued: usize,
) -> Result<QueuedMove, RoomError> {
    let hold = NEXT_HOLD.fetch_add(1, Ordering::SeqCst);
    let result = held_move(source, target, id, queued, hold).await;
    // Whatever failed, the room runs on.
    let_through(hold);
    result
}

/// [`move_with_queue`] with hold number `hold`.
async fn held_move(
    source: &Node,
    target: &NodeId,
    id: &SpotId,
    queued: usize,
    hold: u64,
) -> Result<QueuedMove, RoomError> {
    let unit = UnitId::Spot(id.clone());
    let mut watch = Watch::arm(unit_key(&unit));
    // Polled here, not spawned, until the seal is asked for: each step below happens between
    // two polls.
    let (mover, moved_unit, to) = (source.clone(), unit, target.clone());
    let mut moving = Box::pin(async move { mover.move_unit(&moved_unit, Some(to)).await });
    tokio::select! {
        biased;
        report = &mut moving => return Err(unwatched(id, report?)),
        arrived = &mut watch.arrived => arrived.map_err(|_| RoomError::Unwatched(id.clone()))?,
    }
    // The move quiesced the room and waits for its record: hold the room, queue behind it.
    source.tell(id, RoomMsg::Hold(hold))?;
    reached(hold).await?;
    for _ in 0..queued {
        source.tell(id, RoomMsg::Add(1))?;
    }
    // Runs in a task of its own once queued, as a drain runs its moves.
    let (asker, room) = (source.clone(), id.clone());
    let mut question =
        Box::pin(async move { asker.request::<_, Answer>(&room, RoomMsg::Get, T).await });
    if let Some(answer) = poll_once(&mut question).await {
        return Err(RoomError::Answer(answer?.what()));
    }
    // The record is read now; the poll that takes it goes on to ask the room to seal, at the
    // end of the held turn.
    watch.release();
    tokio::select! {
        biased;
        report = &mut moving => return Err(RoomError::NotMoved(report?.end)),
        answered = &mut watch.answered => answered.map_err(|_| RoomError::Unwatched(id.clone()))?,
    }
    let sealed = Instant::now();
    let answered = tokio::spawn(async move {
        let answer = question.await;
        (answer, sealed.elapsed())
    });
    let moved = tokio::spawn(moving);
    let_through(hold);
    let report = moved.await.map_err(|e| RoomError::Task(e.to_string()))??;
    if report.end != MoveEnd::Moved {
        return Err(RoomError::NotMoved(report.end));
    }
    let (answer, answered) = answered.await.map_err(|e| RoomError::Task(e.to_string()))?;
    let ran = source
        .request::<_, Answer>(id, RoomMsg::AddedHere, T)
        .await?
        .count()?;
    if ran < queued as u64 {
        return Err(RoomError::QueueNotCarried {
            id: id.clone(),
            queued,
            ran,
        });
    }
    Ok(QueuedMove {
        report,
        answered,
        count: answer?.count()?,
    })
}

/// Why a move ended before the bench caught it reading its room's record.
fn unwatched(id: &SpotId, report: MoveReport) -> RoomError {
    match report.end {
        MoveEnd::Moved => RoomError::Unwatched(id.clone()),
        end => RoomError::NotMoved(end),
    }
}

/// The read [`move_with_queue`] waits for, process-wide: the key, and how to tell the bench.
static WATCH: Mutex<Option<Caught>> = Mutex::new(None);

/// The store's side of a watched read.
struct Caught {
    key: String,
    /// Tells the bench the read has come.
    arrived: oneshot::Sender<()>,
    /// Lets the read go to the store.
    go: oneshot::Receiver<()>,
    /// Tells the bench the store answered it.
    answered: oneshot::Sender<()>,
}

/// The bench's side of a watched read; it stops watching when dropped.
struct Watch {
    arrived: oneshot::Receiver<()>,
    go: Option<oneshot::Sender<()>>,
    answered: oneshot::Receiver<()>,
}

impl Watch {
    /// Watches for the next read of `key` through a [`watched`] store.
    fn arm(key: String) -> Watch {
        let (arrived_tx, arrived) = oneshot::channel();
        let (go_tx, go) = oneshot::channel();
        let (answered_tx, answered) = oneshot::channel();
        *watching() = Some(Caught {
            key,
            arrived: arrived_tx,
            go,
            answered: answered_tx,
        });
        Watch {
            arrived,
            go: Some(go_tx),
            answered,
        }
    }

    /// Lets the caught read go to the store.
    fn release(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A read not caught yet is not waited for any more; one caught goes on (its `go` drops).
        watching().take();
    }
}

/// The watched read; a panic elsewhere while it was locked leaves it whole, so a poisoned lock
/// is still sound.
fn watching() -> MutexGuard<'static, Option<Caught>> {
    WATCH.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A location store that passes everything to `inner`, and holds the one read of a unit's record
/// that [`move_with_queue`] waits for until it lets it go. A move outside a drain reads its unit's
/// record right after it quiesced the unit and right before it asks for the seal, whether it
/// pre-copied the unit or not: that read is how the bench knows the seal comes next. (A drain's
/// move reads it before it waits for the drain's seal window; the bench holds none of those.)
pub fn watched(inner: Arc<dyn LocationStore>) -> Arc<dyn LocationStore> {
    Arc::new(Watched { inner })
}

/// See [`watched`].
struct Watched {
    inner: Arc<dyn LocationStore>,
}

impl LocationStore for Watched {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        let caught = {
            let mut watch = watching();
            match watch.as_ref() {
                Some(caught) if caught.key == key => watch.take(),
                _ => None,
            }
        };
        let Some(caught) = caught else {
            return self.inner.get(key);
        };
        Box::pin(async move {
            let _ = caught.arrived.send(());
            // Gone (the bench stopped watching) lets it go too.
            let _ = caught.go.await;
            let read = self.inner.get(key).await;
            let _ = caught.answered.send(());
            read
        })
    }

    fn get_confirmed<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        self.inner.get_confirmed(key)
    }

    fn batch<'a>(
        &'a self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>> {
        self.inner.batch(conditions, ops)
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>> {
        self.inner.scan(prefix, after, limit)
    }

    fn acquire_lease<'a>(
        &'a self,
        node: &'a NodeId,
        holder: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        self.inner.acquire_lease(node, holder, ttl)
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.renew_lease(lease)
    }

    fn lease_of<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> BoxFuture<'a, Result<Option<Lease>, StoreError>> {
        self.inner.lease_of(node)
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release_lease(lease)
    }
}

/// [`stop_the_room_handoff`] in a task of its own, as a drain runs its moves; also returns how
/// long it took, timed in that task.
pub async fn spawn_handoff(
    store: Arc<dyn LocationStore>,
    source: Node,
    target: Node,
    id: SpotId,
    buffered: Vec<RoomMsg>,
) -> Result<(Handoff, Duration), RoomError> {
    tokio::spawn(async move {
        let started = Instant::now();
        let handoff = stop_the_room_handoff(&store, &source, &target, &id, &buffered).await?;
        Ok((handoff, started.elapsed()))
    })
    .await
    .map_err(|e| RoomError::Task(e.to_string()))?
}

/// The node that hosts `id` among `nodes`.
pub fn host_of(nodes: &[Node], id: &SpotId) -> usize {
    let unit = UnitId::Spot(id.clone());
    nodes
        .iter()
        .position(|n| n.hosts(&unit))
        .expect("some node hosts the room")
}

/// The node id of `nodes[i]`.
pub fn id_of(nodes: &[Node], i: usize) -> NodeId {
    nodes[i].id().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_that_changes_nothing_has_no_timer() {
        assert_eq!(pace(ChangeRate::PerSecond(0.0), 4096), None);
        assert_eq!(pace(ChangeRate::PerSecond(0.5), 0), None);
        assert_eq!(pace(ChangeRate::EveryTurn, 0), None);
    }

    /// Whatever the run and the step make of it, a tick's bytes over its period come to the rate.
    #[test]
    fn the_pace_comes_to_the_rate() {
        for (share, len) in [
            (0.1, 4096),
            (0.1, 1 << 20),
            (1.0, 1 << 20),
            (0.001, 512),
            (5.0, 64),
        ] {
            let (period, bytes) = pace(ChangeRate::PerSecond(share), len).expect("a pace");
            assert!(
                period >= STEP || bytes == len,
                "{share} of {len}: {period:?}"
            );
            assert!(bytes <= len);
            let rate = bytes as f64 / period.as_secs_f64();
            let asked = share * len as f64;
            assert!(
                (rate - asked).abs() <= asked * 1e-3,
                "{share} of {len}: {rate} B/s"
            );
        }
        // 4 KiB at a tenth a second: one run of 1 KiB every 2.5 s.
        assert_eq!(
            pace(ChangeRate::PerSecond(0.1), 4096),
            Some((Duration::from_millis(2_500), RUN))
        );
        assert_eq!(
            pace(ChangeRate::EveryTurn, 1 << 20),
            Some((EVERY_TURN_TICK, 1 << 20))
        );
    }

    #[test]
    fn a_rewrite_moves_along_the_blob_and_wraps_keeping_length_and_count() {
        let mut room = Room {
            blob: vec![0; 10],
            count: 7,
            churn: Churn::default(),
            added_here: 0,
        };
        room.rewrite(4);
        assert_eq!(room.blob, [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]);
        room.rewrite(8);
        assert_eq!(room.blob, [2, 2, 1, 1, 1, 1, 1, 1, 1, 1]);
        // More than the blob rewrites each byte once.
        room.rewrite(25);
        assert_eq!(room.blob, [3, 3, 2, 2, 2, 2, 2, 2, 2, 2]);
        assert_eq!((room.blob.len(), room.count), (10, 7));
    }
}
