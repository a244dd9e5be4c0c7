//! Where the location store is, as a config file or a command line names it: read in one place,
//! and opened in one place.

use std::fmt;
use std::sync::Arc;

use super::{LocationStore, MemoryStore, RedisStore, RedisStoreConfig, StoreError};

/// A location store's address: `memory`, `redis://host:port/db` or `etcd://host:port,host:port`.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// An in-process store: the node is a cluster of one.
    Memory,
    /// A redis-server, at this `redis://` URL.
    Redis(String),
    /// An etcd cluster, at these client endpoints (`host:port` each).
    Etcd(Vec<String>),
}

impl StoreUrl {
    /// Reads `memory`, a `redis://` URL, or an `etcd://` list of endpoints.
    pub fn parse(text: &str) -> Result<StoreUrl, StoreError> {
        if text == "memory" {
            return Ok(StoreUrl::Memory);
        }
        if text.starts_with("redis://") {
            return Ok(StoreUrl::Redis(text.to_owned()));
        }
        if let Some(list) = text.strip_prefix("etcd://") {
            let endpoints: Vec<String> = list
                .trim_end_matches('/')
                .split(',')
                .map(str::trim)
                .map(ToOwned::to_owned)
                .collect();
            let bad = endpoints
                .iter()
                .find(|e| e.is_empty() || e.contains('/') || !e.contains(':'));
            if let Some(bad) = bad {
                return Err(StoreError::InvalidConfig {
                    reason: format!(
                        "etcd endpoint {bad:?} is not host:port; write etcd://10.0.0.5:2379,10.0.0.6:2379"
                    ),
                });
            }
            return Ok(StoreUrl::Etcd(endpoints));
        }
        Err(StoreError::InvalidConfig {
            reason: format!(
                "{:?} is not a location store: write \"memory\", a redis:// URL such as \
                 \"redis://127.0.0.1:6379/\", or an etcd:// list such as \"etcd://127.0.0.1:2379\"",
                redact(text)
            ),
        })
    }

    /// What kind of store it is, for reports: `memory`, `redis` or `etcd`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreUrl::Memory => "memory",
            StoreUrl::Redis(_) => "redis",
            StoreUrl::Etcd(_) => "etcd",
        }
    }

    /// Connects to the store, with its keys under `prefix` (unused by the memory store).
    pub async fn open(&self, prefix: &str) -> Result<Arc<dyn LocationStore>, StoreError> {
        match self {
            StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
            StoreUrl::Redis(url) => {
                let store = RedisStore::connect(url, RedisStoreConfig::new(prefix)).await?;
                Ok(Arc::new(store))
            }
            #[cfg(feature = "etcd")]
            StoreUrl::Etcd(endpoints) => {
                let config = super::EtcdStoreConfig::new(prefix);
                let store = super::EtcdStore::connect(endpoints, config).await?;
                Ok(Arc::new(store))
            }
            #[cfg(not(feature = "etcd"))]
            StoreUrl::Etcd(_) => Err(StoreError::InvalidConfig {
                reason: "this build has no etcd support: build ferry with the `etcd` feature"
                    .to_owned(),
            }),
        }
    }
}

/// Shows the URL without any password.
impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory"),
            StoreUrl::Redis(url) => f.write_str(&redact(url)),
            StoreUrl::Etcd(endpoints) => write!(f, "etcd://{}", endpoints.join(",")),
        }
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

/// The URL with the password between `:` and `@` of its authority blanked.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_store_url_is_read() {
        assert_eq!(StoreUrl::parse("memory"), Ok(StoreUrl::Memory));
        assert_eq!(
            StoreUrl::parse("redis://127.0.0.1:6379/"),
            Ok(StoreUrl::Redis("redis://127.0.0.1:6379/".into()))
        );
        assert_eq!(
            StoreUrl::parse("etcd://10.0.0.5:2379, 10.0.0.6:2379"),
            Ok(StoreUrl::Etcd(vec![
                "10.0.0.5:2379".into(),
                "10.0.0.6:2379".into()
            ]))
        );
        assert_eq!(StoreUrl::parse("etcd://a:1").map(|u| u.kind()), Ok("etcd"));
        for bad in ["etcd://", "etcd://host", "etcd://a:1,,b:2", "mysql://x", ""] {
            assert!(
                matches!(StoreUrl::parse(bad), Err(StoreError::InvalidConfig { .. })),
                "{bad:?} was taken"
            );
        }
    }

    #[test]
    fn a_password_never_shows() {
        let url = StoreUrl::parse("redis://user:secret@10.0.0.5:6379/").expect("url");
        assert_eq!(url.to_string(), "redis://user:***@10.0.0.5:6379/");
        let refused = StoreUrl::parse("mongo://u:secret@h").expect_err("refused");
        assert!(!refused.to_string().contains("secret"), "{refused}");
    }
}
