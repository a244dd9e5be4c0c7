//! The second witness beside the owner lease: what the mesh says about who is alive, and whether a
//! node may run turns past its lease.
//!
//! A lapsed lease alone does not make a node dead: the store may be what failed. So each node asks
//! its peers over the mesh, every probe period, whether they hear it, and:
//!
//! - it keeps running turns past the end of its lease only while every peer it knows answered a
//!   probe sent less than the peer grace ago (and never more than the outage limit past its lease):
//!   [`may_run`];
//! - it takes another node for dead only once that node's lease has lapsed *and* the mesh confirms
//!   it: the node said it stopped; or it has not been heard from for the grace plus a margin; or
//!   it was never heard from although its descriptor names this node among the peers it counts on
//!   (so it never got the answer it needed to run past its lease from this process, and what an
//!   earlier process of this node's id answered it ran out a grace after this one began); or, for
//!   a node that never heard of this one, its lease has been seen lapsed for the outage limit plus
//!   a TTL plus the margin: [`Witness::read`].
//!
//! A node that answers a probe first counts the asker among the peers it needs answers from, so
//! whoever has heard from a node is also one the node waits for. docs/reliability.md gives the
//! argument why this never lets two nodes run one unit's turns. Time comes in as a value: the
//! runtime passes its clock, a simulator its own.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ids::NodeId;

/// What the peers say about this node's right to run turns past its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouch {
    /// This node knows no peer: none can have heard from it, so only the outage limit applies.
    Alone,
    /// Every peer it must hear from answered; the earliest of those answers runs out then.
    Until(Instant),
}

/// How sure this node is that another node has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its lease is live, or the mesh may still hear it: its units are not to be touched.
    Suspected,
    /// Its lease lapsed and the mesh confirms it stopped: its units may be rebuilt.
    Dead,
}

/// A node whose lease has lapsed, as one membership read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lapsed {
    /// The node whose lease lapsed.
    pub node: NodeId,
    /// The version of its descriptor.
    pub version: u64,
    /// The lease generation its descriptor names.
    pub generation: u64,
    /// Whether its descriptor names the reader among the peers it counts on.
    pub counts_on_me: bool,
}

/// The timing a witness works with, from the node's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    /// How long an answered probe vouches for its sender.
    pub grace: Duration,
    /// The node's lease TTL.
    pub lease_ttl: Duration,
    /// The longest a node runs turns past its lease.
    pub outage_limit: Duration,
}

impl Times {
    /// Beyond the grace, what a node waits before it takes a silent peer for dead: covers the
    /// difference in pace between two machines' clocks and a probe's way there.
    pub fn margin(&self) -> Duration {
        self.grace / 2
    }
}

/// Whether no other node can take this node's units over yet at `now`: its lease is certainly held
/// (until `lease_until`, counted from the send of its last confirmed renewal), or it lapsed less
/// than the outage limit ago and every peer vouches for it (asked only then: it is the rare case).
/// Without a mesh (`meshed` false) no peer can vouch, and peers take a lapsed lease for death.
pub fn may_run(
    now: Instant,
    lease_until: Instant,
    meshed: bool,
    times: &Times,
    vouch: impl FnOnce() -> Vouch,
) -> bool {
    if now < lease_until {
        return true;
    }
    if !meshed || now >= lease_until + times.outage_limit {
        return false;
    }
    match vouch() {
        Vouch::Alone => true,
        Vouch::Until(end) => now < end,
    }
}

/// The mesh's account of each peer, kept by one node.
#[derive(Debug, Clone)]
pub struct Witness {
    /// What probe stamps count from: a probe carries its send time as nanoseconds since it, and
    /// its answer brings the stamp back. Earlier than every probe, so a peer that never answered
    /// vouches until then: certainly past.
    base: Instant,
    /// Per peer: the send time of the latest probe of ours it answered.
    confirmed: BTreeMap<NodeId, Instant>,
    /// Per peer: the latest proof it was alive and counting on us (an answer's send time, or
    /// when its probe reached us).
    heard: BTreeMap<NodeId, Instant>,
    /// Peers that probed us, with when they last did: they count on hearing from us.
    probers: BTreeMap<NodeId, Instant>,
    /// The peers of our last store read (live or lapsed, not dead).
    known: Vec<NodeId>,
    /// Since when we have seen each peer's lease lapsed.
    lapsed_since: BTreeMap<NodeId, Instant>,
    /// When the last store read began.
    last_read: Instant,
    /// Peers that told us they run no turns any more.
    ended: Vec<NodeId>,
    /// Nodes taken for dead at the last read, with their descriptor's version then: a rebuild is
    /// gated on it, so a node that came back (and wrote its descriptor again) is not rebuilt.
    dead: BTreeMap<NodeId, u64>,
    /// Every node ever taken for dead, with the highest lease generation it was taken for dead
    /// under: its probes are not vouched for any more (a later process of its id has a higher
    /// generation and is).
    condemned: BTreeMap<NodeId, u64>,
}

impl Witness {
    /// A witness that has heard from nobody yet, in a process that begins at `base` (now): a peer
    /// may still run on answers an earlier process of this node gave it, for a grace past `base`.
    pub fn new(base: Instant) -> Self {
        Witness {
            base,
            confirmed: BTreeMap::new(),
            heard: BTreeMap::new(),
            probers: BTreeMap::new(),
            known: Vec::new(),
            lapsed_since: BTreeMap::new(),
            last_read: base,
            ended: Vec::new(),
            dead: BTreeMap::new(),
            condemned: BTreeMap::new(),
        }
    }

    /// The stamp a probe sent at `now` carries.
    pub fn stamp(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// When the probe that carried `stamp` was sent; a stamp from the future (which no probe of
    /// ours carries) counts as sent now.
    fn sent_at(&self, stamp: u64, now: Instant) -> Instant {
        (self.base + Duration::from_nanos(stamp)).min(now)
    }

    /// A probe from `peer`, sent under its lease `generation`, arrived at `now`. Whether to vouch
    /// for it: not if it was taken for dead under that generation.
    pub fn probed_by(&mut self, peer: &NodeId, generation: u64, now: Instant) -> bool {
        if self.condemned.get(peer).is_some_and(|g| *g >= generation) {
            return false;
        }
        self.probers.insert(peer.clone(), now);
        raise(&mut self.heard, peer, now);
        true
    }

    /// `peer` answered the probe stamped `stamp`; `running` is false once it runs no turns.
    pub fn answered(&mut self, peer: &NodeId, stamp: u64, running: bool, now: Instant) {
        let sent = self.sent_at(stamp, now);
        raise(&mut self.confirmed, peer, sent);
        raise(&mut self.heard, peer, sent);
        if !running && !self.ended.contains(peer) {
            self.ended.push(peer.clone());
        }
    }

    /// How long before `now` this node last heard from `peer` (a probe, or an answer to one),
    /// if it ever did.
    pub fn heard_from(&self, peer: &NodeId, now: Instant) -> Option<Duration> {
        self.heard
            .get(peer)
            .map(|at| now.saturating_duration_since(*at))
    }

    /// The peers to probe and to hear from: those of the last store read, and those that probed.
    pub fn peers(&self) -> Vec<NodeId> {
        let mut peers = self.known.clone();
        for prober in self.probers.keys() {
            if !peers.contains(prober) {
                peers.push(prober.clone());
            }
        }
        peers
    }

    /// Until when every peer this node must hear from vouches for it.
    pub fn vouch(&self, grace: Duration) -> Vouch {
        let mut until: Option<Instant> = None;
        for peer in self
            .known
            .iter()
            .chain(self.probers.keys())
            .filter(|p| !self.ended.contains(p))
        {
            // A peer that never answered vouches for nothing: the earliest possible instant.
            let end = self
                .confirmed
                .get(peer)
                .map_or(self.base, |sent| *sent + grace);
            until = Some(until.map_or(end, |u| u.min(end)));
        }
        until.map_or(Vouch::Alone, Vouch::Until)
    }

    /// Takes in a store read begun at `read_at` and ended at `now`: `peers` are the other nodes
    /// whose descriptors it found, and `lapsed` those of them whose lease has lapsed. Says, for
    /// each lapsed one, whether it is now taken for dead. Without a mesh (`meshed` false) there is
    /// no second witness to wait for: a lapsed lease is death.
    pub fn read(
        &mut self,
        read_at: Instant,
        now: Instant,
        peers: &[NodeId],
        lapsed: &[Lapsed],
        times: &Times,
        meshed: bool,
    ) -> Vec<(NodeId, Verdict)> {
        self.last_read = self.last_read.max(read_at);
        // A prober the read did not find has left the cluster, unless it probed after the read
        // began (it may have joined since).
        self.probers
            .retain(|node, at| peers.contains(node) || *at >= read_at);
        self.lapsed_since
            .retain(|node, _| lapsed.iter().any(|l| l.node == *node));
        self.ended.retain(|node| peers.contains(node));
        let mut verdicts = Vec::with_capacity(lapsed.len());
        let mut dead = BTreeMap::new();
        for Lapsed {
            node,
            version,
            generation,
            counts_on_me,
        } in lapsed
        {
            let since = *self.lapsed_since.entry(node.clone()).or_insert(now);
            let confirmed_dead = !meshed
                || self.ended.contains(node)
                || match self.heard.get(node) {
                    Some(heard) => now >= *heard + times.grace + times.margin(),
                    // It waits for our answer to run past its lease, and never got one from this
                    // process; one an earlier process of ours gave it vouches a grace past `base`
                    // at most.
                    None if *counts_on_me => {
                        now >= since.max(self.base + times.grace) + times.margin()
                    }
                    None => now >= since + times.outage_limit + times.lease_ttl + times.margin(),
                };
            if confirmed_dead {
                dead.insert(node.clone(), *version);
                let condemned = self.condemned.entry(node.clone()).or_insert(*generation);
                *condemned = (*condemned).max(*generation);
                verdicts.push((node.clone(), Verdict::Dead));
            } else {
                verdicts.push((node.clone(), Verdict::Suspected));
            }
        }
        self.known = peers
            .iter()
            .filter(|p| !dead.contains_key(*p))
            .cloned()
            .collect();
        self.dead = dead;
        verdicts
    }

    /// The version of a dead node's descriptor when it was taken for dead (`None`: not dead).
    pub fn dead_at(&self, node: &NodeId) -> Option<u64> {
        self.dead.get(node).copied()
    }

    /// Whether to read membership at `now`, the regular pace being `every`: once `every` passed
    /// since the last read began, or a probe period while a peer may soon be found dead (the mesh
    /// has not heard it for two probe periods, or its lease lapsed and the mesh does not confirm it
    /// yet). A crashed node is then found within a probe period of when it can be, not within a
    /// refresh; the store is read more often only while a peer is silent. Without a mesh a lapsed
    /// lease is death, found at the regular pace.
    pub fn read_due(
        &self,
        now: Instant,
        every: Duration,
        probe_every: Duration,
        meshed: bool,
    ) -> bool {
        let since = now.saturating_duration_since(self.last_read);
        if since >= every {
            return true;
        }
        let silent = |peer: &NodeId| {
            self.heard
                .get(peer)
                .is_none_or(|heard| now >= *heard + probe_every * 2)
        };
        let suspected = self.lapsed_since.keys().any(|n| !self.dead.contains_key(n));
        meshed && since >= probe_every && (suspected || self.known.iter().any(silent))
    }
}

fn raise(map: &mut BTreeMap<NodeId, Instant>, peer: &NodeId, at: Instant) {
    let entry = map.entry(peer.clone()).or_insert(at);
    if *entry < at {
        *entry = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: &str) -> NodeId {
        NodeId::new(n).expect("id")
    }

    fn lapsed(node: &NodeId, version: u64) -> Lapsed {
        Lapsed {
            node: node.clone(),
            version,
            generation: 1,
            counts_on_me: false,
        }
    }

    const TIMES: Times = Times {
        grace: Duration::from_secs(4),
        lease_ttl: Duration::from_secs(10),
        outage_limit: Duration::from_secs(60),
    };

    /// A clock for a test: time zero, then whatever the test adds.
    struct Clock(Instant);

    impl Clock {
        fn new() -> Self {
            Clock(Instant::now())
        }
        fn advance(&mut self, by: Duration) {
            self.0 += by;
        }
    }

    fn read_one(w: &mut Witness, now: Instant, node: &Lapsed) -> Vec<(NodeId, Verdict)> {
        w.read(
            now,
            now,
            std::slice::from_ref(&node.node),
            std::slice::from_ref(node),
            &TIMES,
            true,
        )
    }

    #[test]
    fn a_node_is_vouched_for_only_while_every_known_peer_answers() {
        let mut clock = Clock::new();
        let mut witness = Witness::new(clock.0);
        assert_eq!(witness.vouch(TIMES.grace), Vouch::Alone);
        witness.read(clock.0, clock.0, &[id("a"), id("b")], &[], &TIMES, true);
        clock.advance(Duration::from_secs(1));
        let (sent, stamp) = (clock.0, witness.stamp(clock.0));
        witness.answered(&id("a"), stamp, true, clock.0);
        // b never answered: nothing is vouched.
        assert!(matches!(witness.vouch(TIMES.grace), Vouch::Until(t) if t < sent));
        witness.answered(&id("b"), stamp, true, clock.0);
        assert_eq!(witness.vouch(TIMES.grace), Vouch::Until(sent + TIMES.grace));
        // A node that probed us is one we must hear from too.
        assert!(witness.probed_by(&id("c"), 1, clock.0));
        assert!(matches!(witness.vouch(TIMES.grace), Vouch::Until(t) if t < sent));
    }

    #[test]
    fn a_lapsed_node_is_dead_only_once_the_mesh_confirms_it() {
        let mut clock = Clock::new();
        let mut witness = Witness::new(clock.0);
        let n = id("n");
        let stamp = witness.stamp(clock.0);
        witness.answered(&n, stamp, true, clock.0);
        assert_eq!(
            read_one(&mut witness, clock.0, &lapsed(&n, 7)),
            vec![(n.clone(), Verdict::Suspected)]
        );
        clock.advance(TIMES.grace + TIMES.margin() - Duration::from_millis(1));
        assert_eq!(
            read_one(&mut witness, clock.0, &lapsed(&n, 7)),
            vec![(n.clone(), Verdict::Suspected)]
        );
        assert_eq!(witness.dead_at(&n), None);
        clock.advance(Duration::from_millis(1));
        assert_eq!(
            read_one(&mut witness, clock.0, &lapsed(&n, 7)),
            vec![(n.clone(), Verdict::Dead)]
        );
        assert_eq!(witness.dead_at(&n), Some(7));
        // Taken for dead, its probes are not vouched for; a later process of its id's are.
        assert!(!witness.probed_by(&n, 1, clock.0));
        assert!(witness.probed_by(&n, 2, clock.0));
    }

    #[test]
    fn a_node_never_heard_from_is_dead_only_after_the_outage_limit() {
        let mut clock = Clock::new();
        let mut witness = Witness::new(clock.0);
        let n = id("n");
        assert_eq!(
            read_one(&mut witness, clock.0, &lapsed(&n, 1)),
            vec![(n.clone(), Verdict::Suspected)]
        );
        clock.advance(TIMES.outage_limit + TIMES.lease_ttl);
        assert_eq!(
            read_one(&mut witness, clock.0, &lapsed(&n, 1)),
            vec![(n.clone(), Verdict::Suspected)]
        );
        clock.advance(TIMES.margin());
        assert_eq!(
            read_one(&mut witness, clock.0, &lapsed(&n, 1)),
            vec![(n.clone(), Verdict::Dead)]
        );
    }

    #[test]
    fn a_node_that_counts_on_us_and_never_heard_from_us_is_dead_after_the_margin() {
        let mut clock = Clock::new();
        let mut witness = Witness::new(clock.0);
        // This process began a grace ago: no answer of an earlier one vouches for `n` any more.
        clock.advance(TIMES.grace);
        let n = id("n");
        let counting = Lapsed {
            counts_on_me: true,
            ..lapsed(&n, 2)
        };
        assert_eq!(
            read_one(&mut witness, clock.0, &counting),
            vec![(n.clone(), Verdict::Suspected)]
        );
        clock.advance(TIMES.margin());
        assert_eq!(
            read_one(&mut witness, clock.0, &counting),
            vec![(n.clone(), Verdict::Dead)]
        );
    }

    /// An earlier process of this node's id may have answered `n` just before this one began:
    /// `n` runs on that answer for a grace, so this process, which never heard from `n`, waits a
    /// grace and the margin from its start before it takes `n` for dead.
    #[test]
    fn a_new_process_waits_out_what_its_earlier_process_may_have_answered() {
        let mut clock = Clock::new();
        let mut witness = Witness::new(clock.0);
        let n = id("n");
        let counting = Lapsed {
            counts_on_me: true,
            ..lapsed(&n, 2)
        };
        assert_eq!(
            read_one(&mut witness, clock.0, &counting),
            vec![(n.clone(), Verdict::Suspected)]
        );
        clock.advance(TIMES.grace + TIMES.margin() - Duration::from_millis(1));
        assert_eq!(
            read_one(&mut witness, clock.0, &counting),
            vec![(n.clone(), Verdict::Suspected)]
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(
            read_one(&mut witness, clock.0, &counting),
            vec![(n.clone(), Verdict::Dead)]
        );
    }

    #[test]
    fn a_node_that_says_it_stopped_is_dead_as_soon_as_its_lease_lapsed() {
        let clock = Clock::new();
        let mut witness = Witness::new(clock.0);
        let n = id("n");
        let stamp = witness.stamp(clock.0);
        witness.answered(&n, stamp, false, clock.0);
        assert_eq!(
            read_one(&mut witness, clock.0, &lapsed(&n, 3)),
            vec![(n.clone(), Verdict::Dead)]
        );
        // Without a mesh there is no second witness: a lapsed lease is enough.
        let mut alone = Witness::new(clock.0);
        let verdicts = alone.read(
            clock.0,
            clock.0,
            std::slice::from_ref(&n),
            &[lapsed(&n, 3)],
            &TIMES,
            false,
        );
        assert_eq!(verdicts, vec![(n, Verdict::Dead)]);
    }

    #[test]
    fn a_node_runs_past_its_lease_only_while_vouched_for_and_within_the_outage_limit() {
        let start = Instant::now();
        let until = start + TIMES.lease_ttl;
        let vouched = || Vouch::Until(until + Duration::from_secs(2));
        let alone = || Vouch::Alone;
        let second = Duration::from_secs(1);
        let unasked = || -> Vouch { panic!("the peers are asked only past the lease") };
        assert!(
            may_run(start, until, false, &TIMES, unasked),
            "the lease is held"
        );
        assert!(
            !may_run(until, until, false, &TIMES, alone),
            "no mesh, no witness"
        );
        assert!(may_run(until + second, until, true, &TIMES, vouched));
        assert!(!may_run(until + 2 * second, until, true, &TIMES, vouched));
        let limit = until + TIMES.outage_limit;
        assert!(may_run(limit - second, until, true, &TIMES, alone));
        assert!(!may_run(limit, until, true, &TIMES, alone));
    }

    /// Membership is read at the regular pace while every peer is heard; a probe period on once
    /// one goes silent and while its lapsed lease waits for the mesh; regular again once it is
    /// taken for dead.
    #[test]
    fn membership_is_read_sooner_only_while_a_peer_is_silent() {
        const EVERY: Duration = Duration::from_secs(1);
        const PROBE: Duration = Duration::from_millis(250);
        const TICK: Duration = Duration::from_millis(1);
        let mut clock = Clock::new();
        let mut witness = Witness::new(clock.0);
        witness.read(clock.0, clock.0, &[id("a")], &[], &TIMES, true);
        let due = |w: &Witness, now: Instant| w.read_due(now, EVERY, PROBE, true);
        // Never heard yet: read again a probe period on, not before.
        assert!(!due(&witness, clock.0 + PROBE - TICK));
        assert!(due(&witness, clock.0 + PROBE));
        // Without a mesh there is nothing to hear: a lapsed lease is death at the regular pace.
        assert!(!witness.read_due(clock.0 + PROBE, EVERY, PROBE, false));
        assert!(witness.read_due(clock.0 + EVERY, EVERY, PROBE, false));
        let stamp = witness.stamp(clock.0);
        witness.answered(&id("a"), stamp, true, clock.0);
        // Heard: the regular pace.
        assert!(!due(&witness, clock.0 + PROBE * 2 - TICK));
        assert!(due(&witness, clock.0 + EVERY));
        // Silent for two probe periods: due, as it is a probe period after the last read.
        assert!(due(&witness, clock.0 + PROBE * 2));
        clock.advance(PROBE * 2);
        // Its lease lapses before the mesh confirms it: still watched.
        let a = lapsed(&id("a"), 3);
        assert_eq!(
            read_one(&mut witness, clock.0, &a),
            [(id("a"), Verdict::Suspected)]
        );
        assert!(!due(&witness, clock.0 + PROBE - TICK));
        assert!(due(&witness, clock.0 + PROBE));
        // Taken for dead: nothing left to watch.
        clock.advance(TIMES.grace + TIMES.margin());
        assert_eq!(
            read_one(&mut witness, clock.0, &a),
            [(id("a"), Verdict::Dead)]
        );
        assert!(!due(&witness, clock.0 + PROBE));
        assert!(due(&witness, clock.0 + EVERY));
    }
}
