//! Faults to inject into a real store: a wrapper that holds conditional writes until released, to
//! make a node's commit slow on purpose.

use std::sync::Arc;
use std::time::Duration;

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
