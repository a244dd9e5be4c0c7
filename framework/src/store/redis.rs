//! The store on a redis-server, for clusters of processes and machines.
//!
//! Layout under the configured prefix `P` (in braces, so that every key of one store hashes to
//! one slot and two prefixes can never overlap):
//!
//! - `{P}:epoch`: the store's epoch, a random value the first client writes. A redis that
//!   restarted empty (or a replica that took over without it) no longer holds the epoch a client
//!   connected with: every call then fails with [`StoreError::Reset`] instead of carrying on with a
//!   store that forgot what it acknowledged.
//! - `{P}:rev`: the revision counter; every committed batch takes the next value. Each client
//!   remembers the highest revision it saw, and a store whose counter is below it lost writes:
//!   that is [`StoreError::Reset`] too, so a conditional write never matches a reused version.
//! - `{P}:idx`: a sorted set of every live key (all scores 0), so scans read in byte order.
//! - `{P}:k:<key>`: a hash with the value (`v`) and the revision that wrote it (`r`).
//! - `{P}:lease:<node>`: `<generation>:<ttl ms>`, expiring with the lease (redis PX TTL).
//! - `{P}:lgen:<node>`: the node's last lease generation; kept, so generations never repeat.
//!
//! Every call runs as one Lua script that first checks the epoch and the revision, so redis
//! checks, applies or reads it as one step. Every call is bounded by the configured timeout. The
//! connection runs on the store's own thread (see `io_thread`), and calls are sent to it from the
//! caller's task.
//!
//! Behind sentinels, or with a replica acknowledgement asked for ([`WaitReplicas`]), every script
//! first checks that its server is master (a demoted master, still reached over an old connection,
//! refuses instead of serving what it has) and, with `WAIT`, that enough replicas follow it
//! online. A write is then confirmed with `WAIT` on the same connection; a write that too few
//! replicas confirmed is [`StoreError::NotReplicated`], an outcome that is not known.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{ErrorKind, Script, ScriptInvocation, ServerErrorKind};
use bytes::Bytes;

use super::io_thread::IoThread;
use super::redis_call::{bounded, classify};
use super::redis_link::{Leased, Link, SentinelTarget};
use super::{
    BatchOutcome, BoxFuture, Condition, Lease, LocationStore, Op, Page, StoreError, Versioned,
};
use crate::ids::NodeId;

/// Opens every script: the store must hold the client's epoch, and a revision no lower than the
/// client has seen. KEYS[1], KEYS[2]: epoch, rev. ARGV[1], ARGV[2]: epoch, lowest revision.
const GUARD_LUA: &str = r#"
local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] then
  return redis.error_reply('FERRYRESET the store holds epoch ' .. tostring(held) .. ', not ' .. ARGV[1])
end
local at = tonumber(redis.call('GET', KEYS[2]) or '0')
if at < tonumber(ARGV[2]) then
  return redis.error_reply('FERRYRESET the store is at revision ' .. at .. ', below revision ' .. ARGV[2] .. ' it acknowledged')
end
"#;

/// Opens every script when the server must be master with `{replicas}` replicas online: a
/// demoted master answers reads from data a failover left behind, and a master without its
/// replicas acknowledges what a failover could lose. No KEYS, no ARGV.
const MASTER_LUA: &str = r#"
local replication = redis.call('INFO', 'replication')
if not string.find(replication, 'role:master', 1, true) then
  return redis.error_reply('FERRYNOTMASTER the server is a replica now')
end
local online = 0
for _ in string.gmatch(replication, 'state=online') do online = online + 1 end
if online < {replicas} then
  return redis.error_reply('FERRYFEW ' .. online .. ' of the {replicas} replicas required are online')
end
"#;

/// KEYS: epoch. ARGV: a fresh epoch. Writes it if the store has none; returns the store's.
const EPOCH_LUA: &str = r#"
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"#;

/// Checks every condition, then takes one revision and applies every op with it.
///
/// KEYS: epoch, rev, idx, one per condition, one per op.
/// ARGV: epoch, lowest revision, condition count, op count, then per condition (kind `a`|`v`,
/// version), then per op (kind `p`|`d`, key as indexed, value or empty).
/// Returns {1, revision} or {0, index of the failed condition, from 1}.
const BATCH_LUA: &str = r#"
local ncond = tonumber(ARGV[3])
local nops = tonumber(ARGV[4])
local a = 5
for i = 1, ncond do
  if ARGV[a] == 'l' then
    local lease = redis.call('GET', KEYS[3 + i])
    if not lease or string.match(lease, '^(%d+):') ~= ARGV[a + 1] then return {0, i} end
  else
    local current = redis.call('HGET', KEYS[3 + i], 'r')
    if ARGV[a] == 'a' then
      if current then return {0, i} end
    elseif current ~= ARGV[a + 1] then
      return {0, i}
    end
  end
  a = a + 2
end
if nops == 0 then
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
local rev = redis.call('INCR', KEYS[2])
local srev = string.format('%d', rev)
for j = 1, nops do
  local key = KEYS[3 + ncond + j]
  if ARGV[a] == 'p' then
    redis.call('DEL', key)
    redis.call('HSET', key, 'v', ARGV[a + 2], 'r', srev)
    redis.call('ZADD', KEYS[3], 0, ARGV[a + 1])
  else
    redis.call('DEL', key)
    redis.call('ZREM', KEYS[3], ARGV[a + 1])
  end
  a = a + 3
end
return {1, rev}
"#;

/// Reads one page of the index and the entries it names, in one step.
///
/// KEYS: epoch, rev, idx. ARGV: epoch, lowest revision, range start, range end, count, entry key
/// prefix. Returns a flat array: key, value, revision, key, value, revision, ...
const SCAN_LUA: &str = r#"
local names = redis.call('ZRANGEBYLEX', KEYS[3], ARGV[3], ARGV[4], 'LIMIT', 0, ARGV[5])
local out = {}
for _, name in ipairs(names) do
  local entry = redis.call('HMGET', ARGV[6] .. name, 'v', 'r')
  out[#out + 1] = name
  out[#out + 1] = entry[1]
  out[#out + 1] = entry[2]
end
return out
"#;

/// KEYS: epoch, rev, entry. ARGV: epoch, lowest revision. Returns {value, revision}.
const GET_LUA: &str = r#"
return redis.call('HMGET', KEYS[3], 'v', 'r')
"#;

/// KEYS: epoch, rev, lease, generation counter. ARGV: epoch, lowest revision, ttl ms, holder.
/// Returns the new generation. A lease reads `<generation>:<ttl ms>:<holder>`.
const ACQUIRE_LUA: &str = r#"
local g = string.format('%d', redis.call('INCR', KEYS[4]))
redis.call('SET', KEYS[3], g .. ':' .. ARGV[3] .. ':' .. ARGV[4], 'PX', ARGV[3])
return tonumber(g)
"#;

/// KEYS: epoch, rev, lease. ARGV: epoch, lowest revision, generation, ttl ms, holder. Returns 1
/// if renewed, 0 if expired or superseded.
const RENEW_LUA: &str = r#"
local current = redis.call('GET', KEYS[3])
if not current or string.match(current, '^(%d+):') ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[3], ARGV[3] .. ':' .. ARGV[4] .. ':' .. ARGV[5], 'PX', ARGV[4])
return 1
"#;

/// KEYS: epoch, rev, lease. ARGV: epoch, lowest revision. Returns the lease or nil.
const LEASE_OF_LUA: &str = r#"
return redis.call('GET', KEYS[3])
"#;

/// KEYS: epoch, rev, lease. ARGV: epoch, lowest revision, generation. Deletes the lease only if
/// it is still this generation.
const RELEASE_LUA: &str = r#"
local current = redis.call('GET', KEYS[3])
if current and string.match(current, '^(%d+):') == ARGV[3] then
  redis.call('DEL', KEYS[3])
  return 1
end
return 0
"#;

/// The most entries one scan script reads; a larger `limit` is cut to it, so one page cannot
/// hold redis busy for long (the caller continues with `next` as usual).
const MAX_PAGE: usize = 100_000;

/// The longest lease redis is asked to keep: far beyond any sensible TTL, and far from the
/// overflow of redis's expiry arithmetic.
const MAX_TTL_MILLIS: u64 = 1 << 46;

/// How many replicas must confirm every write, and how long to wait for them (`WAIT`).
///
/// With it, every call also needs its server to be master with that many replicas online, or it
/// is refused ([`StoreError::Unavailable`], nothing done); a write the replicas did not confirm in
/// time is [`StoreError::NotReplicated`]. Set `replicas` to the number of replicas the master has:
/// a failover then promotes a replica that holds every confirmed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    /// Replicas that must confirm each write; at least 1.
    pub replicas: u32,
    /// How long a write waits for them; below the store's `op_timeout`.
    pub timeout: Duration,
}

impl WaitReplicas {
    /// The default wait of 500 ms: replicas on a healthy network confirm within milliseconds,
    /// and it leaves most of the default 2 s call timeout for the call itself.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
}

/// How to reach and lay out a [`RedisStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreConfig {
    /// Namespace of every key this store writes, so that several clusters (or test runs) can
    /// share one redis-server. Must be non-empty and contain no `{` or `}`.
    pub prefix: String,
    /// Upper bound on every call, connecting included: a redis-server that stops answering turns
    /// into [`StoreError::Timeout`] or [`StoreError::Unavailable`] after this long, never a hang.
    pub op_timeout: Duration,
    /// Replicas that must confirm every write; `None` confirms none (a failover may then lose
    /// the last writes, which the revision floor then reports as [`StoreError::Reset`]).
    pub wait: Option<WaitReplicas>,
}

impl RedisStoreConfig {
    /// The default timeout of 2 s: far above a healthy round trip, short enough for a node to
    /// notice a lost store well within a lease TTL.
    pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(2);

    /// A configuration with the given prefix and the default timeout.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            op_timeout: Self::DEFAULT_OP_TIMEOUT,
            wait: None,
        }
    }

    fn validate(&self) -> Result<(), StoreError> {
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "store prefix {:?} must be non-empty and contain no '{{' or '}}'",
                    self.prefix
                ),
            });
        }
        if self.op_timeout.is_zero() {
            return Err(StoreError::InvalidConfig {
                reason: "op_timeout must be above zero; 2 s is a good start".to_owned(),
            });
        }
        if let Some(wait) = self.wait {
            if wait.replicas == 0 {
                return Err(StoreError::InvalidConfig {
                    reason: "wait_replicas must be at least 1 (or leave it out)".to_owned(),
                });
            }
            if wait.timeout.is_zero() || wait.timeout >= self.op_timeout {
                return Err(StoreError::InvalidConfig {
                    reason: format!(
                        "wait_timeout_ms must be above 0 and below the store's timeout of {:?}, \
                         which bounds the write and its wait together; {:?} is a good start",
                        self.op_timeout,
                        WaitReplicas::DEFAULT_TIMEOUT
                    ),
                });
            }
        }
        Ok(())
    }
}

impl Default for RedisStoreConfig {
    fn default() -> Self {
        Self::new("ferry")
    }
}

/// The location store on a redis-server, or on the master a set of sentinels names.
///
/// Clones share one connection; a call that finds it broken fails, and the next call connects
/// again (behind sentinels, to the master they name then). Calls made while no server answers
/// fail with [`StoreError::Unavailable`] or [`StoreError::Timeout`].
#[derive(Clone)]
pub struct RedisStore {
    link: Arc<Link>,
    op_timeout: Duration,
    wait: Option<WaitReplicas>,
    keys: Arc<KeySpace>,
    scripts: Arc<Scripts>,
    /// The epoch the store held when this client connected.
    epoch: Arc<str>,
    /// The highest revision this client saw: a store below it lost acknowledged writes.
    seen: Arc<AtomicU64>,
    /// Where the connection and every call run.
    io: IoThread,
}

struct Scripts {
    batch: Script,
    scan: Script,
    get: Script,
    acquire: Script,
    renew: Script,
    lease_of: Script,
    release: Script,
}

impl Scripts {
    /// The scripts, each opened by `master` (empty, or [`MASTER_LUA`]) and the guard.
    fn new(master: &str) -> Self {
        let guarded = |body: &str| Script::new(&format!("{master}{GUARD_LUA}{body}"));
        Scripts {
            batch: guarded(BATCH_LUA),
            scan: guarded(SCAN_LUA),
            get: guarded(GET_LUA),
            acquire: guarded(ACQUIRE_LUA),
            renew: guarded(RENEW_LUA),
            lease_of: guarded(LEASE_OF_LUA),
            release: guarded(RELEASE_LUA),
        }
    }
}

/// Names of the redis keys of one store.
struct KeySpace {
    prefix: String,
    base: String,
    epoch: String,
    rev: String,
    idx: String,
    entry: String,
    /// Written by a confirmed read, so that `WAIT` covers everything the server applied before it.
    sync: String,
}

impl KeySpace {
    fn new(prefix: &str) -> Self {
        let base = format!("{{{prefix}}}:");
        Self {
            prefix: prefix.to_owned(),
            epoch: format!("{base}epoch"),
            rev: format!("{base}rev"),
            idx: format!("{base}idx"),
            entry: format!("{base}k:"),
            sync: format!("{base}sync"),
            base,
        }
    }

    fn entry(&self, key: &str) -> String {
        format!("{}{key}", self.entry)
    }

    fn lease(&self, node: &NodeId) -> String {
        format!("{}lease:{node}", self.base)
    }

    fn generation(&self, node: &NodeId) -> String {
        format!("{}lgen:{node}", self.base)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix)
            .field("epoch", &self.epoch)
            .field("op_timeout", &self.op_timeout)
            .finish()
    }
}

impl RedisStore {
    /// Connects to the redis-server at `url` (for example `redis://127.0.0.1:6379/`).
    ///
    /// Fails with [`StoreError::Unavailable`] or [`StoreError::Timeout`] if the server cannot be
    /// reached within `config.op_timeout`, and with [`StoreError::InvalidConfig`] for a malformed
    /// url or prefix.
    pub async fn connect(url: &str, config: RedisStoreConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let link = Link::server(url, config.op_timeout)?;
        Self::start(link, config).await
    }

    /// Connects to the master that the sentinels of `target` name (`SENTINEL
    /// get-master-addr-by-name`), once that server confirms it is master. When a call finds the
    /// connection lost or the server demoted, the next call asks the sentinels again, so the
    /// store follows a failover.
    pub async fn connect_sentinel(
        target: &SentinelTarget,
        config: RedisStoreConfig,
    ) -> Result<Self, StoreError> {
        config.validate()?;
        let link = Link::sentinels(target, config.op_timeout)?;
        Self::start(link, config).await
    }

    /// Starts the store's thread on `link`, connects, and reads (or writes) the store's epoch.
    async fn start(link: Link, config: RedisStoreConfig) -> Result<Self, StoreError> {
        let master = match (config.wait, link.follows_sentinels()) {
            (Some(wait), _) => MASTER_LUA.replace("{replicas}", &wait.replicas.to_string()),
            (None, true) => MASTER_LUA.replace("{replicas}", "0"),
            (None, false) => String::new(),
        };
        let mut store = Self {
            link: Arc::new(link),
            op_timeout: config.op_timeout,
            wait: config.wait,
            keys: Arc::new(KeySpace::new(&config.prefix)),
            scripts: Arc::new(Scripts::new(&master)),
            epoch: Arc::from(""),
            seen: Arc::new(AtomicU64::new(0)),
            io: IoThread::start("ferry-redis")?,
        };
        let epoch_script = Script::new(&format!("{master}{EPOCH_LUA}"));
        let epoch = store
            .on_io("connect", move |s, mut conn| async move {
                let fresh = format!("{:032x}", rand::random::<u128>());
                let epoch: String = bounded(
                    "connect",
                    s.op_timeout,
                    epoch_script
                        .key(&s.keys.epoch)
                        .arg(fresh)
                        .invoke_async(&mut conn),
                )
                .await?;
                s.replicated("connect", &mut conn).await?;
                Ok(epoch)
            })
            .await?;
        store.epoch = Arc::from(epoch);
        Ok(store)
    }

    /// Runs a call on the link's connection, within the store's timeout. A call that finds the
    /// server gone, demoted or short of replicas drops the connection, so that the next call
    /// connects again.
    fn on_io<'a, T, Fut>(
        &'a self,
        op: &'static str,
        call: impl FnOnce(RedisStore, MultiplexedConnection) -> Fut + Send + 'static,
    ) -> BoxFuture<'a, Result<T, StoreError>>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.on_io_judged(op, call, |answer| {
            answer.as_ref().err().is_some_and(loses_link)
        })
    }

    /// [`RedisStore::on_io`] for a call whose answer may hold errors of its own (one per batch of
    /// a pipeline): `lost` says whether the answer found the connection unfit.
    ///
    /// The connection's own task always runs on the store's thread, since a connection is only
    /// ever made there. With one up, the call is sent right from the caller's task: the
    /// connection's task writes and reads for it, so a held runtime thread holds no answer, and
    /// the call is spared a hop to the store's thread and back (a drain makes two calls a move).
    fn on_io_judged<'a, T, Fut>(
        &'a self,
        op: &'static str,
        call: impl FnOnce(RedisStore, MultiplexedConnection) -> Fut + Send + 'static,
        lost: impl FnOnce(&Result<T, StoreError>) -> bool + Send + 'static,
    ) -> BoxFuture<'a, Result<T, StoreError>>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let store = self.clone();
        Box::pin(async move {
            let after = store.op_timeout;
            let deadline = tokio::time::Instant::now() + after;
            if let Some(leased) = store.link.in_use() {
                return store.call_on(op, leased, deadline, call, lost).await;
            }
            let io = store.io.clone();
            io.run(op, async move {
                let leased = match tokio::time::timeout_at(deadline, store.link.connection()).await
                {
                    Ok(leased) => leased?,
                    Err(_elapsed) => return Err(StoreError::Timeout { op, after }),
                };
                store.call_on(op, leased, deadline, call, lost).await
            })
            .await
        })
    }

    /// Runs `call` on `leased` by `deadline`, and drops the connection if `lost` judges it unfit.
    async fn call_on<T, Fut>(
        self,
        op: &'static str,
        leased: Leased,
        deadline: tokio::time::Instant,
        call: impl FnOnce(RedisStore, MultiplexedConnection) -> Fut,
        lost: impl FnOnce(&Result<T, StoreError>) -> bool,
    ) -> Result<T, StoreError>
    where
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let link = self.link.clone();
        let after = self.op_timeout;
        let answer = match tokio::time::timeout_at(deadline, call(self, leased.conn.clone())).await
        {
            Ok(answer) => answer,
            Err(_elapsed) => Err(StoreError::Timeout { op, after }),
        };
        if lost(&answer) {
            link.lost(&leased);
        }
        answer
    }

    /// After a write on `conn`: `WAIT` until the replicas asked for confirmed it (every write of
    /// this connection so far, in fact), or [`StoreError::NotReplicated`]. Without a wait
    /// configured, nothing.
    async fn replicated(
        &self,
        op: &'static str,
        conn: &mut MultiplexedConnection,
    ) -> Result<(), StoreError> {
        let Some(wait) = self.wait else {
            return Ok(());
        };
        let millis = u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX);
        let confirmed: u32 = bounded(
            op,
            self.op_timeout,
            ::redis::cmd("WAIT")
                .arg(wait.replicas)
                .arg(millis)
                .query_async(conn),
        )
        .await?;
        if confirmed >= wait.replicas {
            Ok(())
        } else {
            Err(StoreError::NotReplicated {
                op,
                confirmed,
                wanted: wait.replicas,
                after: wait.timeout,
            })
        }
    }

    /// The store's epoch as this client found it when it connected.
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// An invocation of a guarded script, with the guard's keys and arguments in place.
    fn guarded<'s>(&self, script: &'s Script) -> ScriptInvocation<'s> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&self.keys.epoch)
            .key(&self.keys.rev)
            .arg(&*self.epoch)
            .arg(self.seen.load(Ordering::Acquire));
        invocation
    }

    /// Notes a revision the store answered with.
    fn saw(&self, revision: u64) {
        self.seen.fetch_max(revision, Ordering::AcqRel);
    }

    /// The prefix this store's keys live under.
    pub fn prefix(&self) -> &str {
        &self.keys.prefix
    }

    async fn get_inner(
        &self,
        mut conn: MultiplexedConnection,
        key: &str,
    ) -> Result<Option<Versioned>, StoreError> {
        let mut invocation = self.guarded(&self.scripts.get);
        invocation.key(self.keys.entry(key));
        let (value, version): (Option<Vec<u8>>, Option<Vec<u8>>) =
            bounded("get", self.op_timeout, invocation.invoke_async(&mut conn)).await?;
        let found = decode_entry(key, value, version)?;
        if let Some(found) = &found {
            self.saw(found.version);
        }
        Ok(found)
    }

    /// A read that a failover cannot undo: after the read, a write on the same connection and a
    /// `WAIT` for it. Redis replicates in one ordered stream, so once the replicas confirmed that
    /// write they hold everything applied before the read, including a write whose answer was
    /// lost. Without replicas asked for, a plain read.
    async fn get_confirmed_inner(
        &self,
        mut conn: MultiplexedConnection,
        key: &str,
    ) -> Result<Option<Versioned>, StoreError> {
        let found = self.get_inner(conn.clone(), key).await?;
        if self.wait.is_some() {
            let _: u64 = bounded(
                "get",
                self.op_timeout,
                ::redis::cmd("INCR")
                    .arg(&self.keys.sync)
                    .query_async(&mut conn),
            )
            .await?;
            self.replicated("get", &mut conn).await?;
        }
        Ok(found)
    }

    /// The batch script's invocation for one batch.
    fn batch_invocation(&self, conditions: &[Condition], ops: &[Op]) -> ScriptInvocation<'_> {
        let mut invocation = self.guarded(&self.scripts.batch);
        invocation
            .key(&self.keys.idx)
            .arg(conditions.len())
            .arg(ops.len());
        for condition in conditions {
            match condition {
                Condition::Absent(key) => invocation.key(self.keys.entry(key)).arg("a").arg(0u64),
                Condition::Version(key, version) => {
                    invocation.key(self.keys.entry(key)).arg("v").arg(*version)
                }
                Condition::Lease {
                    node, generation, ..
                } => invocation
                    .key(self.keys.lease(node))
                    .arg("l")
                    .arg(*generation),
            };
        }
        for op in ops {
            invocation.key(self.keys.entry(op.key()));
            match op {
                Op::Put { key, value } => invocation.arg("p").arg(key).arg(value.as_ref()),
                Op::Delete { key } => invocation.arg("d").arg(key).arg(""),
            };
        }
        invocation
    }

    /// What the batch script answered (`{1, revision}` or `{0, failed condition}`), before any
    /// wait for replicas.
    fn batch_answer(
        &self,
        conditions: &[Condition],
        (committed, number): (i64, u64),
    ) -> Result<BatchOutcome, StoreError> {
        if committed == 1 {
            return Ok(BatchOutcome::Committed { revision: number });
        }
        let failed = usize::try_from(number)
            .ok()
            .and_then(|index| index.checked_sub(1))
            .and_then(|index| conditions.get(index));
        match failed {
            Some(condition) => Ok(BatchOutcome::Conflict {
                key: condition.key().to_owned(),
            }),
            None => Err(StoreError::Corrupt {
                key: self.keys.rev.clone(),
                reason: format!("the batch script named condition {number}, which was not sent"),
            }),
        }
    }

    async fn batch_inner(
        &self,
        mut conn: MultiplexedConnection,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> Result<BatchOutcome, StoreError> {
        let invocation = self.batch_invocation(&conditions, &ops);
        let answer = bounded("batch", self.op_timeout, invocation.invoke_async(&mut conn)).await?;
        let outcome = self.batch_answer(&conditions, answer)?;
        if let BatchOutcome::Committed { revision } = outcome {
            if !ops.is_empty() {
                // Only a confirmed write raises the floor: one that too few replicas hold may be
                // lost by a failover without the store having gone back on anything it confirmed.
                self.replicated("batch", &mut conn).await?;
            }
            self.saw(revision);
        }
        Ok(outcome)
    }

    /// Many batches in one round trip: a pipeline of batch scripts, each run on its own, then one
    /// `WAIT` for all that wrote (it covers every write of the connection before it). A batch is
    /// reported committed only once the replicas asked for confirmed it, as by [`Self::batch_inner`];
    /// if they did not, every batch that wrote has an unknown outcome, and the others keep theirs.
    async fn batches_inner(
        &self,
        mut conn: MultiplexedConnection,
        items: Vec<(Vec<Condition>, Vec<Op>)>,
    ) -> Result<Vec<Result<BatchOutcome, StoreError>>, StoreError> {
        let invocations: Vec<ScriptInvocation<'_>> = items
            .iter()
            .map(|(conditions, ops)| self.batch_invocation(conditions, ops))
            .collect();
        let mut answers: Vec<Option<Result<BatchOutcome, StoreError>>> = vec![None; items.len()];
        let mut unsent: Vec<usize> = (0..items.len()).collect();
        let mut load = false;
        // A server that does not know the script (restarted, or its script cache flushed) runs
        // none of the batches that name it: those go again once, behind a load of the script,
        // as `invoke_async` does for one call.
        while !unsent.is_empty() {
            let mut pipe = ::redis::pipe();
            pipe.ignore_errors();
            if load {
                pipe.load_script(&self.scripts.batch).ignore();
            }
            for &i in &unsent {
                pipe.invoke_script(&invocations[i]);
            }
            let results: Vec<::redis::RedisResult<(i64, u64)>> =
                bounded("batch", self.op_timeout, pipe.query_async(&mut conn)).await?;
            if results.len() != unsent.len() {
                return Err(StoreError::Rejected {
                    op: "batch",
                    reason: format!(
                        "redis answered {} of the {} scripts sent in one pipeline",
                        results.len(),
                        unsent.len()
                    ),
                });
            }
            let mut again = Vec::new();
            for (i, result) in unsent.into_iter().zip(results) {
                answers[i] = match result {
                    Err(error)
                        if !load
                            && error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                    {
                        again.push(i);
                        continue;
                    }
                    Err(error) => Some(Err(classify("batch", self.op_timeout, &error))),
                    Ok(answer) => Some(self.batch_answer(&items[i].0, answer)),
                };
            }
            unsent = again;
            load = true;
        }
        let wrote = answers.iter().zip(&items).any(|(answer, (_, ops))| {
            matches!(answer, Some(Ok(BatchOutcome::Committed { .. }))) && !ops.is_empty()
        });
        let replicated = if wrote {
            self.replicated("batch", &mut conn).await
        } else {
            Ok(())
        };
        Ok(answers
            .into_iter()
            .zip(&items)
            .map(|(answer, (_, ops))| match answer {
                Some(Ok(BatchOutcome::Committed { revision })) => {
                    if !ops.is_empty() {
                        replicated.clone()?;
                    }
                    self.saw(revision);
                    Ok(BatchOutcome::Committed { revision })
                }
                Some(other) => other,
                None => Err(StoreError::Rejected {
                    op: "batch",
                    reason: "redis did not run a script sent in a pipeline".to_owned(),
                }),
            })
            .collect())
    }

    async fn scan_inner(
        &self,
        mut conn: MultiplexedConnection,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let limit = limit.clamp(1, MAX_PAGE);
        // Lexical ranges over the index: '[' includes, '(' excludes, '-' and '+' are the ends.
        // Keys are UTF-8, which never contains the byte 0xFF, so prefix + 0xFF is above every key
        // that starts with the prefix.
        let start: Vec<u8> = match after {
            Some(after) if after >= prefix => [b"(", after.as_bytes()].concat(),
            _ if prefix.is_empty() => b"-".to_vec(),
            _ => [b"[", prefix.as_bytes()].concat(),
        };
        let end: Vec<u8> = if prefix.is_empty() {
            b"+".to_vec()
        } else {
            [b"(", prefix.as_bytes(), b"\xff"].concat()
        };
        let mut invocation = self.guarded(&self.scripts.scan);
        invocation
            .key(&self.keys.idx)
            .arg(start)
            .arg(end)
            .arg(limit + 1)
            .arg(&self.keys.entry);
        let flat: Vec<Option<Vec<u8>>> =
            bounded("scan", self.op_timeout, invocation.invoke_async(&mut conn)).await?;
        if !flat.len().is_multiple_of(3) {
            return Err(StoreError::Corrupt {
                key: self.keys.idx.clone(),
                reason: format!("scan returned {} fields, not triples", flat.len()),
            });
        }
        let mut items = Vec::with_capacity(flat.len() / 3);
        let mut fields = flat.into_iter();
        while let (Some(name), Some(value), Some(version)) =
            (fields.next(), fields.next(), fields.next())
        {
            let key = name
                .and_then(|name| String::from_utf8(name).ok())
                .ok_or_else(|| StoreError::Corrupt {
                    key: self.keys.idx.clone(),
                    reason: "the index holds a key that is not UTF-8".to_owned(),
                })?;
            match decode_entry(&key, value, version)? {
                Some(found) => {
                    self.saw(found.version);
                    items.push((key, found));
                }
                None => {
                    return Err(StoreError::Corrupt {
                        reason: "the key is in the index but has no entry".to_owned(),
                        key,
                    });
                }
            }
        }
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|(key, _)| key.clone())
        } else {
            None
        };
        Ok(Page { items, next })
    }

    async fn acquire_inner(
        &self,
        mut conn: MultiplexedConnection,
        node: &NodeId,
        holder: u64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let mut invocation = self.guarded(&self.scripts.acquire);
        invocation
            .key(self.keys.lease(node))
            .key(self.keys.generation(node))
            .arg(ttl_millis(ttl))
            .arg(holder);
        let generation: u64 = bounded(
            "acquire_lease",
            self.op_timeout,
            invocation.invoke_async(&mut conn),
        )
        .await?;
        self.replicated("acquire_lease", &mut conn).await?;
        Ok(Lease {
            node: node.clone(),
            generation,
            ttl,
            holder,
        })
    }

    async fn renew_inner(
        &self,
        mut conn: MultiplexedConnection,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        let mut invocation = self.guarded(&self.scripts.renew);
        invocation
            .key(self.keys.lease(&lease.node))
            .arg(lease.generation)
            .arg(ttl_millis(lease.ttl))
            .arg(lease.holder);
        let renewed: i64 = bounded(
            "renew_lease",
            self.op_timeout,
            invocation.invoke_async(&mut conn),
        )
        .await?;
        if renewed == 1 {
            self.replicated("renew_lease", &mut conn).await
        } else {
            Err(StoreError::LeaseLost {
                node: lease.node.clone(),
                generation: lease.generation,
            })
        }
    }

    async fn lease_of_inner(
        &self,
        mut conn: MultiplexedConnection,
        node: &NodeId,
    ) -> Result<Option<Lease>, StoreError> {
        let key = self.keys.lease(node);
        let mut invocation = self.guarded(&self.scripts.lease_of);
        invocation.key(&key);
        let raw: Option<String> = bounded(
            "lease_of",
            self.op_timeout,
            invocation.invoke_async(&mut conn),
        )
        .await?;
        let Some(raw) = raw else {
            return Ok(None);
        };
        let mut parts = raw.split(':');
        let parsed = (|| {
            let generation = parts.next()?.parse::<u64>().ok()?;
            let ttl = parts.next()?.parse::<u64>().ok()?;
            let holder = parts.next()?.parse::<u64>().ok()?;
            parts.next().is_none().then_some((generation, ttl, holder))
        })();
        match parsed {
            Some((generation, ttl, holder)) => Ok(Some(Lease {
                node: node.clone(),
                generation,
                ttl: Duration::from_millis(ttl),
                holder,
            })),
            None => Err(StoreError::Corrupt {
                key,
                reason: format!("lease {raw:?} is not <generation>:<ttl ms>:<holder>"),
            }),
        }
    }

    async fn release_inner(
        &self,
        mut conn: MultiplexedConnection,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        let mut invocation = self.guarded(&self.scripts.release);
        invocation
            .key(self.keys.lease(&lease.node))
            .arg(lease.generation);
        let released: i64 = bounded(
            "release_lease",
            self.op_timeout,
            invocation.invoke_async(&mut conn),
        )
        .await?;
        if released == 1 {
            self.replicated("release_lease", &mut conn).await?;
        }
        Ok(())
    }
}

impl LocationStore for RedisStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        let key = key.to_owned();
        self.on_io("get", move |s, conn| async move {
            s.get_inner(conn, &key).await
        })
    }

    fn get_confirmed<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        let key = key.to_owned();
        self.on_io("get", move |s, conn| async move {
            s.get_confirmed_inner(conn, &key).await
        })
    }

    fn batch<'a>(
        &'a self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>> {
        self.on_io("batch", move |s, conn| async move {
            s.batch_inner(conn, conditions, ops).await
        })
    }

    fn batches<'a>(
        &'a self,
        items: Vec<(Vec<Condition>, Vec<Op>)>,
    ) -> BoxFuture<'a, Vec<Result<BatchOutcome, StoreError>>> {
        if items.is_empty() {
            return Box::pin(async { Vec::new() });
        }
        let count = items.len();
        let answers = self.on_io_judged(
            "batch",
            move |s, conn| async move { s.batches_inner(conn, items).await },
            |answer| match answer {
                Ok(items) => items
                    .iter()
                    .any(|item| item.as_ref().err().is_some_and(loses_link)),
                Err(error) => loses_link(error),
            },
        );
        Box::pin(async move {
            answers
                .await
                .unwrap_or_else(|error| vec![Err(error); count])
        })
    }

    fn scan<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>> {
        let (prefix, after) = (prefix.to_owned(), after.map(ToOwned::to_owned));
        self.on_io("scan", move |s, conn| async move {
            s.scan_inner(conn, &prefix, after.as_deref(), limit).await
        })
    }

    fn acquire_lease<'a>(
        &'a self,
        node: &'a NodeId,
        holder: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        let node = node.clone();
        self.on_io("acquire_lease", move |s, conn| async move {
            s.acquire_inner(conn, &node, holder, ttl).await
        })
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        let lease = lease.clone();
        self.on_io("renew_lease", move |s, conn| async move {
            s.renew_inner(conn, &lease).await
        })
    }

    fn lease_of<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> BoxFuture<'a, Result<Option<Lease>, StoreError>> {
        let node = node.clone();
        self.on_io("lease_of", move |s, conn| async move {
            s.lease_of_inner(conn, &node).await
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        let lease = lease.clone();
        self.on_io("release_lease", move |s, conn| async move {
            s.release_inner(conn, &lease).await
        })
    }
}

/// Whether a call's failure says its connection is unfit (the server gone, demoted, or short of
/// replicas), so that the next call connects again.
fn loses_link(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Unavailable { .. }
            | StoreError::Timeout { .. }
            | StoreError::NotReplicated { .. }
    )
}

/// Redis counts TTLs in whole milliseconds; round up so a lease never lives shorter than asked.
fn ttl_millis(ttl: Duration) -> u64 {
    let millis = ttl.as_nanos().div_ceil(1_000_000).max(1);
    u64::try_from(millis)
        .unwrap_or(u64::MAX)
        .min(MAX_TTL_MILLIS)
}

fn decode_entry(
    key: &str,
    value: Option<Vec<u8>>,
    version: Option<Vec<u8>>,
) -> Result<Option<Versioned>, StoreError> {
    match (value, version) {
        (None, None) => Ok(None),
        (Some(value), Some(version)) => {
            let version = std::str::from_utf8(&version)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or_else(|| StoreError::Corrupt {
                    key: key.to_owned(),
                    reason: format!(
                        "its version {:?} is not a number",
                        String::from_utf8_lossy(&version)
                    ),
                })?;
            Ok(Some(Versioned {
                value: Bytes::from(value),
                version,
            }))
        }
        _ => Err(StoreError::Corrupt {
            key: key.to_owned(),
            reason: "it has a value without a version, or a version without a value".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_with_braces_or_empty_are_refused() {
        assert!(RedisStoreConfig::new("").validate().is_err());
        assert!(RedisStoreConfig::new("a{b").validate().is_err());
        assert!(RedisStoreConfig::new("a}b").validate().is_err());
        assert!(RedisStoreConfig::new("cluster-1").validate().is_ok());
        let zero = RedisStoreConfig {
            op_timeout: Duration::ZERO,
            ..RedisStoreConfig::default()
        };
        assert!(zero.validate().is_err());
    }

    #[test]
    fn a_wait_must_fit_in_the_call_timeout() {
        let with = |replicas, timeout| RedisStoreConfig {
            wait: Some(WaitReplicas { replicas, timeout }),
            ..RedisStoreConfig::default()
        };
        assert!(with(1, Duration::from_millis(500)).validate().is_ok());
        assert!(with(0, Duration::from_millis(500)).validate().is_err());
        assert!(with(1, Duration::ZERO).validate().is_err());
        assert!(
            with(1, RedisStoreConfig::DEFAULT_OP_TIMEOUT)
                .validate()
                .is_err()
        );
    }

    #[test]
    fn lease_ttls_round_up_to_whole_milliseconds() {
        assert_eq!(ttl_millis(Duration::ZERO), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ttl_millis(Duration::from_secs(3)), 3000);
        assert_eq!(ttl_millis(Duration::MAX), MAX_TTL_MILLIS);
    }

    #[test]
    fn an_entry_with_half_its_fields_is_corrupt() {
        assert_eq!(decode_entry("k", None, None), Ok(None));
        assert!(matches!(
            decode_entry("k", Some(b"v".to_vec()), None),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            decode_entry("k", Some(b"v".to_vec()), Some(b"x1".to_vec())),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
