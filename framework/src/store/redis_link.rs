//! The connection a `RedisStore` talks over: to one redis-server, or to whichever server the
//! sentinels name as master, found again after a failover.
//!
//! The link holds one multiplexed connection and never reconnects behind the caller's back: a
//! call that fails on it marks it lost, and the next call connects afresh (asking the sentinels
//! again, when there are sentinels). So a call and the `WAIT` that follows it always travel on
//! the same connection, and a connection to a server that was demoted or cut off is dropped as
//! soon as a call notices, instead of being dialled again at the same address.

use std::fmt;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, Role};
use futures_util::future::join_all;
use parking_lot::Mutex;

use super::StoreError;

/// Redis behind sentinels, as a `redis+sentinel://` URL names it.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    /// The sentinels to ask, as `host:port`, in the order they were given.
    pub sentinels: Vec<String>,
    /// The name the sentinels know the master by (`sentinel monitor <name> ...`).
    pub master: String,
    /// `user:password` or `:password` (URL-encoded, as written in the URL) for the master; the
    /// sentinels are asked without credentials.
    pub credentials: Option<String>,
}

impl fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Where the link connects.
enum Target {
    /// One server, at a fixed URL.
    Server(Client),
    /// The master the sentinels name.
    Sentinels {
        sentinels: Vec<(String, Client)>,
        master: String,
        credentials: Option<String>,
    },
}

/// A connection the link handed out, with the number that tells it from later ones.
pub(super) struct Leased {
    pub conn: MultiplexedConnection,
    number: u64,
}

/// The store's connection, made again after it was lost.
pub(super) struct Link {
    target: Target,
    timeout: Duration,
    /// The connection in use and its number; `None` once it was lost.
    current: Mutex<(u64, Option<MultiplexedConnection>)>,
    /// Held while a connection is being made, so that calls waiting for one make one between them.
    connecting: tokio::sync::Mutex<()>,
}

impl Link {
    /// A link to the redis-server at `url`.
    pub fn server(url: &str, timeout: Duration) -> Result<Link, StoreError> {
        let client = Client::open(url).map_err(|e| StoreError::InvalidConfig {
            reason: format!(
                "redis url {:?} is not usable ({e}); use redis://host:port/db",
                super::url::redact(url)
            ),
        })?;
        Ok(Self::new(Target::Server(client), timeout))
    }

    /// A link to the master the sentinels of `target` name.
    pub fn sentinels(target: &SentinelTarget, timeout: Duration) -> Result<Link, StoreError> {
        let sentinels = target
            .sentinels
            .iter()
            .map(|at| {
                Client::open(format!("redis://{at}/"))
                    .map(|client| (at.clone(), client))
                    .map_err(|e| StoreError::InvalidConfig {
                        reason: format!("sentinel {at:?} is not host:port ({e})"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(
            Target::Sentinels {
                sentinels,
                master: target.master.clone(),
                credentials: target.credentials.clone(),
            },
            timeout,
        ))
    }

    fn new(target: Target, timeout: Duration) -> Link {
        Link {
            target,
            timeout,
            current: Mutex::new((0, None)),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether the link finds its server through sentinels.
    pub fn follows_sentinels(&self) -> bool {
        matches!(self.target, Target::Sentinels { .. })
    }

    /// The connection to use now, made first if there is none.
    pub async fn connection(&self) -> Result<Leased, StoreError> {
        if let Some(leased) = self.in_use() {
            return Ok(leased);
        }
        let _one = self.connecting.lock().await;
        if let Some(leased) = self.in_use() {
            return Ok(leased);
        }
        let conn = self.connect().await?;
        let mut current = self.current.lock();
        current.0 += 1;
        current.1 = Some(conn.clone());
        Ok(Leased {
            conn,
            number: current.0,
        })
    }

    /// The connection in use, if there is one.
    pub fn in_use(&self) -> Option<Leased> {
        let current = self.current.lock();
        current.1.clone().map(|conn| Leased {
            conn,
            number: current.0,
        })
    }

    /// Drops the connection `leased` came from, if it is still the one in use: the next call
    /// connects afresh.
    pub fn lost(&self, leased: &Leased) {
        let mut current = self.current.lock();
        if current.0 == leased.number {
            current.1 = None;
        }
    }

    async fn connect(&self) -> Result<MultiplexedConnection, StoreError> {
        match &self.target {
            Target::Server(client) => self.open(client).await,
            Target::Sentinels {
                sentinels,
                master,
                credentials,
            } => self.find_master(sentinels, master, credentials).await,
        }
    }

    async fn open(&self, client: &Client) -> Result<MultiplexedConnection, StoreError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        super::redis_call::bounded(
            "connect",
            self.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
    }

    /// Asks every sentinel at once where the master is, then connects to the first address named
    /// (in the order the sentinels were given) whose server says it is master: a sentinel that
    /// has not yet seen a failover may still name the old master, which is a replica by then.
    async fn find_master(
        &self,
        sentinels: &[(String, Client)],
        master: &str,
        credentials: &Option<String>,
    ) -> Result<MultiplexedConnection, StoreError> {
        let answers = join_all(
            sentinels
                .iter()
                .map(|(_, sentinel)| self.ask(sentinel, master)),
        )
        .await;
        let mut why = Vec::new();
        let mut tried = Vec::new();
        for ((at, _), answer) in sentinels.iter().zip(answers) {
            let address = match answer {
                Ok(Some(address)) => address,
                Ok(None) => {
                    why.push(format!("sentinel {at} watches no master named {master:?}"));
                    continue;
                }
                Err(error) => {
                    why.push(format!("sentinel {at}: {error}"));
                    continue;
                }
            };
            if tried.contains(&address) {
                continue;
            }
            tried.push(address.clone());
            match self.open_master(&address, credentials).await {
                Ok(conn) => return Ok(conn),
                Err(error) => why.push(format!("master {address} named by {at}: {error}")),
            }
        }
        Err(StoreError::Unavailable {
            reason: format!(
                "no sentinel named a reachable master for {master:?} ({})",
                why.join("; ")
            ),
        })
    }

    /// `SENTINEL get-master-addr-by-name`: the master's `host:port`, or `None` if the sentinel
    /// watches no master of that name.
    async fn ask(&self, sentinel: &Client, master: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.open(sentinel).await?;
        let address: Option<(String, u16)> = super::redis_call::bounded(
            "connect",
            self.timeout,
            ::redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async(&mut conn),
        )
        .await?;
        Ok(address.map(|(host, port)| {
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }))
    }

    /// Connects to `address` and keeps the connection only if the server says it is master.
    async fn open_master(
        &self,
        address: &str,
        credentials: &Option<String>,
    ) -> Result<MultiplexedConnection, StoreError> {
        let url = match credentials {
            Some(credentials) => format!("redis://{credentials}@{address}/"),
            None => format!("redis://{address}/"),
        };
        let client = Client::open(url).map_err(|e| StoreError::InvalidConfig {
            reason: format!("the master's address {address:?} is not usable ({e})"),
        })?;
        let mut conn = self.open(&client).await?;
        let role: Role = super::redis_call::bounded(
            "connect",
            self.timeout,
            ::redis::cmd("ROLE").query_async(&mut conn),
        )
        .await?;
        match role {
            Role::Primary { .. } => Ok(conn),
            _ => Err(StoreError::Unavailable {
                reason: "it is not master (yet): the failover is still under way".to_owned(),
            }),
        }
    }
}
