//! Where the location store is, as a config file or a command line names it: read in one place,
//! and opened in one place.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{
    LocationStore, MemoryStore, RedisStore, RedisStoreConfig, SentinelTarget, StoreError,
    WaitReplicas,
};

/// The scheme of Redis behind sentinels.
const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// A location store's address: `memory`, `redis://host:port/db`,
/// `redis+sentinel://host:port,host:port/master-name` or `etcd://host:port,host:port`. The two
/// Redis forms take `?wait_replicas=N&wait_timeout_ms=T` (see [`WaitReplicas`]).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// An in-process store: the node is a cluster of one.
    Memory,
    /// A redis-server at a fixed address.
    Redis {
        /// The `redis://` URL, without the parameters Ferry reads itself.
        url: String,
        /// How many replicas must confirm each write, if any.
        wait: Option<WaitReplicas>,
    },
    /// Redis behind sentinels: the store connects to the master they name, and asks again after
    /// a failover.
    RedisSentinel {
        /// The sentinels and the master's name.
        target: SentinelTarget,
        /// How many replicas must confirm each write, if any.
        wait: Option<WaitReplicas>,
    },
    /// An etcd cluster, at these client endpoints (`host:port` each).
    Etcd(Vec<String>),
}

impl StoreUrl {
    /// Reads `memory`, a `redis://` URL, a `redis+sentinel://` URL, or an `etcd://` list of
    /// endpoints.
    pub fn parse(text: &str) -> Result<StoreUrl, StoreError> {
        if text == "memory" {
            return Ok(StoreUrl::Memory);
        }
        if text.starts_with("redis://") {
            let (url, query) = split_query(text);
            let (wait, others) = wait_of(text, query)?;
            let url = match others.is_empty() {
                true => url.to_owned(),
                false => format!("{url}?{}", others.join("&")),
            };
            return Ok(StoreUrl::Redis { url, wait });
        }
        if let Some(rest) = text.strip_prefix(SENTINEL_SCHEME) {
            let (rest, query) = split_query(rest);
            let (wait, others) = wait_of(text, query)?;
            if let Some(other) = others.first() {
                return Err(invalid_sentinel(
                    text,
                    &format!(
                        "it has the parameter {other:?}, which is not wait_replicas or wait_timeout_ms"
                    ),
                ));
            }
            let target = sentinel_target(text, rest)?;
            return Ok(StoreUrl::RedisSentinel { target, wait });
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
                 \"redis://127.0.0.1:6379/\", a redis+sentinel:// URL such as \
                 \"redis+sentinel://127.0.0.1:26379/mymaster\", or an etcd:// list such as \
                 \"etcd://127.0.0.1:2379\"",
                redact(text)
            ),
        })
    }

    /// What kind of store it is, for reports: `memory`, `redis`, `redis+sentinel` or `etcd`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreUrl::Memory => "memory",
            StoreUrl::Redis { .. } => "redis",
            StoreUrl::RedisSentinel { .. } => "redis+sentinel",
            StoreUrl::Etcd(_) => "etcd",
        }
    }

    /// Connects to the store, with its keys under `prefix` (unused by the memory store).
    pub async fn open(&self, prefix: &str) -> Result<Arc<dyn LocationStore>, StoreError> {
        match self {
            StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
            StoreUrl::Redis { url, wait } => {
                let config = RedisStoreConfig {
                    wait: *wait,
                    ..RedisStoreConfig::new(prefix)
                };
                Ok(Arc::new(RedisStore::connect(url, config).await?))
            }
            StoreUrl::RedisSentinel { target, wait } => {
                let config = RedisStoreConfig {
                    wait: *wait,
                    ..RedisStoreConfig::new(prefix)
                };
                Ok(Arc::new(
                    RedisStore::connect_sentinel(target, config).await?,
                ))
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
            StoreUrl::Redis { url, wait } => {
                f.write_str(&redact(url))?;
                write_wait(f, wait, if url.contains('?') { '&' } else { '?' })
            }
            StoreUrl::RedisSentinel { target, wait } => {
                f.write_str(SENTINEL_SCHEME)?;
                if let Some(credentials) = &target.credentials {
                    match credentials.split_once(':') {
                        Some((user, _password)) => write!(f, "{user}:***@")?,
                        None => write!(f, "{credentials}@")?,
                    }
                }
                write!(f, "{}/{}", target.sentinels.join(","), target.master)?;
                write_wait(f, wait, '?')
            }
            StoreUrl::Etcd(endpoints) => write!(f, "etcd://{}", endpoints.join(",")),
        }
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

fn write_wait(f: &mut fmt::Formatter<'_>, wait: &Option<WaitReplicas>, lead: char) -> fmt::Result {
    match wait {
        Some(wait) => write!(
            f,
            "{lead}wait_replicas={}&wait_timeout_ms={}",
            wait.replicas,
            wait.timeout.as_millis()
        ),
        None => Ok(()),
    }
}

/// The text before `?`, and the query after it.
fn split_query(text: &str) -> (&str, Option<&str>) {
    match text.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (text, None),
    }
}

/// The replica acknowledgement a query asks for, and its other parameters as written.
fn wait_of<'q>(
    url: &str,
    query: Option<&'q str>,
) -> Result<(Option<WaitReplicas>, Vec<&'q str>), StoreError> {
    let invalid = |reason: String| StoreError::InvalidConfig {
        reason: format!(
            "{:?}: {reason}; write for example ?wait_replicas=1&wait_timeout_ms=500",
            redact(url)
        ),
    };
    let mut replicas = None;
    let mut timeout = None;
    let mut others = Vec::new();
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value
                .parse::<u32>()
                .map_err(|_| invalid(format!("{name} must be a whole number, not {value:?}")))
        };
        match name {
            "wait_replicas" => replicas = Some(number()?),
            "wait_timeout_ms" => timeout = Some(number()?),
            _ => others.push(pair),
        }
    }
    let wait = match (replicas, timeout) {
        (None, None) | (Some(0), None) => None,
        (None, Some(_)) | (Some(0), Some(_)) => {
            return Err(invalid(
                "wait_timeout_ms needs wait_replicas of at least 1".to_owned(),
            ));
        }
        (Some(_), Some(0)) => {
            return Err(invalid("wait_timeout_ms must be above 0".to_owned()));
        }
        (Some(replicas), timeout) => Some(WaitReplicas {
            replicas,
            timeout: timeout
                .map(|ms| Duration::from_millis(u64::from(ms)))
                .unwrap_or(WaitReplicas::DEFAULT_TIMEOUT),
        }),
    };
    Ok((wait, others))
}

/// `[credentials@]host:port,host:port/master-name`, the part after the scheme.
fn sentinel_target(url: &str, rest: &str) -> Result<SentinelTarget, StoreError> {
    let Some((authority, master)) = rest.split_once('/') else {
        return Err(invalid_sentinel(
            url,
            "it names no master after the sentinels",
        ));
    };
    let master = master.trim_end_matches('/');
    if master.is_empty() || master.contains('/') {
        return Err(invalid_sentinel(
            url,
            "the master's name must follow the sentinels, alone",
        ));
    }
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (Some(credentials.to_owned()), hosts),
        None => (None, authority),
    };
    let sentinels: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .map(ToOwned::to_owned)
        .collect();
    let bad = sentinels.iter().find(|at| {
        at.rsplit_once(':')
            .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    });
    if let Some(bad) = bad {
        return Err(invalid_sentinel(
            url,
            &format!("sentinel {bad:?} is not host:port"),
        ));
    }
    Ok(SentinelTarget {
        sentinels,
        master: master.to_owned(),
        credentials,
    })
}

fn invalid_sentinel(url: &str, reason: &str) -> StoreError {
    StoreError::InvalidConfig {
        reason: format!(
            "{:?} is not a sentinel URL: {reason}; write \
             redis+sentinel://10.0.0.5:26379,10.0.0.6:26379/mymaster",
            redact(url)
        ),
    }
}

/// The URL with the password between `:` and `@` of its authority blanked.
pub(super) fn redact(url: &str) -> String {
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
            Ok(StoreUrl::Redis {
                url: "redis://127.0.0.1:6379/".into(),
                wait: None
            })
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
    fn a_sentinel_url_names_its_sentinels_master_and_wait() {
        let url = StoreUrl::parse(
            "redis+sentinel://10.0.0.5:26379,10.0.0.6:26379/games?wait_replicas=2&wait_timeout_ms=300",
        )
        .expect("sentinel url");
        assert_eq!(
            url,
            StoreUrl::RedisSentinel {
                target: SentinelTarget {
                    sentinels: vec!["10.0.0.5:26379".into(), "10.0.0.6:26379".into()],
                    master: "games".into(),
                    credentials: None,
                },
                wait: Some(WaitReplicas {
                    replicas: 2,
                    timeout: Duration::from_millis(300)
                }),
            }
        );
        assert_eq!(url.kind(), "redis+sentinel");
        // Shown as written, and read back the same.
        assert_eq!(StoreUrl::parse(&url.to_string()), Ok(url));
        let plain = StoreUrl::parse("redis+sentinel://s:26379/m").expect("no wait");
        assert!(matches!(plain, StoreUrl::RedisSentinel { wait: None, .. }));
        for bad in [
            "redis+sentinel://s:26379",
            "redis+sentinel://s:26379/",
            "redis+sentinel://s/m",
            "redis+sentinel://s:port/m",
            "redis+sentinel://s:1,/m",
            "redis+sentinel://s:1/m/0",
            "redis+sentinel://s:1/m?db=2",
        ] {
            assert!(
                matches!(StoreUrl::parse(bad), Err(StoreError::InvalidConfig { .. })),
                "{bad:?} was taken"
            );
        }
    }

    #[test]
    fn the_wait_parameters_are_read_from_a_redis_url_and_others_are_kept() {
        let url = StoreUrl::parse("redis://10.0.0.5:6379/2?protocol=resp3&wait_replicas=1")
            .expect("redis url");
        assert_eq!(
            url,
            StoreUrl::Redis {
                url: "redis://10.0.0.5:6379/2?protocol=resp3".into(),
                wait: Some(WaitReplicas {
                    replicas: 1,
                    timeout: WaitReplicas::DEFAULT_TIMEOUT
                }),
            }
        );
        assert_eq!(StoreUrl::parse(&url.to_string()), Ok(url));
        assert_eq!(
            StoreUrl::parse("redis://h:1/?wait_replicas=0"),
            Ok(StoreUrl::Redis {
                url: "redis://h:1/".into(),
                wait: None
            })
        );
        for bad in [
            "redis://h:1/?wait_timeout_ms=100",
            "redis://h:1/?wait_replicas=one",
            "redis://h:1/?wait_replicas=1&wait_timeout_ms=0",
            "redis://h:1/?wait_replicas=-1",
        ] {
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
        let sentinel = StoreUrl::parse("redis+sentinel://:secret@s:26379/m").expect("url");
        assert_eq!(sentinel.to_string(), "redis+sentinel://:***@s:26379/m");
        assert!(!format!("{sentinel:?}").contains("secret"));
        let refused = StoreUrl::parse("redis+sentinel://:secret@s/m").expect_err("refused");
        assert!(!refused.to_string().contains("secret"), "{refused}");
    }
}
