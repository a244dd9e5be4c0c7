//! The location store: the authority on where every unit lives.
//!
//! The store is a generic, versioned key/value map with conditional batches, prefix scans and
//! per-node owner leases. It knows nothing about units: a higher layer encodes authority records
//! into the values, so this module stays small enough to be implemented by several engines.
//!
//! - [`MemoryStore`]: in-process, shared by the nodes of one process (demo, tests).
//! - [`RedisStore`]: for clusters of processes and machines, backed by a redis-server, or by the
//!   master a set of sentinels names (`redis_link` holds that connection and finds it again;
//!   `redis_call` bounds each call and types its failure).
//! - `EtcdStore` (with the `etcd` feature): the linearizable backend, on an etcd cluster.
//! - [`StoreUrl`]: where a store is, as a config names it, and opening it.
//! - `committer`: a node's conditional writes, sent together in calls of
//!   [`LocationStore::batches`] as the core's group commit decides.
//! - `io_thread`: the runtime thread the network stores run their connections on.
//!
//! Every write carries a store-wide revision that only grows, so a version seen once is never
//! seen again for a different value, even after a delete and a re-create (no ABA).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

use ferry_core::authority::CorruptRecord;
use ferry_core::conditional::WriteAnswer;

use crate::ids::NodeId;

mod committer;
#[cfg(feature = "etcd")]
mod etcd;
mod io_thread;
mod memory;
mod redis;
mod redis_call;
mod redis_link;
mod url;

pub(crate) use self::committer::Committer;
#[cfg(feature = "etcd")]
pub use self::etcd::{EtcdStore, EtcdStoreConfig};
pub use self::redis::{RedisStore, RedisStoreConfig, WaitReplicas};
pub use self::redis_link::SentinelTarget;
pub use self::url::StoreUrl;
pub use memory::MemoryStore;

/// A boxed, sendable future, so that [`LocationStore`] can be used as a trait object
/// (`Arc<dyn LocationStore>`) and the engine can be chosen at start-up.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A value together with the revision that wrote it; the version is what a later
/// [`Condition::Version`] compares against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The bytes last written under the key.
    pub value: Bytes,
    /// The store-wide revision of the write that produced `value`: strictly increasing across all
    /// writes of the store and never reused, also after the key was deleted and written again.
    pub version: u64,
}

/// A precondition of a [`LocationStore::batch`]: the batch applies only if every condition holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The key must not exist: used to create a record exactly once.
    Absent(String),
    /// The key must exist and carry exactly this version: used to change a record only if nobody
    /// else changed it since it was read.
    Version(String, u64),
    /// The node's lease must be live and of this generation: an owner's writes carry it, so that a
    /// process whose lease was superseded or has run out cannot change the records it once owned.
    /// Its key (as named in a conflict) is [`lease_key`] of the node.
    Lease {
        /// [`lease_key`] of `node`.
        key: String,
        /// The node whose lease it is.
        node: NodeId,
        /// The generation the writer holds.
        generation: u64,
    },
}

/// The name a [`Condition::Lease`] goes by in a [`BatchOutcome::Conflict`]; never a record key.
pub fn lease_key(node: &NodeId) -> String {
    format!("lease/{node}")
}

impl Condition {
    /// The key must not exist.
    pub fn absent(key: impl Into<String>) -> Self {
        Condition::Absent(key.into())
    }

    /// The key must exist at exactly `version`.
    pub fn version(key: impl Into<String>, version: u64) -> Self {
        Condition::Version(key.into(), version)
    }

    /// The key must exist at exactly `version`, or, with none, not exist: it is as it was read.
    pub fn as_read(key: impl Into<String>, version: Option<u64>) -> Self {
        match version {
            Some(version) => Condition::version(key, version),
            None => Condition::absent(key),
        }
    }

    /// The writer's lease must be live and still the one it holds.
    pub fn lease(lease: &Lease) -> Self {
        Condition::Lease {
            key: lease_key(&lease.node),
            node: lease.node.clone(),
            generation: lease.generation,
        }
    }

    /// The key this condition is about, as named in a [`BatchOutcome::Conflict`].
    pub fn key(&self) -> &str {
        match self {
            Condition::Absent(key) | Condition::Version(key, _) | Condition::Lease { key, .. } => {
                key
            }
        }
    }
}

/// One write of a [`LocationStore::batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Write `value` under `key`, creating or replacing it.
    Put {
        /// The key to write.
        key: String,
        /// The new value.
        value: Bytes,
    },
    /// Remove `key`; removing a key that does not exist is not an error.
    Delete {
        /// The key to remove.
        key: String,
    },
}

impl Op {
    /// A put of `value` under `key`.
    pub fn put(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Op::Put {
            key: key.into(),
            value: value.into(),
        }
    }

    /// A delete of `key`.
    pub fn delete(key: impl Into<String>) -> Self {
        Op::Delete { key: key.into() }
    }

    /// The key this op writes.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }
}

/// What a [`LocationStore::batch`] did: everything, or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Every condition held and every op was applied, all at this revision (the new version of
    /// every key that was put). A batch without ops writes nothing and reports the current revision.
    Committed {
        /// The revision of the batch.
        revision: u64,
    },
    /// This condition did not hold; no op was applied. Re-read the key before trying again.
    Conflict {
        /// The key of the first condition that failed.
        key: String,
    },
}

impl BatchOutcome {
    /// What a batch's result says of a conditional write: an error leaves it unknown.
    pub fn answer(result: &Result<BatchOutcome, StoreError>) -> WriteAnswer {
        match result {
            Ok(BatchOutcome::Committed { .. }) => WriteAnswer::Committed,
            Ok(BatchOutcome::Conflict { .. }) => WriteAnswer::Conflict,
            Err(_) => WriteAnswer::NoAnswer,
        }
    }

    /// Whether the batch was refused for `node`'s lease (its [`Condition::Lease`]), not for a
    /// record: nothing was written, and nothing says another writer won.
    pub fn lease_refused(&self, node: &NodeId) -> bool {
        matches!(self, BatchOutcome::Conflict { key } if *key == lease_key(node))
    }
}

/// One page of a [`LocationStore::scan`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    /// Entries in byte order of their keys, all read at one instant.
    pub items: Vec<(String, Versioned)>,
    /// Where to continue: pass it as `after` to read the next page. `None` when the scan is done.
    pub next: Option<String>,
}

/// An owner lease: while it is live, the node is alive in the eyes of the cluster and may act as
/// owner of its units. When it expires, the node is taken for dead and its units may be recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The node holding the lease.
    pub node: NodeId,
    /// Grows by one with every acquisition by the node, so that writes made under an older
    /// lease can be told apart from writes under the current one.
    pub generation: u64,
    /// How long the lease lives after it was acquired or last renewed, without a renewal.
    pub ttl: Duration,
    /// A number the acquiring process chose at random: it tells that process's own lease from one
    /// another process of the same node id took, even after the answer to an acquisition was lost.
    pub holder: u64,
}

/// Why a store call failed. Each message says what the operator or caller should do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached; nothing was done, or the answer was lost with the connection.
    #[error(
        "the location store is unavailable ({reason}); check that the store (redis-server or \
         etcd) is running and reachable from this host, then retry after re-reading any key \
         that was being written"
    )]
    Unavailable {
        /// What the connection reported.
        reason: String,
    },
    /// No answer arrived in time. A write may or may not have been applied: re-read, never guess.
    #[error(
        "the location store did not answer {op} within {after:?}; the outcome is unknown, so \
         re-read before deciding, and check the store's load and the network to it"
    )]
    Timeout {
        /// The operation that timed out.
        op: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// A write was applied on the master, but fewer replicas than asked for confirmed it in time.
    /// It is visible, yet a failover now could lose it: the outcome is unknown, as after a
    /// timeout. Re-read before deciding.
    #[error(
        "the location store applied {op} on its master, but only {confirmed} of the {wanted} \
         replicas asked for confirmed it within {after:?}; a failover could still lose it, so \
         the outcome is unknown: re-read before deciding, and check the replicas (INFO \
         replication on the master)"
    )]
    NotReplicated {
        /// The operation whose write is not confirmed.
        op: &'static str,
        /// How many replicas confirmed it.
        confirmed: u32,
        /// How many were asked for.
        wanted: u32,
        /// How long it waited for them.
        after: Duration,
    },
    /// The lease expired or was superseded by a newer acquisition of the same node.
    #[error(
        "lease generation {generation} of node {node} is lost (expired or superseded); stop acting \
         as owner of this node's units and acquire a new lease"
    )]
    LeaseLost {
        /// The node whose lease was lost.
        node: NodeId,
        /// The generation that was lost.
        generation: u64,
    },
    /// The store is not the one this client connected to: it restarted empty, or lost writes it
    /// had acknowledged (a failover to a replica that had not received them). Nothing was done:
    /// carrying on would let stale versions match and records point back to old owners.
    #[error(
        "the location store lost what it had acknowledged ({reason}); nothing was done and this \
         client does not carry on with it: restore the store from its backup, or restart every \
         node of the cluster so that they start afresh on it (rooms keep running meanwhile, up \
         to the outage limit)"
    )]
    Reset {
        /// What the store holds instead.
        reason: String,
    },
    /// An entry in the store does not have the shape this module writes.
    #[error(
        "store entry {key:?} is corrupt ({reason}); another program may have written under this \
         store's prefix: inspect the entry with redis-cli and delete it or choose another prefix"
    )]
    Corrupt {
        /// The key of the entry, as the store names it.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store answered with an error of its own.
    #[error(
        "the location store refused {op} ({reason}); check the redis-server log and its \
         configuration (memory limit, ACL permissions for EVAL and INFO)"
    )]
    Rejected {
        /// The operation that was refused.
        op: &'static str,
        /// The store's error.
        reason: String,
    },
    /// The store was configured with values it cannot work with.
    #[error("invalid location store configuration: {reason}")]
    InvalidConfig {
        /// What to change.
        reason: String,
    },
}

impl From<CorruptRecord> for StoreError {
    fn from(e: CorruptRecord) -> Self {
        StoreError::Corrupt {
            key: e.key,
            reason: e.reason,
        }
    }
}

/// The location store: the one authority on where every unit lives.
///
/// All methods are cancel-safe in the sense that dropping a future never leaves a partial batch;
/// whether a dropped or timed-out batch was applied is unknown until the key is read again.
pub trait LocationStore: Send + Sync + 'static {
    /// Reads one key; `None` if it does not exist.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>>;

    /// Reads one key, answering only once no failover the store is set to survive can undo what
    /// it read, nor any write applied before the read. A writer that got no answer reads its
    /// record back with this: a plain read could see its write on a server that then fails over
    /// to a replica without it. Stores whose reads are already that durable need not override it.
    fn get_confirmed<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        self.get(key)
    }

    /// Applies `ops` in order if every condition holds, atomically: all or nothing. The ops all
    /// get one new revision. If a condition fails, the outcome names its key and nothing changed.
    fn batch<'a>(
        &'a self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>>;

    /// Applies many conditional batches, each as [`LocationStore::batch`] would on its own, and
    /// answers each in the order given: one item's conflict or error never changes another's
    /// outcome. Items are applied one after another, each judged against what the items applied
    /// before it left (two items with the same condition cannot both commit), in no promised
    /// order. Stores that can carry many batches in one round trip override it; by default the
    /// items are sent concurrently, each as its own batch.
    fn batches<'a>(
        &'a self,
        items: Vec<(Vec<Condition>, Vec<Op>)>,
    ) -> BoxFuture<'a, Vec<Result<BatchOutcome, StoreError>>> {
        let each = items
            .into_iter()
            .map(|(conditions, ops)| self.batch(conditions, ops));
        Box::pin(futures_util::future::join_all(each))
    }

    /// Reads up to `limit` keys that start with `prefix` and sort after `after` (all of them
    /// if `after` is `None`), in byte order, as one consistent snapshot per page. A `limit` of 0 is
    /// taken as 1, so a scan always makes progress; a store may cap very large limits, so read
    /// until `next` is `None` rather than until a page comes back short.
    fn scan<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>>;

    /// Takes a new lease for `node` on behalf of `holder`, with a generation one above any earlier
    /// one of that node. An earlier lease of the node, live or not, is superseded: its renewals
    /// fail from now on.
    fn acquire_lease<'a>(
        &'a self,
        node: &'a NodeId,
        holder: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>>;

    /// Extends a live lease by its `ttl` from now. [`StoreError::LeaseLost`] if it has expired or
    /// was superseded: the holder must then stop acting as owner.
    fn renew_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The node's live lease, if it has one; expired leases are not returned.
    fn lease_of<'a>(&'a self, node: &'a NodeId)
    -> BoxFuture<'a, Result<Option<Lease>, StoreError>>;

    /// Ends a lease before its expiry, so that the cluster need not wait out the TTL after a clean
    /// shutdown. Releasing a lease that is already expired or superseded does nothing.
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>>;
}
