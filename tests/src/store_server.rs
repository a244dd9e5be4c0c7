//! A real location store server that a process test starts, hands to its `ferry node` processes
//! by URL, and stops when dropped: redis-server or an etcd member.

use crate::etcd_server::EtcdServer;
use crate::redis_server::RedisServer;

/// Which server to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// redis-server.
    Redis,
    /// One etcd member.
    Etcd,
}

/// A running store server, owned by one test.
#[derive(Debug)]
pub enum StoreServer {
    /// redis-server.
    Redis(RedisServer),
    /// One etcd member.
    Etcd(EtcdServer),
}

impl StoreServer {
    /// Starts one, or says why not and returns `None` when it is not installed (as
    /// [`RedisServer::start_or_skip`] and [`EtcdServer::start_or_skip`] do).
    pub async fn start_or_skip(kind: StoreKind) -> Option<StoreServer> {
        match kind {
            StoreKind::Redis => RedisServer::start_or_skip().await.map(StoreServer::Redis),
            StoreKind::Etcd => EtcdServer::start_or_skip().await.map(StoreServer::Etcd),
        }
    }

    /// Where to connect, as `ferry node`'s `store` key takes it.
    pub fn url(&self) -> String {
        match self {
            StoreServer::Redis(redis) => redis.url(),
            StoreServer::Etcd(etcd) => etcd.url(),
        }
    }
}
