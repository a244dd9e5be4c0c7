//! The store on etcd, the linearizable backend: authority by consensus.
//!
//! It speaks etcd's v3 API as JSON over HTTP/1.1 (the gateway every etcd server serves on its
//! client port), so it needs no gRPC stack. Layout under the configured prefix `P`:
//!
//! - `P/k/<key>`: a value. Its version is etcd's `mod_revision`: store-wide, only growing, never
//!   reused, also after a delete and a re-create.
//! - `P/lease/<node>`: `<generation>:<etcd lease id>:<ttl ms>`, attached to that etcd lease, so it
//!   disappears when the lease expires or is revoked.
//! - `P/lgen/<node>`: the node's last lease generation; kept, so generations never repeat.
//!
//! A batch is one etcd transaction that compares mod revisions (or a create revision of 0, for
//! absence). Many batches (`LocationStore::batches`) go as that many transactions, sent
//! concurrently: one transaction is all or nothing, so joining them would let one batch's
//! conflict fail the others (and a retry one by one would cost a second round trip), etcd refuses
//! a transaction that writes a key twice and caps its operations (`--max-txn-ops`), and its raft
//! log already takes concurrent proposals in one append. Every answer's header names the etcd cluster and its revision: a cluster other than
//! the one connected to (an etcd that restarted empty is a new cluster) or a revision below one
//! already seen fails the call with [`StoreError::Reset`]. Every call is bounded by the
//! configured timeout; a request that may have reached etcd is never sent again, since its
//! outcome is unknown (re-read, never guess). Connections and calls run on the store's own thread
//! (see `io_thread`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};

use super::io_thread::IoThread;
use super::{
    BatchOutcome, BoxFuture, Condition, Lease, LocationStore, Op, Page, StoreError, Versioned,
};
use crate::ids::NodeId;

/// The most keys one scan asks etcd for; a larger `limit` is cut to it.
const MAX_PAGE: usize = 10_000;

/// How many times an acquisition retries its transaction when another acquisition of the same
/// node raced it.
const ACQUIRE_TRIES: usize = 16;

/// How to reach and lay out an [`EtcdStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStoreConfig {
    /// Namespace of every key this store writes, so that several clusters can share one etcd.
    /// Must be non-empty and contain no `/`.
    pub prefix: String,
    /// Upper bound on every call, connecting included.
    pub op_timeout: Duration,
}

impl EtcdStoreConfig {
    /// A configuration with the given prefix and a 2 s timeout.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            op_timeout: Duration::from_secs(2),
        }
    }

    fn validate(&self) -> Result<(), StoreError> {
        if self.prefix.is_empty() || self.prefix.contains('/') {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "store prefix {:?} must be non-empty and contain no '/'",
                    self.prefix
                ),
            });
        }
        if self.op_timeout.is_zero() {
            return Err(StoreError::InvalidConfig {
                reason: "op_timeout must be above zero; 2 s is a good start".to_owned(),
            });
        }
        Ok(())
    }
}

/// The location store on an etcd cluster.
///
/// Clones share one pool of connections. The endpoints are tried in turn: a call goes to the
/// one that answered last, and to the next when it cannot be reached.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<String>,
    /// The endpoint calls go to first.
    current: AtomicUsize,
    /// Idle connections, with the endpoint each is to.
    idle: Mutex<Vec<(usize, SendRequest<Full<Bytes>>)>>,
    op_timeout: Duration,
    /// `P/`.
    base: String,
    /// The etcd cluster connected to.
    cluster: AtomicU64,
    /// The highest revision seen: an etcd below it lost what it had acknowledged.
    seen: AtomicU64,
    /// Where the connections and every call run.
    io: IoThread,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.inner.endpoints)
            .field("prefix", &self.inner.base)
            .field("op_timeout", &self.inner.op_timeout)
            .finish()
    }
}

/// An answer's header: which cluster answered, at which revision.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Header {
    #[serde(deserialize_with = "unum")]
    cluster_id: u64,
    #[serde(deserialize_with = "num")]
    revision: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Kv {
    key: String,
    value: String,
    #[serde(deserialize_with = "num")]
    mod_revision: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RangeAnswer {
    header: Header,
    kvs: Vec<Kv>,
    more: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TxnAnswer {
    header: Header,
    succeeded: bool,
    responses: Vec<TxnResponse>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TxnResponse {
    response_range: Option<RangeAnswer>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LeaseAnswer {
    header: Header,
    #[serde(rename = "ID", deserialize_with = "num")]
    id: i64,
    #[serde(rename = "TTL", deserialize_with = "num")]
    ttl: i64,
    error: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct KeepAliveAnswer {
    result: LeaseAnswer,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HeaderOnly {
    header: Header,
}

/// etcd's JSON writes 64-bit numbers as strings, and leaves out zeros.
fn number<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr + Default,
    T::Err: fmt::Display,
{
    match Value::deserialize(de)? {
        Value::String(text) => text.parse().map_err(serde::de::Error::custom),
        Value::Number(n) => n.to_string().parse().map_err(serde::de::Error::custom),
        Value::Null => Ok(T::default()),
        other => Err(serde::de::Error::custom(format!("not a number: {other}"))),
    }
}

fn num<'de, D: serde::Deserializer<'de>>(de: D) -> Result<i64, D::Error> {
    number(de)
}

fn unum<'de, D: serde::Deserializer<'de>>(de: D) -> Result<u64, D::Error> {
    number(de)
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    B64.encode(bytes)
}

/// The smallest key above every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the keyspace.
    vec![0]
}

/// A revision as a version; etcd's are never negative.
fn version(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

impl EtcdStore {
    /// Connects to the etcd cluster at `endpoints` (each `host:port`, its client URL without
    /// `http://`), and reads which cluster it is.
    ///
    /// Fails with [`StoreError::Unavailable`] or [`StoreError::Timeout`] if no endpoint answers
    /// within `config.op_timeout`, and with [`StoreError::InvalidConfig`] for an empty list or a
    /// bad prefix.
    pub async fn connect(
        endpoints: &[String],
        config: EtcdStoreConfig,
    ) -> Result<Self, StoreError> {
        config.validate()?;
        if endpoints.is_empty() {
            return Err(StoreError::InvalidConfig {
                reason: "no etcd endpoint given; name one as etcd://host:port".to_owned(),
            });
        }
        let store = EtcdStore {
            inner: Arc::new(Inner {
                endpoints: endpoints.to_vec(),
                current: AtomicUsize::new(0),
                idle: Mutex::new(Vec::new()),
                op_timeout: config.op_timeout,
                base: format!("{}/", config.prefix),
                cluster: AtomicU64::new(0),
                seen: AtomicU64::new(0),
                io: IoThread::start("ferry-etcd")?,
            }),
        };
        // Any read names the cluster; the first one is kept to tell it from another later.
        let first: RangeAnswer = store
            .call(
                "connect",
                "/v3/kv/range",
                json!({ "key": b64(store.entry("")) }),
            )
            .await?;
        store
            .inner
            .cluster
            .store(first.header.cluster_id, Ordering::Release);
        Ok(store)
    }

    fn entry(&self, key: &str) -> String {
        format!("{}k/{key}", self.inner.base)
    }

    fn lease_key(&self, node: &NodeId) -> String {
        format!("{}lease/{node}", self.inner.base)
    }

    fn generation_key(&self, node: &NodeId) -> String {
        format!("{}lgen/{node}", self.inner.base)
    }

    /// Posts one request under the store's timeout, on the store's thread, and decodes its answer.
    async fn call<T: for<'de> Deserialize<'de> + Send + 'static>(
        &self,
        op: &'static str,
        path: &str,
        body: Value,
    ) -> Result<T, StoreError> {
        let (this, path) = (self.clone(), path.to_owned());
        self.inner
            .io
            .run(op, async move { this.call_here(op, &path, body).await })
            .await
    }

    async fn call_here<T: for<'de> Deserialize<'de>>(
        &self,
        op: &'static str,
        path: &str,
        body: Value,
    ) -> Result<T, StoreError> {
        let after = self.inner.op_timeout;
        // Only what was seen before this request left can be held against its answer: a
        // request that overlapped a write may be answered from just before it.
        let floor = self.inner.seen.load(Ordering::Acquire);
        let raw = match tokio::time::timeout(after, self.post(op, path, body)).await {
            Ok(raw) => raw?,
            Err(_elapsed) => return Err(StoreError::Timeout { op, after }),
        };
        let header: HeaderOnly =
            serde_json::from_slice(&raw).map_err(|e| malformed(op, &e.to_string()))?;
        self.check(&header.header, floor)?;
        serde_json::from_slice(&raw).map_err(|e| malformed(op, &e.to_string()))
    }

    /// Refuses an answer from another cluster, or from one below a revision seen before the
    /// request was sent. An answer without a header (a lease keep-alive's is inside it) passes.
    fn check(&self, header: &Header, floor: u64) -> Result<(), StoreError> {
        if header.cluster_id == 0 {
            return Ok(());
        }
        let cluster = self.inner.cluster.load(Ordering::Acquire);
        let answered = header.cluster_id;
        if cluster != 0 && answered != cluster {
            return Err(StoreError::Reset {
                reason: format!("etcd cluster {answered:x} answered, not {cluster:x}"),
            });
        }
        let revision = version(header.revision);
        if revision < floor {
            return Err(StoreError::Reset {
                reason: format!(
                    "etcd is at revision {revision}, below revision {floor} it acknowledged"
                ),
            });
        }
        self.inner.seen.fetch_max(revision, Ordering::AcqRel);
        Ok(())
    }

    /// Sends a POST to the endpoint that answered last, or the next ones if it cannot be
    /// reached; a request that may have been delivered is not sent again.
    async fn post(&self, op: &'static str, path: &str, body: Value) -> Result<Bytes, StoreError> {
        let body = Bytes::from(body.to_string());
        let count = self.inner.endpoints.len();
        let first = self.inner.current.load(Ordering::Acquire);
        let mut last_error = String::new();
        for step in 0..count {
            let at = (first + step) % count;
            let mut sender = match self.connection(at).await {
                Ok(sender) => sender,
                Err(error) => {
                    last_error = format!("{}: {error}", self.inner.endpoints[at]);
                    continue;
                }
            };
            self.inner.current.store(at, Ordering::Release);
            let request = hyper::Request::post(path)
                .header(hyper::header::HOST, &self.inner.endpoints[at])
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(body.clone()))
                .map_err(|e| malformed(op, &e.to_string()))?;
            // The request may have arrived: its outcome is unknown, so it is not sent again;
            // the next call starts at the next endpoint.
            let unknown = |e: &dyn fmt::Display| {
                self.inner
                    .current
                    .store((at + 1) % count, Ordering::Release);
                StoreError::Unavailable {
                    reason: format!("{op}: {}: {e}", self.inner.endpoints[at]),
                }
            };
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| unknown(&e))?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| unknown(&e))?
                .to_bytes();
            self.inner.idle.lock().push((at, sender));
            if !status.is_success() {
                return Err(refused(op, status, &bytes));
            }
            return Ok(bytes);
        }
        Err(StoreError::Unavailable {
            reason: format!("{op}: no etcd endpoint could be reached ({last_error})"),
        })
    }

    /// An idle connection to endpoint `at`, or a new one.
    async fn connection(&self, at: usize) -> Result<SendRequest<Full<Bytes>>, String> {
        loop {
            let found = {
                let mut idle = self.inner.idle.lock();
                idle.iter()
                    .position(|(endpoint, _)| *endpoint == at)
                    .map(|i| idle.swap_remove(i).1)
            };
            match found {
                Some(mut sender) if !sender.is_closed() => {
                    if sender.ready().await.is_ok() {
                        return Ok(sender);
                    }
                }
                Some(_) => {}
                None => break,
            }
        }
        let stream = tokio::net::TcpStream::connect(&self.inner.endpoints[at])
            .await
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    async fn range(&self, op: &'static str, key: &str) -> Result<Option<Kv>, StoreError> {
        let answer: RangeAnswer = self
            .call(op, "/v3/kv/range", json!({ "key": b64(key) }))
            .await?;
        Ok(answer.kvs.into_iter().next())
    }

    async fn get_inner(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let full = self.entry(key);
        match self.range("get", &full).await? {
            Some(kv) => Ok(Some(Versioned {
                value: decode(&full, &kv.value)?,
                version: version(kv.mod_revision),
            })),
            None => Ok(None),
        }
    }

    async fn batch_inner(
        &self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> Result<BatchOutcome, StoreError> {
        let compare: Vec<Value> = conditions
            .iter()
            .flat_map(|condition| match condition {
                Condition::Absent(key) => vec![json!({
                    "key": b64(self.entry(key)), "result": "EQUAL", "target": "CREATE",
                    "create_revision": "0"
                })],
                Condition::Version(key, at) => vec![json!({
                    "key": b64(self.entry(key)), "result": "EQUAL", "target": "MOD",
                    "mod_revision": at.to_string()
                })],
                // No later acquisition, and the lease not run out (its key goes with it).
                Condition::Lease {
                    node, generation, ..
                } => vec![
                    json!({
                        "key": b64(self.generation_key(node)), "result": "EQUAL",
                        "target": "VALUE", "value": b64(generation.to_string())
                    }),
                    json!({
                        "key": b64(self.lease_key(node)), "result": "GREATER",
                        "target": "CREATE", "create_revision": "0"
                    }),
                ],
            })
            .collect();
        let success: Vec<Value> = ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value } => json!({
                    "request_put": { "key": b64(self.entry(key)), "value": b64(value) }
                }),
                Op::Delete { key } => json!({
                    "request_delete_range": { "key": b64(self.entry(key)) }
                }),
            })
            .collect();
        // On failure, read every condition's key, to name the one that failed.
        let failure: Vec<Value> = conditions
            .iter()
            .map(|c| {
                let key = match c {
                    Condition::Lease { node, .. } => self.lease_key(node),
                    _ => self.entry(c.key()),
                };
                json!({ "request_range": { "key": b64(key) } })
            })
            .collect();
        let answer: TxnAnswer = self
            .call(
                "batch",
                "/v3/kv/txn",
                json!({ "compare": compare, "success": success, "failure": failure }),
            )
            .await?;
        if answer.succeeded || conditions.is_empty() {
            return Ok(BatchOutcome::Committed {
                revision: version(answer.header.revision),
            });
        }
        let failed = conditions
            .iter()
            .zip(&answer.responses)
            .find(|(condition, read)| {
                let found = read.response_range.as_ref().and_then(|r| r.kvs.first());
                match condition {
                    Condition::Absent(_) => found.is_some(),
                    Condition::Version(_, at) => {
                        found.is_none_or(|kv| version(kv.mod_revision) != *at)
                    }
                    Condition::Lease {
                        key, generation, ..
                    } => found.is_none_or(|kv| {
                        let raw = decode(key, &kv.value).unwrap_or_default();
                        let text = String::from_utf8_lossy(&raw);
                        text.split(':').next() != Some(generation.to_string().as_str())
                    }),
                }
            });
        let key = failed.map_or_else(
            || conditions[0].key().to_owned(),
            |(condition, _)| condition.key().to_owned(),
        );
        Ok(BatchOutcome::Conflict { key })
    }

    async fn scan_inner(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let start = match after {
            // Just above `after`: keys are UTF-8, so none holds a 0 byte between two others.
            Some(after) if after >= prefix => format!("{}\0", self.entry(after)),
            _ => self.entry(prefix),
        };
        let end = prefix_end(self.entry(prefix).as_bytes());
        let answer: RangeAnswer = self
            .call(
                "scan",
                "/v3/kv/range",
                json!({ "key": b64(start), "range_end": b64(end), "limit": limit.to_string() }),
            )
            .await?;
        let strip = self.entry("");
        let mut items = Vec::with_capacity(answer.kvs.len());
        for kv in answer.kvs {
            let full = B64
                .decode(&kv.key)
                .ok()
                .and_then(|raw| String::from_utf8(raw).ok())
                .ok_or_else(|| malformed("scan", "a key that is not base64 of UTF-8"))?;
            let Some(key) = full.strip_prefix(&strip) else {
                return Err(malformed("scan", "a key outside the range asked for"));
            };
            items.push((
                key.to_owned(),
                Versioned {
                    value: decode(&full, &kv.value)?,
                    version: version(kv.mod_revision),
                },
            ));
        }
        let next = if answer.more {
            items.last().map(|(key, _)| key.clone())
        } else {
            None
        };
        Ok(Page { items, next })
    }

    /// The node's live lease, with the id of the etcd lease that keeps it.
    async fn lease_record(&self, node: &NodeId) -> Result<Option<(Lease, i64)>, StoreError> {
        let key = self.lease_key(node);
        let Some(kv) = self.range("lease_of", &key).await? else {
            return Ok(None);
        };
        let raw = decode(&key, &kv.value)?;
        let text = String::from_utf8_lossy(&raw);
        let mut parts = text.split(':');
        let parsed = (|| {
            let generation = parts.next()?.parse().ok()?;
            let id = parts.next()?.parse().ok()?;
            let ttl = parts.next()?.parse().ok()?;
            let holder = parts.next()?.parse().ok()?;
            let lease = Lease {
                node: node.clone(),
                generation,
                ttl: Duration::from_millis(ttl),
                holder,
            };
            parts.next().is_none().then_some((lease, id))
        })();
        parsed.map(Some).ok_or_else(|| StoreError::Corrupt {
            key,
            reason: format!("lease {text:?} is not <generation>:<lease id>:<ttl ms>:<holder>"),
        })
    }

    async fn acquire_inner(
        &self,
        node: &NodeId,
        holder: u64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let granted: LeaseAnswer = self
            .call(
                "acquire_lease",
                "/v3/lease/grant",
                json!({ "TTL": seconds.max(1).to_string() }),
            )
            .await?;
        if granted.id == 0 {
            return Err(StoreError::Rejected {
                op: "acquire_lease",
                reason: format!("etcd granted no lease ({})", granted.error),
            });
        }
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let generation_key = self.generation_key(node);
        for _ in 0..ACQUIRE_TRIES {
            let current = self.range("acquire_lease", &generation_key).await?;
            let (last, guard) = match &current {
                Some(kv) => {
                    let raw = decode(&generation_key, &kv.value)?;
                    let last: u64 =
                        String::from_utf8_lossy(&raw)
                            .parse()
                            .map_err(|_| StoreError::Corrupt {
                                key: generation_key.clone(),
                                reason: "the lease generation is not a number".to_owned(),
                            })?;
                    let guard = json!({
                        "key": b64(&generation_key), "result": "EQUAL", "target": "MOD",
                        "mod_revision": kv.mod_revision.to_string()
                    });
                    (last, guard)
                }
                None => (
                    0,
                    json!({
                        "key": b64(&generation_key), "result": "EQUAL", "target": "CREATE",
                        "create_revision": "0"
                    }),
                ),
            };
            let generation = last + 1;
            let record = format!("{generation}:{}:{millis}:{holder}", granted.id);
            let answer: TxnAnswer = self
                .call(
                    "acquire_lease",
                    "/v3/kv/txn",
                    json!({
                        "compare": [guard],
                        "success": [
                            { "request_put": { "key": b64(&generation_key), "value": b64(generation.to_string()) } },
                            { "request_put": {
                                "key": b64(self.lease_key(node)), "value": b64(record),
                                "lease": granted.id.to_string()
                            } }
                        ]
                    }),
                )
                .await?;
            if answer.succeeded {
                return Ok(Lease {
                    node: node.clone(),
                    generation,
                    ttl,
                    holder,
                });
            }
        }
        Err(StoreError::Rejected {
            op: "acquire_lease",
            reason: format!("{ACQUIRE_TRIES} acquisitions of node {node}'s lease raced this one"),
        })
    }

    async fn renew_inner(&self, lease: &Lease) -> Result<(), StoreError> {
        let lost = || StoreError::LeaseLost {
            node: lease.node.clone(),
            generation: lease.generation,
        };
        let Some((current, id)) = self.lease_record(&lease.node).await? else {
            return Err(lost());
        };
        if current.generation != lease.generation {
            return Err(lost());
        }
        let kept: KeepAliveAnswer = self
            .call(
                "renew_lease",
                "/v3/lease/keepalive",
                json!({ "ID": id.to_string() }),
            )
            .await?;
        if kept.result.ttl > 0 {
            Ok(())
        } else {
            Err(lost())
        }
    }

    async fn lease_of_inner(&self, node: &NodeId) -> Result<Option<Lease>, StoreError> {
        Ok(self.lease_record(node).await?.map(|(lease, _)| lease))
    }

    async fn release_inner(&self, lease: &Lease) -> Result<(), StoreError> {
        let Some((current, id)) = self.lease_record(&lease.node).await? else {
            return Ok(());
        };
        if current.generation != lease.generation {
            return Ok(());
        }
        match self
            .call::<HeaderOnly>(
                "release_lease",
                "/v3/lease/revoke",
                json!({ "ID": id.to_string() }),
            )
            .await
        {
            // A lease that expired meanwhile is released all the same.
            Err(StoreError::Rejected { reason, .. }) if reason.contains("not found") => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

fn decode(key: &str, value: &str) -> Result<Bytes, StoreError> {
    B64.decode(value)
        .map(Bytes::from)
        .map_err(|e| StoreError::Corrupt {
            key: key.to_owned(),
            reason: format!("its value is not base64 ({e})"),
        })
}

fn malformed(op: &'static str, what: &str) -> StoreError {
    StoreError::Rejected {
        op,
        reason: format!("etcd's answer could not be read: {what}"),
    }
}

/// An error answer: etcd's message, and whether it means etcd cannot serve now (no leader, a
/// member cut off) rather than a refusal.
fn refused(op: &'static str, status: hyper::StatusCode, body: &[u8]) -> StoreError {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Failure {
        #[serde(deserialize_with = "num")]
        code: i64,
        message: String,
        error: String,
    }
    let failure: Failure = serde_json::from_slice(body).unwrap_or_default();
    let message = if failure.message.is_empty() {
        failure.error
    } else {
        failure.message
    };
    // gRPC codes: 14 unavailable, 4 deadline exceeded.
    if matches!(failure.code, 4 | 14) || status.is_server_error() && failure.code == 0 {
        StoreError::Unavailable {
            reason: format!("{op}: etcd cannot serve now ({message})"),
        }
    } else {
        StoreError::Rejected {
            op,
            reason: format!("etcd answered {status}: {message}"),
        }
    }
}

impl LocationStore for EtcdStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(self.get_inner(key))
    }

    fn batch<'a>(
        &'a self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>> {
        Box::pin(self.batch_inner(conditions, ops))
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>> {
        Box::pin(self.scan_inner(prefix, after, limit))
    }

    fn acquire_lease<'a>(
        &'a self,
        node: &'a NodeId,
        holder: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(self.acquire_inner(node, holder, ttl))
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.renew_inner(lease))
    }

    fn lease_of<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> BoxFuture<'a, Result<Option<Lease>, StoreError>> {
        Box::pin(self.lease_of_inner(node))
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.release_inner(lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_prefix_is_just_above_every_key_in_it() {
        assert_eq!(prefix_end(b"a/k/"), b"a/k0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn numbers_come_as_strings_or_not_at_all() {
        let read: HeaderOnly = serde_json::from_str(
            r#"{"header":{"cluster_id":"15118495548433857066","revision":"7"}}"#,
        )
        .expect("header");
        assert_eq!(read.header.cluster_id, 15_118_495_548_433_857_066);
        assert_eq!(read.header.revision, 7);
        let answer: LeaseAnswer = serde_json::from_str(r#"{"ID":"12","TTL":"5"}"#).expect("lease");
        assert_eq!((answer.id, answer.ttl), (12, 5));
        let expired: LeaseAnswer = serde_json::from_str(r#"{"ID":"12"}"#).expect("lease");
        assert_eq!(expired.ttl, 0);
    }
}
