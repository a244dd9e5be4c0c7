//! The in-process store: one map behind one lock, shared by every node of the process.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{
    BatchOutcome, BoxFuture, Condition, Lease, LocationStore, Op, Page, StoreError, Versioned,
};
use crate::ids::NodeId;

/// The embedded location store, for the demo and for tests that run several nodes in one process.
///
/// Clones share one store, so each node of the process gets a clone. Lease expiry reads
/// [`tokio::time::Instant`], so tests can drive it with tokio's paused clock.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    revision: u64,
    entries: BTreeMap<String, Versioned>,
    leases: HashMap<NodeId, LeaseSlot>,
}

/// Per node: the last generation handed out (kept forever, so generations never repeat) and the
/// current lease, if it has not been released.
struct LeaseSlot {
    last_generation: u64,
    current: Option<(Lease, Instant)>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("MemoryStore")
            .field("revision", &state.revision)
            .field("entries", &state.entries.len())
            .field("nodes_with_leases", &state.leases.len())
            .finish()
    }
}

impl State {
    fn batch(&mut self, conditions: Vec<Condition>, ops: Vec<Op>) -> BatchOutcome {
        let now = Instant::now();
        for condition in &conditions {
            let holds = match condition {
                Condition::Absent(key) => !self.entries.contains_key(key),
                Condition::Version(key, version) => self
                    .entries
                    .get(key)
                    .is_some_and(|current| current.version == *version),
                Condition::Lease {
                    node, generation, ..
                } => self
                    .live_lease(node, now)
                    .is_some_and(|lease| lease.generation == *generation),
            };
            if !holds {
                return BatchOutcome::Conflict {
                    key: condition.key().to_owned(),
                };
            }
        }
        if ops.is_empty() {
            return BatchOutcome::Committed {
                revision: self.revision,
            };
        }
        self.revision += 1;
        let revision = self.revision;
        for op in ops {
            match op {
                Op::Put { key, value } => {
                    self.entries.insert(
                        key,
                        Versioned {
                            value,
                            version: revision,
                        },
                    );
                }
                Op::Delete { key } => {
                    self.entries.remove(&key);
                }
            }
        }
        BatchOutcome::Committed { revision }
    }

    fn scan(&self, prefix: &str, after: Option<&str>, limit: usize) -> Page {
        let limit = limit.max(1);
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut items: Vec<(String, Versioned)> = self
            .entries
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .take(limit.saturating_add(1))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|(key, _)| key.clone())
        } else {
            None
        };
        Page { items, next }
    }

    /// The node's lease if it is still live at `now`.
    fn live_lease(&self, node: &NodeId, now: Instant) -> Option<&Lease> {
        let (lease, expires) = self.leases.get(node)?.current.as_ref()?;
        (now < *expires).then_some(lease)
    }
}

impl MemoryStore {
    fn acquire(&self, node: &NodeId, holder: u64, ttl: Duration) -> Lease {
        let now = Instant::now();
        let mut state = self.inner.lock();
        let slot = state.leases.entry(node.clone()).or_insert(LeaseSlot {
            last_generation: 0,
            current: None,
        });
        slot.last_generation += 1;
        let lease = Lease {
            node: node.clone(),
            generation: slot.last_generation,
            ttl,
            holder,
        };
        slot.current = Some((lease.clone(), expiry(now, ttl)));
        lease
    }

    fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut state = self.inner.lock();
        match state.leases.get_mut(&lease.node) {
            Some(LeaseSlot {
                current: Some((current, expires)),
                ..
            }) if current.generation == lease.generation && now < *expires => {
                *expires = expiry(now, lease.ttl);
                current.ttl = lease.ttl;
                Ok(())
            }
            _ => Err(StoreError::LeaseLost {
                node: lease.node.clone(),
                generation: lease.generation,
            }),
        }
    }

    fn release(&self, lease: &Lease) {
        let mut state = self.inner.lock();
        if let Some(slot) = state.leases.get_mut(&lease.node)
            && slot
                .current
                .as_ref()
                .is_some_and(|(current, _)| current.generation == lease.generation)
        {
            slot.current = None;
        }
    }
}

// Each future does its work when first polled, under one short lock and without awaiting, so a
// future that is never polled changes nothing.
/// When a lease taken at `now` for `ttl` expires; an absurdly long TTL saturates instead of
/// overflowing the clock.
fn expiry(now: Instant, ttl: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(ttl.min(CENTURY)).unwrap_or(now)
}

impl LocationStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move { Ok(self.inner.lock().entries.get(key).cloned()) })
    }

    fn batch<'a>(
        &'a self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>> {
        Box::pin(async move { Ok(self.inner.lock().batch(conditions, ops)) })
    }

    fn batches<'a>(
        &'a self,
        items: Vec<(Vec<Condition>, Vec<Op>)>,
    ) -> BoxFuture<'a, Vec<Result<BatchOutcome, StoreError>>> {
        Box::pin(async move {
            let mut state = self.inner.lock();
            items
                .into_iter()
                .map(|(conditions, ops)| Ok(state.batch(conditions, ops)))
                .collect()
        })
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>> {
        Box::pin(async move { Ok(self.inner.lock().scan(prefix, after, limit)) })
    }

    fn acquire_lease<'a>(
        &'a self,
        node: &'a NodeId,
        holder: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move { Ok(self.acquire(node, holder, ttl)) })
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.renew(lease) })
    }

    fn lease_of<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> BoxFuture<'a, Result<Option<Lease>, StoreError>> {
        Box::pin(async move {
            let now = Instant::now();
            Ok(self.inner.lock().live_lease(node, now).cloned())
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.release(lease);
            Ok(())
        })
    }
}
