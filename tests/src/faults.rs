//! Faults to inject: a store wrapper that holds conditional writes until released (a slow commit),
//! and a state adapter whose restores a test can hold, slow down or fail (a slow or broken target).

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

/// A view of a real store whose `batch` calls wait while it is held.
pub struct HeldStore {
    inner: Arc<dyn LocationStore>,
    held: watch::Sender<bool>,
}

impl HeldStore {
    /// Wraps a store; writes flow until [`HeldStore::hold`].
    pub fn new(inner: Arc<dyn LocationStore>) -> Arc<Self> {
        Arc::new(HeldStore {
            inner,
            held: watch::Sender::new(false),
        })
    }

    /// From now on, writes wait.
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Lets every waiting and later write through.
    pub fn release(&self) {
        self.held.send_replace(false);
    }
}

impl LocationStore for HeldStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        self.inner.get(key)
    }

    fn batch<'a>(
        &'a self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>> {
        let mut held = self.held.subscribe();
        Box::pin(async move {
            let _ = held.wait_for(|h| !*h).await;
            self.inner.batch(conditions, ops).await
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
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        self.inner.acquire_lease(node, ttl)
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

/// The serde adapter with hooks: a test hears when a restore starts, decides when it ends (or how
/// long it takes), and can make it fail.
#[derive(Clone, Default)]
pub struct Hooked {
    started: Option<Arc<Mutex<mpsc::Sender<()>>>>,
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
            let _ = started.lock().map(|s| s.send(()));
        }
        if let Some(release) = &self.release {
            let _ = release.lock().map(|r| r.recv());
        }
        if let Some(delay) = self.delay {
            // A restore that works this long (it runs on a blocking thread of the target).
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
    started: mpsc::Receiver<()>,
    release: mpsc::Sender<()>,
}

impl Gate {
    /// A hooked adapter whose restores wait for this gate (and then fail, with `fail`).
    pub fn new(fail: bool) -> (Hooked, Gate) {
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let hooked = Hooked {
            started: Some(Arc::new(Mutex::new(started_tx))),
            release: Some(Arc::new(Mutex::new(release_rx))),
            delay: None,
            fail,
        };
        (hooked, Gate { started, release })
    }

    /// A hooked adapter whose restores tell this gate they started, then take `delay` and
    /// succeed; nothing needs to open the gate.
    pub fn slow(delay: Duration) -> (Hooked, Gate) {
        let (started_tx, started) = mpsc::channel();
        let (release, _) = mpsc::channel();
        let hooked = Hooked {
            started: Some(Arc::new(Mutex::new(started_tx))),
            release: None,
            delay: Some(delay),
            fail: false,
        };
        (hooked, Gate { started, release })
    }

    /// Waits (off the async threads) until a restore starts.
    pub async fn wait_started(&self) {
        tokio::task::block_in_place(|| self.started.recv_timeout(Duration::from_secs(10)))
            .expect("restore started");
    }

    /// Lets the waiting restore go on.
    pub fn open(&self) {
        self.release.send(()).expect("released");
    }
}
