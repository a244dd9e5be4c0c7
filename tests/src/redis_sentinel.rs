//! Redis as studios run it, for one test: a master, its replicas and a sentinel, each a real
//! redis-server on a free loopback port, all killed on drop.
//!
//! The sentinel fails the master over after a second of silence, or at once on
//! [`SentinelGroup::failover`]. Like [`RedisServer`], it skips where redis-server is not
//! installed, unless `FERRY_REQUIRE_REDIS=1`.

use std::time::Duration;

use redis::FromRedisValue;
use tokio::time::Instant;

use crate::redis_server::{Kind, RedisServer, SENTINEL_MASTER, or_skip};

/// How long the sentinel may take to see every replica, or to finish a failover.
const SETTLE_WITHIN: Duration = Duration::from_secs(40);

/// A master, its replicas and the sentinel that watches them.
#[derive(Debug)]
pub struct SentinelGroup {
    /// The data servers; the first was master at the start.
    data: Vec<RedisServer>,
    sentinel: RedisServer,
}

impl SentinelGroup {
    /// Starts a master with `replicas` replicas (each ready once it synced) and a sentinel, and
    /// returns once the sentinel knows every replica and could fail the master over; `None`
    /// (after one line) where redis-server is not installed.
    pub async fn start_or_skip(replicas: usize) -> Option<SentinelGroup> {
        let master = or_skip(
            RedisServer::start_kind(Kind::Data {
                persistent: false,
                replica_of: None,
            })
            .await,
        )?;
        let mut data = vec![master];
        for _ in 0..replicas {
            let replica = RedisServer::start_kind(Kind::Data {
                persistent: false,
                replica_of: Some(data[0].port()),
            })
            .await;
            data.push(or_skip(replica)?);
        }
        let sentinel = RedisServer::start_kind(Kind::Sentinel {
            master: data[0].port(),
        })
        .await;
        let group = SentinelGroup {
            sentinel: or_skip(sentinel)?,
            data,
        };
        group.await_replicas_known(replicas).await;
        group.await_replicas_online(replicas).await;
        Some(group)
    }

    /// Where to connect: `redis+sentinel://127.0.0.1:<sentinel port>/ferry`.
    pub fn url(&self) -> String {
        format!(
            "redis+sentinel://127.0.0.1:{}/{SENTINEL_MASTER}",
            self.sentinel.port()
        )
    }

    /// The data server the sentinel names as master now.
    pub async fn master(&self) -> usize {
        let named: Option<(String, u16)> = self
            .sentinel_says(
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(SENTINEL_MASTER),
            )
            .await
            .expect("the sentinel answers");
        let (_, port) = named.expect("the sentinel names a master");
        self.data
            .iter()
            .position(|server| server.port() == port)
            .expect("the master is one of the group")
    }

    /// Fails the master over now (`SENTINEL FAILOVER`), while it runs, and returns the new
    /// master once the sentinel names it and it says it is master.
    pub async fn failover(&self) -> usize {
        let old = self.begin_failover().await;
        self.await_master_other_than(old).await
    }

    /// Asks the sentinel to fail the master over now, while it runs, and returns the master it
    /// had; the failover itself takes a second or so.
    pub async fn begin_failover(&self) -> usize {
        let old = self.master().await;
        let asked: Option<String> = self
            .sentinel_says(redis::cmd("SENTINEL").arg("FAILOVER").arg(SENTINEL_MASTER))
            .await;
        assert_eq!(
            asked.as_deref(),
            Some("OK"),
            "the sentinel takes the failover"
        );
        old
    }

    /// Kills the master (SIGKILL) and returns which server it was.
    pub async fn kill_master(&mut self) -> usize {
        let master = self.master().await;
        self.stop(master);
        master
    }

    /// Kills data server `i` (SIGKILL).
    pub fn stop(&mut self, i: usize) {
        self.data[i].stop();
    }

    /// Waits until a data server other than `old` says it is master: the sentinel promoted a
    /// replica (and may not name it yet).
    pub async fn await_promoted(&self, old: usize) -> usize {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            for i in (0..self.data.len()).filter(|i| *i != old) {
                if self.role(i).await.as_deref() == Some("master") {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no promotion within {SETTLE_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the sentinel names a master other than `old`, and it says it is master.
    pub async fn await_master_other_than(&self, old: usize) -> usize {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let named = self.master().await;
            if named != old && self.role(named).await.as_deref() == Some("master") {
                return named;
            }
            assert!(
                Instant::now() < deadline,
                "no failover within {SETTLE_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the sentinel names a master other than `old` and has ended the failover
    /// (`SENTINEL MASTER` flags say just `master`). The sentinel names the promoted replica while
    /// it still reconfigures the others; a killed master started again before the end can be
    /// taken for one of them, promoted by a second failover, and the data set lost.
    pub async fn await_failover_ended(&self, old: usize) -> usize {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let named = self.await_master_other_than(old).await;
            let fields: Option<Vec<String>> = self
                .sentinel_says(redis::cmd("SENTINEL").arg("MASTER").arg(SENTINEL_MASTER))
                .await;
            let flags = fields.and_then(|fields| {
                let at = fields.iter().position(|f| f == "flags")?;
                fields.get(at + 1).cloned()
            });
            if flags.as_deref() == Some("master") {
                return named;
            }
            assert!(
                Instant::now() < deadline,
                "the failover did not end within {SETTLE_WITHIN:?} (flags {flags:?})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts data server `i` again after it was killed: empty, and as a master, as a supervisor
    /// restarts a crashed server whose config still says master. The sentinel turns it into a
    /// replica of the master it knows.
    pub async fn restart(&mut self, i: usize) {
        self.data[i]
            .restart_as(Kind::Data {
                persistent: false,
                replica_of: None,
            })
            .await
            .expect("the data server starts again");
    }

    /// Starts data server `i` again after it was killed: empty, as a replica of the master the
    /// sentinel names, and returns once it synced.
    pub async fn restart_as_replica(&mut self, i: usize) {
        let master = self.master().await;
        let master = self.data[master].port();
        self.data[i]
            .restart_as(Kind::Data {
                persistent: false,
                replica_of: Some(master),
            })
            .await
            .expect("the replica starts again");
    }

    /// Waits until `n` replicas confirm a write on the master (`WAIT`): they are synced and the
    /// master streams its writes to them. (A replica that just synced may confirm nothing for
    /// up to a second, until the master hears from it.)
    pub async fn await_replicas_online(&self, n: usize) {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let master = self.master().await;
            let mut probe = redis::pipe();
            probe
                .cmd("SET")
                .arg("ferry-test:probe")
                .arg(1)
                .ignore()
                .cmd("WAIT")
                .arg(n)
                .arg(100);
            let confirmed: Option<(usize,)> = ask(self.data[master].port(), &probe).await;
            if confirmed.is_some_and(|(confirmed,)| confirmed >= n) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{n} replicas did not confirm a write within {SETTLE_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Data server `i`.
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.data[i]
    }

    /// How many data servers the group has.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the group has no data server (never: it starts with a master).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// What data server `i` says it is: `master` or `slave`; `None` if it does not answer.
    pub async fn role(&self, i: usize) -> Option<String> {
        let role: Option<Vec<redis::Value>> = self.server_says(i, &redis::cmd("ROLE")).await;
        match role?.first()? {
            redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            redis::Value::SimpleString(text) => Some(text.clone()),
            _ => None,
        }
    }

    /// Waits until the sentinel lists `n` replicas of the master, each linked to it: only then can
    /// it fail the master over.
    async fn await_replicas_known(&self, n: usize) {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let replicas: Option<Vec<Vec<String>>> = self
                .sentinel_says(redis::cmd("SENTINEL").arg("REPLICAS").arg(SENTINEL_MASTER))
                .await;
            let linked = replicas
                .unwrap_or_default()
                .iter()
                .filter(|fields| {
                    let field = |name: &str| {
                        fields
                            .iter()
                            .position(|f| f == name)
                            .and_then(|at| fields.get(at + 1))
                    };
                    field("master-link-status").is_some_and(|s| s == "ok")
                        && field("flags").is_some_and(|flags| !flags.contains("down"))
                })
                .count();
            if linked >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinel knew {linked} of {n} replicas after {SETTLE_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn sentinel_says<T: FromRedisValue>(&self, command: &impl Query) -> Option<T> {
        ask(self.sentinel.port(), command).await
    }

    async fn server_says<T: FromRedisValue>(&self, i: usize, command: &impl Query) -> Option<T> {
        ask(self.data[i].port(), command).await
    }
}

/// Sends a command (or a pipeline) to the server on `port`; `None` if it does not answer within
/// a second.
async fn ask<T: FromRedisValue>(port: u16, command: &impl Query) -> Option<T> {
    let exchange = async {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        command.run(&mut conn).await
    };
    tokio::time::timeout(Duration::from_secs(1), exchange)
        .await
        .ok()
        .flatten()
}

/// A command or a pipeline, sent the same way.
trait Query {
    async fn run<T: FromRedisValue>(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> Option<T>;
}

impl Query for redis::Cmd {
    async fn run<T: FromRedisValue>(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> Option<T> {
        self.query_async(conn).await.ok()
    }
}

impl Query for redis::Pipeline {
    async fn run<T: FromRedisValue>(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> Option<T> {
        self.query_async(conn).await.ok()
    }
}
