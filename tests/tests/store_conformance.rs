//! One conformance suite for every location store: each check below runs against the
//! `MemoryStore` (on tokio's paused clock), against a `RedisStore` on a real redis-server, against
//! a `RedisStore` behind a real sentinel (a master, a replica that must confirm every write, and a
//! sentinel), and against an `EtcdStore` on a real etcd.

use std::sync::Arc;
use std::time::Duration;

use ferry::ids::NodeId;
use ferry::store::{
    BatchOutcome, Condition, EtcdStore, EtcdStoreConfig, LocationStore, MemoryStore, Op,
    RedisStore, RedisStoreConfig, StoreError, StoreUrl, Versioned, lease_key,
};
use ferry_tests::etcd_server::EtcdServer;
use ferry_tests::redis_sentinel::SentinelGroup;
use ferry_tests::redis_server::RedisServer;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The lease holder number the checks acquire with.
const HOLDER: u64 = 7;

fn node(name: &str) -> NodeId {
    NodeId::new(name).expect("valid node id")
}

/// Writes `value` under `key` unconditionally and returns its new version.
async fn put(store: &dyn LocationStore, key: &str, value: &'static str) -> u64 {
    match store.batch(vec![], vec![Op::put(key, value)]).await {
        Ok(BatchOutcome::Committed { revision }) => revision,
        other => panic!("unconditional put of {key} failed: {other:?}"),
    }
}

async fn get(store: &dyn LocationStore, key: &str) -> Option<Versioned> {
    store.get(key).await.expect("get")
}

async fn value_of(store: &dyn LocationStore, key: &str) -> Option<Vec<u8>> {
    get(store, key).await.map(|found| found.value.to_vec())
}

fn committed(outcome: Result<BatchOutcome, StoreError>) -> u64 {
    match outcome {
        Ok(BatchOutcome::Committed { revision }) => revision,
        other => panic!("expected the batch to commit, got {other:?}"),
    }
}

fn conflict(outcome: Result<BatchOutcome, StoreError>) -> String {
    match outcome {
        Ok(BatchOutcome::Conflict { key }) => key,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

/// Polls `lease_of` until the node has no live lease, failing after `bound`. With the memory
/// store the clock is paused, so the sleeps advance it without waiting.
async fn wait_for_expiry(store: &dyn LocationStore, node: &NodeId, bound: Duration) {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if store.lease_of(node).await.expect("lease_of").is_none() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease of {node} was still live after {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads every key under `prefix`, page by page, and checks each page on the way.
async fn scan_all(store: &dyn LocationStore, prefix: &str, limit: usize) -> Vec<(String, u64)> {
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .scan(prefix, after.as_deref(), limit)
            .await
            .expect("scan");
        assert!(page.items.len() <= limit.max(1), "page over its limit");
        for (key, found) in &page.items {
            assert!(key.starts_with(prefix), "{key} is outside prefix {prefix}");
            seen.push((key.clone(), found.version));
        }
        match page.next {
            Some(next) => {
                assert_eq!(Some(&next), page.items.last().map(|(key, _)| key));
                after = Some(next);
            }
            None => return seen,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checks, each run against every store

async fn failing_condition_applies_nothing_and_names_its_key(store: &dyn LocationStore) {
    let a = put(store, "a", "a1").await;
    put(store, "x", "x1").await;

    let ops = || vec![Op::put("a", "a2"), Op::put("c", "c1"), Op::delete("x")];
    let key = conflict(
        store
            .batch(
                vec![Condition::version("a", a), Condition::absent("x")],
                ops(),
            )
            .await,
    );
    assert_eq!(key, "x", "the conflict names the condition that failed");
    assert_eq!(value_of(store, "a").await.as_deref(), Some(&b"a1"[..]));
    assert_eq!(get(store, "a").await.map(|v| v.version), Some(a));
    assert_eq!(value_of(store, "c").await, None, "no op of a failed batch");
    assert_eq!(value_of(store, "x").await.as_deref(), Some(&b"x1"[..]));

    let revision = committed(
        store
            .batch(
                vec![Condition::version("a", a), Condition::absent("c")],
                ops(),
            )
            .await,
    );
    let a2 = get(store, "a").await.expect("a after commit");
    let c1 = get(store, "c").await.expect("c after commit");
    assert_eq!((&a2.value[..], a2.version), (&b"a2"[..], revision));
    assert_eq!((&c1.value[..], c1.version), (&b"c1"[..], revision));
    assert_eq!(get(store, "x").await, None);
}

async fn a_stale_version_loses(store: &dyn LocationStore) {
    let read = put(store, "room/1", "owner=n1").await;
    // Two writers read the same version; the first to write wins.
    let first = committed(
        store
            .batch(
                vec![Condition::version("room/1", read)],
                vec![Op::put("room/1", "owner=n2")],
            )
            .await,
    );
    assert!(first > read);
    let key = conflict(
        store
            .batch(
                vec![Condition::version("room/1", read)],
                vec![Op::put("room/1", "owner=n3")],
            )
            .await,
    );
    assert_eq!(key, "room/1");
    let now = get(store, "room/1").await.expect("room/1");
    assert_eq!((&now.value[..], now.version), (&b"owner=n2"[..], first));
    // A version condition on a key that does not exist never holds.
    assert_eq!(
        conflict(
            store
                .batch(vec![Condition::version("nobody", 1)], vec![])
                .await
        ),
        "nobody"
    );
}

async fn an_absent_condition_creates_exactly_once(store: &dyn LocationStore) {
    let create = || {
        store.batch(
            vec![Condition::absent("spot/lobby")],
            vec![Op::put("spot/lobby", "created")],
        )
    };
    let revision = committed(create().await);
    assert_eq!(conflict(create().await), "spot/lobby");
    assert_eq!(
        get(store, "spot/lobby").await.map(|v| v.version),
        Some(revision)
    );
}

async fn delete_then_recreate_gets_a_new_higher_version(store: &dyn LocationStore) {
    let first = put(store, "k", "one").await;
    committed(
        store
            .batch(vec![Condition::version("k", first)], vec![Op::delete("k")])
            .await,
    );
    assert_eq!(get(store, "k").await, None);
    assert_eq!(
        conflict(
            store
                .batch(
                    vec![Condition::version("k", first)],
                    vec![Op::put("k", "x")]
                )
                .await
        ),
        "k",
        "the version of a deleted key is gone with it"
    );
    let second = committed(
        store
            .batch(vec![Condition::absent("k")], vec![Op::put("k", "one")])
            .await,
    );
    assert!(second > first, "recreated at {second}, first was {first}");
    // Same value, new version: a writer holding the old version cannot mistake it (no ABA).
    assert_eq!(
        conflict(
            store
                .batch(
                    vec![Condition::version("k", first)],
                    vec![Op::put("k", "y")]
                )
                .await
        ),
        "k"
    );
    // Deleting a key that does not exist is allowed.
    committed(store.batch(vec![], vec![Op::delete("never-was")]).await);
}

async fn revisions_grow_across_keys_and_empty_batches_write_nothing(store: &dyn LocationStore) {
    let mut last = 0;
    for key in ["r1", "r2", "r1", "r3"] {
        let revision = put(store, key, "v").await;
        assert!(revision > last, "revision {revision} after {last}");
        last = revision;
    }
    // Conditions only: checks them, writes nothing, reports the current revision.
    let checked = committed(
        store
            .batch(vec![Condition::version("r3", last)], vec![])
            .await,
    );
    assert_eq!(checked, last);
    assert!(put(store, "r4", "v").await > last);
}

async fn values_and_keys_round_trip_exactly(store: &dyn LocationStore) {
    let binary: Vec<u8> = (0..=255u8).rev().chain([0, 0, 255]).collect();
    let keys = ["unit/ünïcode ключ", "unit/with space", "unit/empty"];
    committed(
        store
            .batch(
                vec![],
                vec![
                    Op::put(keys[0], binary.clone()),
                    Op::put(keys[1], "text"),
                    Op::put(keys[2], ""),
                ],
            )
            .await,
    );
    assert_eq!(value_of(store, keys[0]).await, Some(binary));
    assert_eq!(
        value_of(store, keys[1]).await.as_deref(),
        Some(&b"text"[..])
    );
    assert_eq!(value_of(store, keys[2]).await.as_deref(), Some(&b""[..]));
    let mut sorted = keys.map(str::to_owned).to_vec();
    sorted.sort();
    let scanned: Vec<String> = scan_all(store, "unit/", 10)
        .await
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(scanned, sorted);
}

async fn scans_page_in_key_order_and_continue_with_the_cursor(store: &dyn LocationStore) {
    let inside = [
        "units/07", "units/01", "units/10", "units/03", "units/02", "units/09", "units/04",
    ];
    let outside = ["unit", "units", "units0", "other/units/01", "t"];
    let mut versions = Vec::new();
    for key in inside.iter().chain(&outside) {
        versions.push((key.to_string(), put(store, key, "v").await));
    }
    let mut expected: Vec<(String, u64)> = versions
        .into_iter()
        .filter(|(key, _)| key.starts_with("units/"))
        .collect();
    expected.sort();

    for limit in [1, 3, 7, 100] {
        assert_eq!(
            scan_all(store, "units/", limit).await,
            expected,
            "page size {limit}"
        );
    }
    // Exactly one full page: nothing left to continue with.
    let page = store.scan("units/", None, 7).await.expect("scan");
    assert_eq!(page.items.len(), 7);
    assert_eq!(page.next, None);
    // A limit of 0 still makes progress.
    let page = store.scan("units/", None, 0).await.expect("scan");
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next.as_deref(), Some("units/01"));
    // A cursor whose key was deleted meanwhile still continues after it.
    committed(store.batch(vec![], vec![Op::delete("units/03")]).await);
    let page = store
        .scan("units/", Some("units/03"), 2)
        .await
        .expect("scan");
    let keys: Vec<&str> = page.items.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["units/04", "units/07"]);
    // An empty prefix scans everything; a prefix with no keys gives an empty, final page.
    assert_eq!(
        scan_all(store, "", 4).await.len(),
        inside.len() + outside.len() - 1
    );
    let empty = store.scan("nothing/", None, 5).await.expect("scan");
    assert!(empty.items.is_empty() && empty.next.is_none());
}

async fn a_scan_page_is_one_consistent_snapshot(store: &dyn LocationStore) {
    // A token moves between two keys, one atomic batch per move; every page must see it in
    // exactly one place, never in both and never in neither.
    put(store, "token/a", "token").await;
    let moves = 200;
    let writer = async {
        let mut at = "token/a";
        for _ in 0..moves {
            let to = if at == "token/a" {
                "token/b"
            } else {
                "token/a"
            };
            let version = get(store, at).await.expect("token").version;
            committed(
                store
                    .batch(
                        vec![Condition::version(at, version), Condition::absent(to)],
                        vec![Op::delete(at), Op::put(to, "token")],
                    )
                    .await,
            );
            at = to;
            tokio::task::yield_now().await;
        }
    };
    let reader = async {
        for _ in 0..moves {
            let page = store.scan("token/", None, 10).await.expect("scan");
            assert_eq!(page.items.len(), 1, "a page saw {:?}", page.items);
            tokio::task::yield_now().await;
        }
    };
    tokio::join!(writer, reader);
}

async fn leases_expire_and_cannot_be_renewed_after(store: &dyn LocationStore) {
    let n1 = node("n1");
    let ttl = Duration::from_millis(300);
    let lease = store
        .acquire_lease(&n1, HOLDER, ttl)
        .await
        .expect("acquire");
    assert_eq!(lease.node, n1);
    assert_eq!(lease.ttl, ttl);
    let live = store
        .lease_of(&n1)
        .await
        .expect("lease_of")
        .expect("live lease");
    assert_eq!(live.generation, lease.generation);
    assert_eq!(
        (lease.holder, live.holder),
        (HOLDER, HOLDER),
        "the lease names its holder"
    );
    store.renew_lease(&lease).await.expect("renew while live");
    let renewed = store
        .lease_of(&n1)
        .await
        .expect("lease_of")
        .expect("live lease");
    assert_eq!(renewed, lease, "a renewal keeps the lease as it was");

    wait_for_expiry(store, &n1, Duration::from_secs(5)).await;
    match store.renew_lease(&lease).await {
        Err(StoreError::LeaseLost { node, generation }) => {
            assert_eq!((node, generation), (n1.clone(), lease.generation));
        }
        other => panic!("renewing an expired lease must be LeaseLost, got {other:?}"),
    }
    let next = store
        .acquire_lease(&n1, HOLDER, ttl)
        .await
        .expect("acquire again");
    assert!(next.generation > lease.generation);
}

async fn a_new_generation_supersedes_the_old_one(store: &dyn LocationStore) {
    let n1 = node("n1");
    let n2 = node("n2");
    let ttl = Duration::from_secs(30);
    let old = store
        .acquire_lease(&n1, HOLDER, ttl)
        .await
        .expect("acquire");
    let other = store
        .acquire_lease(&n2, HOLDER, ttl)
        .await
        .expect("acquire n2");
    let new = store
        .acquire_lease(&n1, HOLDER, ttl)
        .await
        .expect("acquire again");
    assert_eq!(new.generation, old.generation + 1);

    assert!(matches!(
        store.renew_lease(&old).await,
        Err(StoreError::LeaseLost { generation, .. }) if generation == old.generation
    ));
    store.renew_lease(&new).await.expect("the new lease renews");
    // Releasing the superseded lease must not end the new one.
    store.release_lease(&old).await.expect("release old");
    let live = store
        .lease_of(&n1)
        .await
        .expect("lease_of")
        .expect("still live");
    assert_eq!(live.generation, new.generation);

    store.release_lease(&new).await.expect("release");
    assert_eq!(store.lease_of(&n1).await.expect("lease_of"), None);
    assert!(matches!(
        store.renew_lease(&new).await,
        Err(StoreError::LeaseLost { .. })
    ));
    // Generations keep counting after a release, and other nodes are untouched.
    let again = store
        .acquire_lease(&n1, HOLDER, ttl)
        .await
        .expect("acquire");
    assert_eq!(again.generation, new.generation + 1);
    let n2_live = store
        .lease_of(&n2)
        .await
        .expect("lease_of")
        .expect("n2 live");
    assert_eq!(n2_live.generation, other.generation);
}

// ---------------------------------------------------------------------------------------------
// Running the checks against each store

async fn redis_store(server: &RedisServer, prefix: &str) -> RedisStore {
    RedisStore::connect(&server.url(), RedisStoreConfig::new(prefix))
        .await
        .expect("connect to the test redis-server")
}

/// A store on the master the group's sentinel names, each write confirmed by one replica.
async fn sentinel_store(group: &SentinelGroup, prefix: &str) -> RedisStore {
    let url = format!("{}?wait_replicas=1&wait_timeout_ms=500", group.url());
    let Ok(StoreUrl::RedisSentinel { target, wait }) = StoreUrl::parse(&url) else {
        panic!("{url} is a sentinel url");
    };
    let config = RedisStoreConfig {
        op_timeout: Duration::from_secs(1),
        wait,
        ..RedisStoreConfig::new(prefix)
    };
    RedisStore::connect_sentinel(&target, config)
        .await
        .expect("connect through the sentinel")
}

async fn etcd_store(server: &EtcdServer, prefix: &str) -> EtcdStore {
    EtcdStore::connect(&[server.endpoint()], EtcdStoreConfig::new(prefix))
        .await
        .expect("connect to the test etcd")
}

/// An owner's write carries its lease: it applies while that lease is live and current, and
/// a process whose lease was superseded, or released, changes nothing.
async fn an_owners_write_needs_its_lease_live_and_current(store: &dyn LocationStore) {
    let n1 = node("n1");
    let ttl = Duration::from_secs(30);
    let written = |value: &'static str| vec![Op::put("room/fenced", value)];
    let old = store
        .acquire_lease(&n1, HOLDER, ttl)
        .await
        .expect("acquire");
    let first = store
        .batch(
            vec![Condition::lease(&old)],
            written("by the first process"),
        )
        .await
        .expect("batch");
    assert!(matches!(first, BatchOutcome::Committed { .. }), "{first:?}");

    // Another process takes the node's lease: the first one's writes are refused.
    let new = store
        .acquire_lease(&n1, HOLDER + 1, ttl)
        .await
        .expect("acquire again");
    let stale = store
        .batch(vec![Condition::lease(&old)], written("by a stale owner"))
        .await
        .expect("batch");
    assert_eq!(
        stale,
        BatchOutcome::Conflict {
            key: lease_key(&n1)
        }
    );
    let kept = store.get("room/fenced").await.expect("get").expect("kept");
    assert_eq!(kept.value.as_ref(), b"by the first process");
    let current = store
        .batch(
            vec![
                Condition::version("room/fenced", kept.version),
                Condition::lease(&new),
            ],
            written("by the second process"),
        )
        .await
        .expect("batch");
    assert!(
        matches!(current, BatchOutcome::Committed { .. }),
        "{current:?}"
    );

    // A released lease fences like a superseded one.
    store.release_lease(&new).await.expect("release");
    let released = store
        .batch(vec![Condition::lease(&new)], written("after the release"))
        .await
        .expect("batch");
    assert_eq!(
        released,
        BatchOutcome::Conflict {
            key: lease_key(&n1)
        }
    );
    let last = store.get("room/fenced").await.expect("get").expect("kept");
    assert_eq!(last.value.as_ref(), b"by the second process");
}

/// Many batches in one call: each is answered on its own, a conflict or a stale lease in one
/// never changes another, and of two with the same condition exactly one commits.
async fn batches_answer_each_on_its_own(store: &dyn LocationStore) {
    let a = put(store, "a", "a1").await;
    let b = put(store, "b", "b1").await;
    let e = put(store, "e", "e1").await;
    put(store, "f", "f1").await;
    let lease = store
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(30))
        .await
        .expect("acquire");
    let stale_lease = ferry::store::Lease {
        generation: lease.generation + 1,
        ..lease.clone()
    };
    let answers = store
        .batches(vec![
            (vec![Condition::version("a", a)], vec![Op::put("a", "a2")]),
            (vec![Condition::version("b", a)], vec![Op::put("b", "b2")]),
            (
                vec![Condition::absent("c"), Condition::lease(&lease)],
                vec![Op::put("c", "c1")],
            ),
            (vec![Condition::version("a", a)], vec![Op::put("a", "a3")]),
            (
                vec![Condition::absent("d"), Condition::lease(&stale_lease)],
                vec![Op::put("d", "d1")],
            ),
            (vec![Condition::version("e", e)], vec![]),
            (vec![], vec![Op::delete("f")]),
        ])
        .await;
    let [
        first_a,
        conflicting_b,
        c,
        second_a,
        stale,
        read_only,
        delete_f,
    ]: [_; 7] = answers.try_into().expect("one answer per batch");

    assert_eq!(conflict(conflicting_b), "b");
    let c = committed(c);
    assert_eq!(get(store, "c").await.map(|v| v.version), Some(c));
    assert_eq!(conflict(stale), lease_key(&node("n1")));
    assert_eq!(get(store, "d").await, None, "a batch refused for its lease");
    assert_eq!(value_of(store, "b").await.as_deref(), Some(&b"b1"[..]));
    committed(read_only);
    assert_eq!(get(store, "e").await.map(|v| v.version), Some(e));
    committed(delete_f);
    assert_eq!(get(store, "f").await, None);

    // Both asked for `a` at the same version: one won, the other found it changed.
    let (won, value) = match (first_a, second_a) {
        (Ok(BatchOutcome::Committed { revision }), lost) => {
            assert_eq!(conflict(lost), "a");
            (revision, &b"a2"[..])
        }
        (lost, Ok(BatchOutcome::Committed { revision })) => {
            assert_eq!(conflict(lost), "a");
            (revision, &b"a3"[..])
        }
        other => panic!("exactly one write of a commits: {other:?}"),
    };
    let now = get(store, "a").await.expect("a");
    assert_eq!((&now.value[..], now.version), (value, won));
    assert!(won > b && c > b);
}

async fn no_batches_get_no_answers(store: &dyn LocationStore) {
    assert_eq!(store.batches(Vec::new()).await, Vec::new());
}

macro_rules! conformance {
    ($($check:ident),+ $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test(start_paused = true)]
                async fn $check() {
                    super::$check(&MemoryStore::new()).await;
                }
            )+
        }

        mod redis {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    let Some(server) = RedisServer::start_or_skip().await else {
                        return;
                    };
                    super::$check(&redis_store(&server, "conformance").await).await;
                }
            )+
        }

        mod redis_sentinel {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    let Some(group) = SentinelGroup::start_or_skip(1).await else {
                        return;
                    };
                    super::$check(&sentinel_store(&group, "conformance").await).await;
                }
            )+
        }

        mod etcd {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    let Some(server) = EtcdServer::start_or_skip().await else {
                        return;
                    };
                    super::$check(&etcd_store(&server, "conformance").await).await;
                }
            )+
        }
    };
}

conformance!(
    failing_condition_applies_nothing_and_names_its_key,
    a_stale_version_loses,
    an_absent_condition_creates_exactly_once,
    delete_then_recreate_gets_a_new_higher_version,
    revisions_grow_across_keys_and_empty_batches_write_nothing,
    values_and_keys_round_trip_exactly,
    scans_page_in_key_order_and_continue_with_the_cursor,
    a_scan_page_is_one_consistent_snapshot,
    leases_expire_and_cannot_be_renewed_after,
    a_new_generation_supersedes_the_old_one,
    an_owners_write_needs_its_lease_live_and_current,
    batches_answer_each_on_its_own,
    no_batches_get_no_answers,
);

// ---------------------------------------------------------------------------------------------
// Memory store only

#[tokio::test(start_paused = true)]
async fn memory_lease_lives_exactly_its_ttl_and_renewal_extends_it() {
    let store = MemoryStore::new();
    let n1 = node("n1");
    let ttl = Duration::from_secs(10);
    let lease = store
        .acquire_lease(&n1, HOLDER, ttl)
        .await
        .expect("acquire");

    tokio::time::advance(Duration::from_secs(9)).await;
    store.renew_lease(&lease).await.expect("renew at 9 s");
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(
        store.lease_of(&n1).await.expect("lease_of").is_some(),
        "renewed at 9 s, so live at 18 s"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        store.lease_of(&n1).await.expect("lease_of"),
        None,
        "expired at 19 s"
    );
    assert!(matches!(
        store.renew_lease(&lease).await,
        Err(StoreError::LeaseLost { .. })
    ));
}

#[tokio::test]
async fn memory_clones_share_one_store() {
    let node_a = MemoryStore::new();
    let node_b = node_a.clone();
    let version = put(&node_a, "spot/1", "n-a").await;
    assert_eq!(
        get(&node_b, "spot/1").await.map(|v| v.version),
        Some(version)
    );
    let lease = node_b
        .acquire_lease(&node("b"), HOLDER, Duration::from_secs(5))
        .await
        .expect("acquire");
    assert_eq!(
        node_a.lease_of(&node("b")).await.expect("lease_of"),
        Some(lease)
    );
    // Two stores made separately share nothing.
    assert_eq!(get(&MemoryStore::new(), "spot/1").await, None);
}

// ---------------------------------------------------------------------------------------------
// Redis store only

/// A server that forgot the scripts (restarted, or its script cache flushed) runs none of a
/// pipeline's batches: they go again behind a load of the script, each answered once.
#[tokio::test]
async fn redis_batches_are_sent_again_once_after_the_server_forgot_the_script() {
    let Some(server) = RedisServer::start_or_skip().await else {
        return;
    };
    let store = redis_store(&server, "flushed").await;
    let a = put(&store, "a", "a1").await;
    let client = ::redis::Client::open(server.url()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let () = ::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("SCRIPT FLUSH");
    let answers = store
        .batches(vec![
            (vec![Condition::version("a", a)], vec![Op::put("a", "a2")]),
            (vec![Condition::version("a", a)], vec![Op::put("a", "a3")]),
            (vec![Condition::absent("b")], vec![Op::put("b", "b1")]),
        ])
        .await;
    let [first, second, b]: [_; 3] = answers.try_into().expect("three answers");
    let first = committed(first);
    assert_eq!(conflict(second), "a", "run once, in order, not twice");
    let b = committed(b);
    let now = get(&store, "a").await.expect("a");
    assert_eq!((&now.value[..], now.version), (&b"a2"[..], first));
    assert_eq!(get(&store, "b").await.map(|v| v.version), Some(b));
}

#[tokio::test]
async fn redis_stores_with_different_prefixes_are_isolated() {
    let Some(server) = RedisServer::start_or_skip().await else {
        return;
    };
    // "tenant" and "tenant:k" would overlap under naive concatenation ("tenant:k:rev").
    let a = redis_store(&server, "tenant").await;
    let b = redis_store(&server, "tenant:k").await;
    let a_rev = put(&a, "rev", "from a").await;
    put(&a, "shared", "a").await;
    let b_rev = put(&b, "shared", "b").await;
    assert_eq!(b_rev, 1, "b has its own revision counter");
    assert!(a_rev >= 1);
    assert_eq!(value_of(&a, "shared").await.as_deref(), Some(&b"a"[..]));
    assert_eq!(value_of(&b, "shared").await.as_deref(), Some(&b"b"[..]));
    assert_eq!(value_of(&b, "rev").await, None);
    assert_eq!(
        scan_all(&b, "", 10)
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>(),
        ["shared"]
    );
    assert_eq!(scan_all(&a, "", 10).await.len(), 2);

    let lease = a
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(30))
        .await
        .expect("acquire");
    assert_eq!(b.lease_of(&node("n1")).await.expect("lease_of"), None);
    let b_lease = b
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(30))
        .await
        .expect("acquire");
    assert_eq!(b_lease.generation, 1, "generations are per store");
    a.renew_lease(&lease)
        .await
        .expect("a's lease is unaffected by b");
}

/// Whether a store error says the store is down (as opposed to a refusal or a reset).
fn is_down(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Unavailable { .. } | StoreError::Timeout { .. }
    )
}

/// With the store's server stopped: get, a conditional batch, a lease renewal and a scan each end
/// with a typed "down" error, none hangs. Returns the get's error.
async fn calls_fail_as_down(
    store: &dyn LocationStore,
    version: u64,
    lease: &ferry::store::Lease,
) -> StoreError {
    // The outer bound only keeps a broken build from hanging the suite.
    let bound = Duration::from_secs(10);
    let got = tokio::time::timeout(bound, store.get("k"))
        .await
        .expect("get returned");
    let batched = tokio::time::timeout(
        bound,
        store.batch(
            vec![Condition::version("k", version)],
            vec![Op::put("k", "w")],
        ),
    )
    .await
    .expect("batch returned");
    assert!(batched.as_ref().is_err_and(is_down), "batch: {batched:?}");
    let renewed = tokio::time::timeout(bound, store.renew_lease(lease))
        .await
        .expect("renew returned");
    assert!(renewed.as_ref().is_err_and(is_down), "renew: {renewed:?}");
    let scanned = tokio::time::timeout(bound, store.scan("", None, 10))
        .await
        .expect("scan returned");
    assert!(scanned.as_ref().is_err_and(is_down), "scan: {scanned:?}");
    match got {
        Err(error) if is_down(&error) => error,
        other => panic!("get: {other:?}"),
    }
}

#[tokio::test]
async fn redis_going_away_gives_typed_errors_not_hangs() {
    let Some(mut server) = RedisServer::start_or_skip().await else {
        return;
    };
    let config = RedisStoreConfig {
        op_timeout: Duration::from_secs(1),
        ..RedisStoreConfig::new("gone")
    };
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    let version = put(&store, "k", "v").await;
    let lease = store
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(30))
        .await
        .expect("acquire");

    server.stop();

    let got = calls_fail_as_down(&store, version, &lease).await;
    // And the error tells the operator what to do.
    assert!(got.to_string().contains("redis-server"), "{got}");
}

#[tokio::test]
async fn redis_connect_to_a_missing_server_is_a_typed_error() {
    let Some(mut server) = RedisServer::start_or_skip().await else {
        return;
    };
    let url = server.url();
    server.stop();
    let config = RedisStoreConfig {
        op_timeout: Duration::from_secs(1),
        ..RedisStoreConfig::new("nobody")
    };
    let result = RedisStore::connect(&url, config).await;
    assert!(
        matches!(
            result,
            Err(StoreError::Unavailable { .. } | StoreError::Timeout { .. })
        ),
        "{result:?}"
    );
    let bad = RedisStore::connect(&url, RedisStoreConfig::new("a{b}")).await;
    assert!(
        matches!(bad, Err(StoreError::InvalidConfig { .. })),
        "{bad:?}"
    );
    let bad = RedisStore::connect("not a url", RedisStoreConfig::new("p")).await;
    assert!(
        matches!(bad, Err(StoreError::InvalidConfig { .. })),
        "{bad:?}"
    );
}

#[tokio::test]
async fn a_redis_that_restarted_empty_is_refused_not_carried_on_with() {
    let Some(mut server) = RedisServer::start_or_skip().await else {
        return;
    };
    let config = RedisStoreConfig {
        op_timeout: Duration::from_secs(1),
        ..RedisStoreConfig::new("back")
    };
    let store = RedisStore::connect(&server.url(), config.clone())
        .await
        .expect("connect");
    let version = put(&store, "k", "v").await;
    let lease = store
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(30))
        .await
        .expect("acquire");
    server.stop();
    assert!(store.get("k").await.is_err(), "the server is down");
    server.restart().await.expect("restart on the same port");

    // The restarted server kept nothing (no persistence). Once the client reaches it again, it
    // tells that store from the one it knew: every call is refused, none finds a stale match.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match store.get("k").await {
            Err(StoreError::Reset { .. }) => break,
            Err(StoreError::Unavailable { .. } | StoreError::Timeout { .. }) => {
                assert!(tokio::time::Instant::now() < deadline, "never reconnected");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("a store that lost everything was carried on with: {other:?}"),
        }
    }
    let batched = store
        .batch(
            vec![Condition::version("k", version)],
            vec![Op::put("k", "w")],
        )
        .await;
    assert!(
        matches!(batched, Err(StoreError::Reset { .. })),
        "{batched:?}"
    );
    let created = store
        .batch(vec![Condition::absent("k")], vec![Op::put("k", "w")])
        .await;
    assert!(
        matches!(created, Err(StoreError::Reset { .. })),
        "{created:?}"
    );
    let renewed = store.renew_lease(&lease).await;
    assert!(
        matches!(renewed, Err(StoreError::Reset { .. })),
        "{renewed:?}"
    );
    let scanned = store.scan("", None, 10).await;
    assert!(
        matches!(scanned, Err(StoreError::Reset { .. })),
        "{scanned:?}"
    );
    let error = store.get("k").await.expect_err("refused");
    assert!(error.to_string().contains("restart every node"), "{error}");

    // A client that connects now starts afresh on it, and the old one still refuses it.
    let fresh = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect afresh");
    assert_ne!(fresh.epoch(), store.epoch());
    assert_eq!(fresh.get("k").await.expect("get"), None);
    assert_eq!(put(&fresh, "k", "again").await, 1);
    assert!(matches!(
        store.get("k").await,
        Err(StoreError::Reset { .. })
    ));
}

#[tokio::test]
async fn a_redis_that_lost_acknowledged_writes_is_refused_even_with_its_epoch() {
    let Some(mut server) = RedisServer::start_persistent_or_skip().await else {
        return;
    };
    let config = RedisStoreConfig {
        op_timeout: Duration::from_secs(1),
        ..RedisStoreConfig::new("lost")
    };
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    let first = put(&store, "k", "v1").await;
    // What the store held then, as a replica that lagged behind would hold it.
    let behind = server.copy_data().expect("copy of the data");
    let second = put(&store, "k", "v2").await;
    assert!(second > first);
    server
        .restart_from(&behind)
        .await
        .expect("restart from the older data");

    // The epoch is the same, but the revision went back: the version `first` would match again,
    // for a record that was since written over. The client refuses rather than match it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match store
            .batch(
                vec![Condition::version("k", first)],
                vec![Op::put("k", "stale")],
            )
            .await
        {
            Err(StoreError::Reset { .. }) => break,
            Err(StoreError::Unavailable { .. } | StoreError::Timeout { .. }) => {
                assert!(tokio::time::Instant::now() < deadline, "never reconnected");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("a write matched a version from before the loss: {other:?}"),
        }
    }
    assert!(matches!(
        store.get("k").await,
        Err(StoreError::Reset { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Redis with replicas and a sentinel

/// Reads `k` until the store answers, taking only "down" errors meanwhile, within `bound`.
async fn get_once_up(store: &dyn LocationStore, key: &str, bound: Duration) -> Option<Versioned> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match store.get(key).await {
            Ok(found) => return found,
            Err(error) if is_down(&error) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "still down after {bound:?}: {error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("{key}: {other}"),
        }
    }
}

#[tokio::test]
async fn a_sentinel_store_follows_a_forced_failover_with_what_the_replica_confirmed() {
    let Some(group) = SentinelGroup::start_or_skip(1).await else {
        return;
    };
    let store = sentinel_store(&group, "failover").await;
    let version = put(&store, "k", "before").await;
    let lease = store
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(60))
        .await
        .expect("acquire");
    let old = group.master().await;
    let new = group.failover().await;
    assert_ne!(old, new, "the replica took over");

    // The new master has no replica online until the sentinel turns the old master into one, and
    // the old master is not master any more: calls are refused meanwhile, none answered from the
    // old data. Then the store answers from the new master, with the confirmed write.
    let found = get_once_up(&store, "k", Duration::from_secs(40))
        .await
        .expect("the write the replica confirmed");
    assert_eq!((&found.value[..], found.version), (&b"before"[..], version));
    assert_eq!(group.role(old).await.as_deref(), Some("slave"));
    // A replica that just synced confirms writes once the master hears from it.
    group.await_replicas_online(1).await;
    let after = committed(
        store
            .batch(
                vec![Condition::version("k", version)],
                vec![Op::put("k", "after")],
            )
            .await,
    );
    assert!(after > version);
    store
        .renew_lease(&lease)
        .await
        .expect("the lease taken before the failover renews");
    // Another client that connects now, through the sentinel, finds the same store.
    let fresh = sentinel_store(&group, "failover").await;
    assert_eq!(fresh.epoch(), store.epoch());
    assert_eq!(get(&fresh, "k").await.map(|v| v.version), Some(after));
}

#[tokio::test]
async fn a_master_short_of_its_replicas_refuses_every_call_and_a_replica_refuses_to_serve() {
    let Some(mut group) = SentinelGroup::start_or_skip(1).await else {
        return;
    };
    let master = group.master().await;
    let replica = 1 - master;
    let url = |i: usize| {
        format!(
            "{}?wait_replicas=1&wait_timeout_ms=300",
            group.server(i).url()
        )
    };
    let config = |url: &str| {
        let Ok(StoreUrl::Redis { url, wait }) = StoreUrl::parse(url) else {
            panic!("{url} is a redis url");
        };
        (
            url,
            RedisStoreConfig {
                op_timeout: Duration::from_secs(1),
                wait,
                ..RedisStoreConfig::new("short")
            },
        )
    };
    // A store pointed at the replica does not read from it.
    let (at_replica, replica_config) = config(&url(replica));
    let refused = RedisStore::connect(&at_replica, replica_config).await;
    assert!(
        matches!(&refused, Err(StoreError::Unavailable { reason }) if reason.contains("replica")),
        "{refused:?}"
    );

    let (at_master, master_config) = config(&url(master));
    let store = RedisStore::connect(&at_master, master_config)
        .await
        .expect("connect to the master");
    let version = put(&store, "k", "v").await;
    let lease = store
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(60))
        .await
        .expect("acquire");

    group.server(replica).pause();
    // Still online in the master's eyes, but it confirms nothing: the write is applied and not
    // confirmed, so its outcome is unknown (and a re-read finds it).
    let unconfirmed = store
        .batch(
            vec![Condition::version("k", version)],
            vec![Op::put("k", "unconfirmed")],
        )
        .await;
    match unconfirmed {
        Err(StoreError::NotReplicated {
            op: "batch",
            confirmed: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("a write no replica confirmed: {other:?}"),
    }
    group.server(replica).resume();
    let applied = get(&store, "k").await.expect("k");
    assert_eq!(&applied.value[..], b"unconfirmed");
    assert!(applied.version > version);
    group.await_replicas_online(1).await;

    // Without its replica the master refuses every call, writes and reads, and does nothing.
    group.stop(replica);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let few = loop {
        match store.get("k").await {
            Err(StoreError::Unavailable { reason }) if reason.contains("FERRYFEW") => break reason,
            // The master notices the replica gone as its connection closes.
            Ok(_) => assert!(tokio::time::Instant::now() < deadline, "never refused"),
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(few.contains("0 of the 1 replicas"), "{few}");
    let refused = store
        .batch(
            vec![Condition::version("k", applied.version)],
            vec![Op::put("k", "refused")],
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Unavailable { .. })),
        "{refused:?}"
    );
    let renewed = store.renew_lease(&lease).await;
    assert!(
        matches!(renewed, Err(StoreError::Unavailable { .. })),
        "{renewed:?}"
    );

    group.restart_as_replica(replica).await;
    group.await_replicas_online(1).await;
    let found = get_once_up(&store, "k", Duration::from_secs(10))
        .await
        .expect("k");
    assert_eq!(
        (&found.value[..], found.version),
        (&b"unconfirmed"[..], applied.version),
        "the refused write did nothing"
    );
    store.renew_lease(&lease).await.expect("renews again");
}

/// Batches sent together are confirmed together: when no replica confirms, every batch that
/// wrote has an unknown outcome (as one batch alone would), and a conflict is still a conflict.
#[tokio::test]
async fn batches_no_replica_confirmed_are_unknown_and_their_conflicts_stay_conflicts() {
    let Some(group) = SentinelGroup::start_or_skip(1).await else {
        return;
    };
    let store = sentinel_store(&group, "unconfirmed").await;
    let a = put(&store, "a", "a1").await;
    let master = group.master().await;
    let replica = 1 - master;
    group.server(replica).pause();
    let answers = store
        .batches(vec![
            (vec![Condition::version("a", a)], vec![Op::put("a", "a2")]),
            (vec![Condition::version("a", 0)], vec![Op::put("a", "a3")]),
            (vec![Condition::absent("b")], vec![Op::put("b", "b1")]),
        ])
        .await;
    group.server(replica).resume();
    let [wrote_a, stale_a, wrote_b]: [_; 3] = answers.try_into().expect("three answers");
    for unconfirmed in [wrote_a, wrote_b] {
        assert!(
            matches!(
                unconfirmed,
                Err(StoreError::NotReplicated {
                    op: "batch",
                    wanted: 1,
                    ..
                })
            ),
            "a write no replica confirmed: {unconfirmed:?}"
        );
    }
    assert_eq!(conflict(stale_a), "a");
    // Applied on the master all the same: a re-read finds them, once the replica is back.
    group.await_replicas_online(1).await;
    let found = get_once_up(&store, "a", Duration::from_secs(10))
        .await
        .expect("a");
    assert_eq!(&found.value[..], b"a2");
    assert_eq!(value_of(&store, "b").await.as_deref(), Some(&b"b1"[..]));
}

// ---------------------------------------------------------------------------------------------
// etcd only

#[tokio::test]
async fn etcd_going_away_gives_typed_errors_not_hangs() {
    let Some(mut server) = EtcdServer::start_or_skip().await else {
        return;
    };
    let config = EtcdStoreConfig {
        op_timeout: Duration::from_secs(1),
        ..EtcdStoreConfig::new("gone")
    };
    let store = EtcdStore::connect(&[server.endpoint()], config.clone())
        .await
        .expect("connect");
    let version = put(&store, "k", "v").await;
    let lease = store
        .acquire_lease(&node("n1"), HOLDER, Duration::from_secs(30))
        .await
        .expect("acquire");
    server.stop();
    calls_fail_as_down(&store, version, &lease).await;
    let again = EtcdStore::connect(&[server.endpoint()], config).await;
    assert!(again.as_ref().is_err_and(is_down), "connect: {again:?}");
}

#[tokio::test]
async fn an_etcd_cluster_that_is_not_the_one_connected_to_is_refused() {
    let Some(first) = EtcdServer::start_or_skip().await else {
        return;
    };
    let Some(second) = EtcdServer::start_or_skip().await else {
        return;
    };
    // The client knows two endpoints; they turn out to be two clusters. Once the first stops,
    // the second answers, and the client tells it is not the store it wrote to.
    let mut first = first;
    let store = EtcdStore::connect(
        &[first.endpoint(), second.endpoint()],
        EtcdStoreConfig::new("epoch"),
    )
    .await
    .expect("connect");
    let version = put(&store, "k", "v").await;
    first.stop();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match store
            .batch(
                vec![Condition::version("k", version)],
                vec![Op::put("k", "w")],
            )
            .await
        {
            Err(StoreError::Reset { .. }) => break,
            // A call in flight on the stopped member fails; the next goes to the other.
            Err(StoreError::Unavailable { .. } | StoreError::Timeout { .. }) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never reached the other"
                );
            }
            other => panic!("another etcd cluster was carried on with: {other:?}"),
        }
    }
    assert!(matches!(
        store.get("k").await,
        Err(StoreError::Reset { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Both network stores

/// Polls `fut` once, so that what it sends is sent, and gives it back unfinished.
fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) {
    let waker = std::task::Waker::noop();
    let _ = std::pin::Pin::new(fut).poll(&mut std::task::Context::from_waker(waker));
}

/// A turn that holds its runtime thread (a long game tick, a blocking call in a handler) must not
/// hold the store's answers to every other task: they come on time from a thread of the store's
/// own. Here a task sends a store call and then holds its thread for three times the store's
/// timeout; the store's connection is then next in line on that thread, where no other thread can
/// take it over. Meanwhile another call from elsewhere must still be answered, and the held call
/// hears its answer once its task runs again. (A call of two round trips, the second sent only once
/// its task runs again, is late by then: the first `get` below has redis learn the script, so the
/// held one takes a single round trip.)
async fn a_held_runtime_thread_does_not_hold_the_answers(store: Arc<dyn LocationStore>) {
    put(&*store, "k", "v").await;
    store.get("k").await.expect("a first get");
    let holder = store.clone();
    let held = tokio::spawn(async move {
        let mut sent = Box::pin(holder.get("k"));
        poll_once(&mut sent);
        std::thread::sleep(Duration::from_secs(3));
        sent.await
    });
    // Long enough for the holder to be holding its thread.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = store.get("k").await;
    assert!(
        matches!(&got, Ok(Some(found)) if found.value.as_ref() == b"v"),
        "a call made while another task holds its thread: {got:?}"
    );
    held.await.expect("holder").expect("the held call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_answers_while_a_turn_holds_a_runtime_thread() {
    let Some(server) = RedisServer::start_or_skip().await else {
        return;
    };
    let config = RedisStoreConfig {
        op_timeout: Duration::from_secs(1),
        ..RedisStoreConfig::new("held")
    };
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    a_held_runtime_thread_does_not_hold_the_answers(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_answers_while_a_turn_holds_a_runtime_thread() {
    let Some(server) = EtcdServer::start_or_skip().await else {
        return;
    };
    let config = EtcdStoreConfig {
        op_timeout: Duration::from_secs(1),
        ..EtcdStoreConfig::new("held")
    };
    let store = EtcdStore::connect(&[server.endpoint()], config)
        .await
        .expect("connect");
    a_held_runtime_thread_does_not_hold_the_answers(Arc::new(store)).await;
}
