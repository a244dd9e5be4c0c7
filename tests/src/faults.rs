//! Faults to inject: a store wrapper whose writes can wait or fail and whose reads can fail,
//! and a state adapter whose restores a test can hold, slow down or fail (a slow or broken target).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry::{AdapterError, SerdeAdapter, StateAdapter};
use serde::Serialize;
use serde::de::DeserializeOwned;

use ferry::NodeId;
use ferry::store::{
    BatchOutcome, BoxFuture, Condition, Lease, LocationStore, Op, Page, StoreError, Versioned,
};
use tokio::sync::watch;

/// A view of a real store with faults a test switches on: writes or reads of some keys that wait
/// until released (a slow commit, a slow lookup), reads of some keys that fail, and writes that
/// fail or whose answer is lost after they landed.
pub struct FaultyStore {
    inner: Arc<dyn LocationStore>,
    /// Whether writes wait, and if only those touching keys under a prefix, that prefix.
    held: watch::Sender<Option<String>>,
    /// How many writes are waiting now.
    waiting: watch::Sender<usize>,
    /// Whether reads of keys under a prefix wait, and which prefix.
    reads_held: watch::Sender<Option<String>>,
    /// The prefix whose reads fail, and how many more of them fail (`usize::MAX`: until healed).
    failing: Mutex<Option<(String, usize)>>,
    /// How many reads failed so far.
    failed: AtomicUsize,
    /// Every key read so far, once per read, in order.
    reads: watch::Sender<Vec<String>>,
    /// What happens to writes that are not held.
    writes: Mutex<WriteFault>,
    /// Whether lease renewals go unanswered.
    renewals_unanswered: AtomicBool,
    /// The node whose lease renewals are refused (a store it cannot reach), if any.
    renewals_refused: Mutex<Option<NodeId>>,
    /// How many of the next lease acquisitions land but lose their answer.
    acquisitions_unanswered: AtomicUsize,
}

/// What a [`FaultyStore`] does with a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFault {
    /// It goes through.
    None,
    /// It lands, but its answer is lost: the writer hears a timeout.
    Unanswered,
    /// It fails before it reaches the store.
    Fails,
}

impl FaultyStore {
    /// Wraps a store; everything flows until a fault is switched on.
    pub fn new(inner: Arc<dyn LocationStore>) -> Arc<Self> {
        Arc::new(FaultyStore {
            inner,
            held: watch::Sender::new(None),
            waiting: watch::Sender::new(0),
            reads_held: watch::Sender::new(None),
            failing: Mutex::new(None),
            failed: AtomicUsize::new(0),
            reads: watch::Sender::new(Vec::new()),
            writes: Mutex::new(WriteFault::None),
            renewals_unanswered: AtomicBool::new(false),
            renewals_refused: Mutex::new(None),
            acquisitions_unanswered: AtomicUsize::new(0),
        })
    }

    /// From now on, `node`'s lease renewals are refused as by a store it cannot reach (`None`:
    /// they go through again).
    pub fn refuse_renewals_of(&self, node: Option<&NodeId>) {
        *self.renewals_refused.lock().expect("refused") = node.cloned();
    }

    /// The next `times` lease acquisitions land in the store, but their callers hear a timeout.
    pub fn lose_acquisition_answers(&self, times: usize) {
        self.acquisitions_unanswered.store(times, Ordering::SeqCst);
    }

    /// From now on, lease renewals get no answer (a store that hangs, or a link to it that does).
    pub fn leave_renewals_unanswered(&self) {
        self.renewals_unanswered.store(true, Ordering::SeqCst);
    }

    /// From now on, writes wait.
    pub fn hold(&self) {
        self.hold_keys("");
    }

    /// From now on, writes that touch a key starting with `prefix` wait; others flow.
    pub fn hold_keys(&self, prefix: &str) {
        self.held.send_replace(Some(prefix.to_owned()));
    }

    /// Waits until some write is waiting.
    pub async fn wait_held(&self) {
        let mut waiting = self.waiting.subscribe();
        let _ = waiting.wait_for(|n| *n > 0).await;
    }

    /// Lets every waiting and later write through.
    pub fn release(&self) {
        self.held.send_replace(None);
    }

    /// From now on, reads of keys starting with `prefix` wait until [`FaultyStore::release_reads`].
    pub fn hold_reads(&self, prefix: &str) {
        self.reads_held.send_replace(Some(prefix.to_owned()));
    }

    /// Lets every waiting and later read through.
    pub fn release_reads(&self) {
        self.reads_held.send_replace(None);
    }

    /// The next `times` reads of keys starting with `prefix` fail (`usize::MAX`: all, until
    /// [`FaultyStore::heal`]).
    pub fn fail_gets(&self, prefix: &str, times: usize) {
        *self.failing.lock().expect("failing") = Some((prefix.to_owned(), times));
    }

    /// Reads flow again.
    pub fn heal(&self) {
        *self.failing.lock().expect("failing") = None;
    }

    /// How many reads have failed so far.
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    /// How many reads of keys starting with `prefix` were asked for so far (failed ones too).
    pub fn reads_of(&self, prefix: &str) -> usize {
        self.reads
            .borrow()
            .iter()
            .filter(|k| k.starts_with(prefix))
            .count()
    }

    /// Waits until `n` reads of keys starting with `prefix` were asked for.
    pub async fn wait_reads(&self, prefix: &str, n: usize) {
        let mut reads = self.reads.subscribe();
        let _ = reads
            .wait_for(|keys| keys.iter().filter(|k| k.starts_with(prefix)).count() >= n)
            .await;
    }

    /// From now on, writes that are not held meet `fault`.
    pub fn fault_writes(&self, fault: WriteFault) {
        *self.writes.lock().expect("writes") = fault;
    }

    /// Whether this read is one that fails (counting it down).
    fn read_fails(&self, key: &str) -> bool {
        let mut failing = self.failing.lock().expect("failing");
        match failing.as_mut() {
            Some((prefix, left)) if *left > 0 && key.starts_with(prefix.as_str()) => {
                if *left != usize::MAX {
                    *left -= 1;
                }
                true
            }
            _ => false,
        }
    }
}

impl LocationStore for FaultyStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        self.reads.send_modify(|keys| keys.push(key.to_owned()));
        if self.read_fails(key) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Box::pin(async {
                Err(StoreError::Unavailable {
                    reason: "read failed on purpose".into(),
                })
            });
        }
        let mut held = self.reads_held.subscribe();
        let waits = held
            .borrow()
            .as_deref()
            .is_some_and(|prefix| key.starts_with(prefix));
        Box::pin(async move {
            if waits {
                let _ = held.wait_for(Option::is_none).await;
            }
            self.inner.get(key).await
        })
    }

    fn batch<'a>(
        &'a self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>> {
        let mut held = self.held.subscribe();
        let touches = |prefix: &str| {
            conditions.iter().any(|c| c.key().starts_with(prefix))
                || ops.iter().any(|o| o.key().starts_with(prefix))
        };
        let waits = held.borrow().as_deref().is_some_and(touches);
        Box::pin(async move {
            if waits {
                self.waiting.send_modify(|n| *n += 1);
                let _ = held.wait_for(Option::is_none).await;
                self.waiting.send_modify(|n| *n -= 1);
            }
            let fault = *self.writes.lock().expect("writes");
            match fault {
                WriteFault::None => self.inner.batch(conditions, ops).await,
                WriteFault::Unanswered => {
                    let _ = self.inner.batch(conditions, ops).await;
                    Err(StoreError::Timeout {
                        op: "batch",
                        after: Duration::from_millis(1),
                    })
                }
                WriteFault::Fails => Err(StoreError::Unavailable {
                    reason: "the test took the store away".into(),
                }),
            }
        })
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
        let lost = self
            .acquisitions_unanswered
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !lost {
            return self.inner.acquire_lease(node, holder, ttl);
        }
        Box::pin(async move {
            let _ = self.inner.acquire_lease(node, holder, ttl).await;
            Err(StoreError::Timeout {
                op: "acquire_lease",
                after: Duration::from_millis(1),
            })
        })
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        if self.renewals_unanswered.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        if self.renewals_refused.lock().expect("refused").as_ref() == Some(&lease.node) {
            return Box::pin(async {
                Err(StoreError::Unavailable {
                    reason: "the test cut this node off from the store".into(),
                })
            });
        }
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

/// The serde adapter with hooks: a test hears when a restore starts, decides when it ends (or how
/// long it takes), and can make it fail.
#[derive(Clone, Default)]
pub struct Hooked {
    started: Option<tokio::sync::mpsc::UnboundedSender<()>>,
    release: Option<Arc<Mutex<mpsc::Receiver<()>>>>,
    delay: Option<Duration>,
    fail: bool,
}

impl<B: Serialize + DeserializeOwned + Send + 'static> StateAdapter<B> for Hooked {
    fn capture(&self, unit: &B) -> Result<Vec<u8>, AdapterError> {
        SerdeAdapter.capture(unit)
    }

    fn restore(&self, unit: &mut B, bytes: &[u8]) -> Result<(), AdapterError> {
        if let Some(started) = &self.started {
            let _ = started.send(());
        }
        if let Some(release) = &self.release {
            let _ = release.lock().map(|r| r.recv());
        }
        if let Some(delay) = self.delay {
            // A restore that works this long, holding the thread it runs on (a runtime thread of
            // the target for a small image, as these tests' rooms are: they run with threads to
            // spare).
            std::thread::sleep(delay);
        }
        if self.fail {
            return Err(AdapterError("restore refused on purpose".into()));
        }
        SerdeAdapter.restore(unit, bytes)
    }
}

/// The test's side of a [`Hooked`] restore.
pub struct Gate {
    started: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<()>>,
    release: mpsc::Sender<()>,
}

impl Gate {
    /// A hooked adapter whose restores wait for this gate (and then fail, with `fail`).
    pub fn new(fail: bool) -> (Hooked, Gate) {
        let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
        let (release, release_rx) = mpsc::channel();
        let hooked = Hooked {
            started: Some(started_tx),
            release: Some(Arc::new(Mutex::new(release_rx))),
            delay: None,
            fail,
        };
        let started = tokio::sync::Mutex::new(started);
        (hooked, Gate { started, release })
    }

    /// A hooked adapter whose restores tell this gate they started, then take `delay` and
    /// succeed; nothing needs to open the gate.
    pub fn slow(delay: Duration) -> (Hooked, Gate) {
        let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
        let (release, _) = mpsc::channel();
        let hooked = Hooked {
            started: Some(started_tx),
            release: None,
            delay: Some(delay),
            fail: false,
        };
        let started = tokio::sync::Mutex::new(started);
        (hooked, Gate { started, release })
    }

    /// Waits until a restore starts.
    pub async fn wait_started(&self) {
        let mut started = self.started.lock().await;
        let started = tokio::time::timeout(Duration::from_secs(10), started.recv()).await;
        assert!(matches!(started, Ok(Some(()))), "restore started");
    }

    /// Lets the waiting restore go on.
    pub fn open(&self) {
        self.release.send(()).expect("released");
    }
}

/// A turn that a test holds: a handler calls [`TurnGate::pass`] with the gate's name and blocks
/// there until the test opens the gate, so that what the test sends meanwhile is queued behind
/// that turn.
pub struct TurnGate {
    name: String,
    entered: mpsc::Receiver<()>,
}

/// The open side of each gate a handler may be waiting at, by name.
type Waiting = (mpsc::Sender<()>, Arc<(Mutex<bool>, std::sync::Condvar)>);

static GATES: std::sync::LazyLock<Mutex<std::collections::HashMap<String, Waiting>>> =
    std::sync::LazyLock::new(Default::default);

impl TurnGate {
    /// A closed gate under a name unique to the test.
    pub fn new(name: &str) -> TurnGate {
        let (entered_tx, entered) = mpsc::channel();
        let open = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        GATES
            .lock()
            .expect("gates")
            .insert(name.to_owned(), (entered_tx, open));
        TurnGate {
            name: name.to_owned(),
            entered,
        }
    }

    /// Called by a handler: blocks the turn until the gate named `name` opens (at once if there
    /// is no such gate).
    pub fn pass(name: &str) {
        let Some((entered, open)) = GATES.lock().expect("gates").get(name).cloned() else {
            return;
        };
        let _ = entered.send(());
        let (lock, opened) = &*open;
        let mut is_open = lock.lock().expect("gate");
        while !*is_open {
            is_open = opened.wait(is_open).expect("gate");
        }
    }

    /// Waits (off the async threads) until a handler is in the turn.
    pub async fn wait_entered(&self) {
        tokio::task::block_in_place(|| self.entered.recv_timeout(Duration::from_secs(10)))
            .expect("the held turn started");
    }

    /// Lets the held turn finish.
    pub fn open(&self) {
        if let Some((_, open)) = GATES.lock().expect("gates").remove(&self.name) {
            let (lock, opened) = &*open;
            *lock.lock().expect("gate") = true;
            opened.notify_all();
        }
    }
}
