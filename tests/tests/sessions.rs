//! Game client sessions over real QUIC on loopback: players keep their connection and their
//! order while their room moves, ride out a gateway that shuts down, and a client that misbehaves
//! loses its own session and nothing else.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry::client::{Client, ClientError, ClientEvent};
use ferry::relocation::protocol::MoveEnd;
use ferry::session::wire::{ClientFrame, CloseCode, PROTOCOL_VERSION, ServerFrame};
use ferry::store::LocationStore;
use ferry::{ActorId, Node, NodeState, RecoveryEvent, SessionLimits, SpotId, UnitId};
use ferry_tests::cluster::Cluster;
use ferry_tests::faults::{FaultyStore, Gate};
use ferry_tests::player::{HookedPair, PlayerMsg, PlayerPush, registry};
use ferry_tests::sessions::{Gateways, RawClient};
use tokio::sync::watch;

const T: Duration = Duration::from_secs(10);

fn actor(id: &str) -> ActorId {
    ActorId::new(id).expect("valid id")
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

fn fast() -> SessionLimits {
    SessionLimits {
        rate_per_second: 100_000,
        rate_burst: 100_000,
        ..SessionLimits::default()
    }
}

async fn inputs(node: &Node, who: &ActorId) -> Vec<u64> {
    node.request(who, PlayerMsg::Get, T)
        .await
        .expect("player answers")
}

/// Waits for the next echo, keeping ticks aside.
async fn next_echo(client: &mut Client, ticks: &mut Vec<u64>) -> u64 {
    loop {
        match client.recv::<PlayerPush>().await.expect("session open") {
            ClientEvent::Push {
                msg: PlayerPush::Echo(n),
                ..
            } => return n,
            ClientEvent::Push {
                msg: PlayerPush::Tick(t),
                ..
            } => ticks.push(t),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Sends inputs `from..to` and waits for their echoes, checking they come back in order.
async fn round_trip(client: &mut Client, who: &ActorId, from: u64, to: u64) {
    for n in from..to {
        client.send(who, &PlayerMsg::Input(n)).expect("sent");
    }
    let mut ticks = Vec::new();
    for n in from..to {
        assert_eq!(next_echo(client, &mut ticks).await, n);
    }
}

/// A player on `node` with a client of its own on `gateway`, to show a neighbour's trouble
/// changes nothing for it.
struct Bystander {
    client: Client,
    who: ActorId,
    sent: u64,
}

impl Bystander {
    async fn start(gateways: &Gateways, gateway: &Node, node: &Node) -> Bystander {
        let who = actor("bystander");
        node.create_actor("player", &who).await.expect("created");
        let client = Client::connect(gateways.client(&[gateway]))
            .await
            .expect("connected");
        client.bind(&who).await.expect("bound");
        let mut b = Bystander {
            client,
            who,
            sent: 0,
        };
        b.more().await;
        b
    }

    async fn more(&mut self) {
        round_trip(&mut self.client, &self.who, self.sent, self.sent + 20).await;
        self.sent += 20;
    }

    /// Plays on, then checks the player got every input once, in order, on one connection.
    async fn check(mut self, node: &Node) {
        self.more().await;
        assert_eq!(
            inputs(node, &self.who).await,
            (0..self.sent).collect::<Vec<_>>()
        );
        assert_eq!(self.client.session().connects, 1);
    }
}

/// One node that accepts clients with `limits`.
async fn one_node(limits: SessionLimits) -> (Cluster, Gateways, Node) {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let node = gateways.add(&mut cluster, "n1", registry(), limits).await;
    (cluster, gateways, node)
}

/// Sends inputs `0..n`, a few at a time, while `unit` makes the moves `hops` (each once its
/// `after` echoes came back), and every move must succeed; returns the echoes and ticks received.
async fn play_while_moving(
    client: &mut Client,
    who: &ActorId,
    unit: UnitId,
    hops: Vec<(Node, Node, u64)>,
    n: u64,
) -> (Vec<u64>, Vec<u64>) {
    const WINDOW: u64 = 24;
    let (echoed_tx, echoed) = watch::channel(0u64);
    let mover = tokio::spawn(async move {
        let mut echoed = echoed;
        let mut reports = Vec::new();
        for (from, to, after) in hops {
            echoed
                .wait_for(|n| *n >= after)
                .await
                .expect("client running");
            let report = from
                .move_unit(&unit, Some(to.id().clone()))
                .await
                .expect("move starts");
            reports.push(report);
        }
        reports
    });
    let (mut sent, mut echoes, mut ticks) = (0u64, Vec::new(), Vec::new());
    while echoes.len() < n as usize {
        while sent < n && sent < echoes.len() as u64 + WINDOW {
            client.send(who, &PlayerMsg::Input(sent)).expect("sent");
            sent += 1;
        }
        echoes.push(next_echo(client, &mut ticks).await);
        echoed_tx.send_replace(echoes.len() as u64);
    }
    for report in mover.await.expect("mover ran") {
        assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    }
    (echoes, ticks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_player_keeps_its_connection_and_its_order_while_its_room_moves_between_three_nodes()
 {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    for id in ["n1", "n2", "n3"] {
        gateways.add(&mut cluster, id, registry(), fast()).await;
    }
    let (n1, n2, n3) = (
        cluster.nodes[0].clone(),
        cluster.nodes[1].clone(),
        cluster.nodes[2].clone(),
    );
    let (r, p) = (spot("r"), actor("p"));
    n2.create_spot_on(n2.id(), "room", &r).await.expect("room");
    n2.create_actor("player", &p).await.expect("player");
    n2.join(&p, &r).await.expect("joined");

    // The player's client is on n1; the room moves n2 -> n3 (both away from the gateway),
    // n3 -> n1 (onto the gateway), n1 -> n2 (off it again).
    let mut client = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("connected");
    let first = client.session();
    client.bind(&p).await.expect("bound");
    n2.tell(&p, PlayerMsg::Ticks { ms: 2 }).expect("ticks on");

    const N: u64 = 900;
    let hops = vec![
        (n2.clone(), n3.clone(), 150),
        (n3.clone(), n1.clone(), 400),
        (n1.clone(), n2.clone(), 650),
    ];
    let (echoes, ticks) =
        play_while_moving(&mut client, &p, UnitId::Spot(r.clone()), hops, N).await;
    assert!(n2.hosts(&UnitId::Spot(r.clone())) && n2.hosts(&UnitId::Actor(p.clone())));

    let all: Vec<u64> = (0..N).collect();
    assert_eq!(echoes, all, "every echo came once, in order");
    assert_eq!(
        inputs(&n3, &p).await,
        all,
        "every input arrived once, in order"
    );
    assert!(!ticks.is_empty());
    assert_eq!(
        ticks,
        (0..ticks.len() as u64).collect::<Vec<_>>(),
        "ticks in order, none lost"
    );
    let now = client.session();
    assert_eq!(
        (now.session, now.connects),
        (first.session, 1),
        "never reconnected"
    );
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_player_alone_keeps_its_order_while_it_moves_onto_its_gateway_and_off_again() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let n1 = gateways.add(&mut cluster, "n1", registry(), fast()).await;
    let n2 = gateways.add(&mut cluster, "n2", registry(), fast()).await;
    let p = actor("p");
    n1.create_actor("player", &p).await.expect("player");
    let mut client = Client::connect(gateways.client(&[&n2]))
        .await
        .expect("connected");
    client.bind(&p).await.expect("bound");
    n1.tell(&p, PlayerMsg::Ticks { ms: 2 }).expect("ticks on");
    const N: u64 = 500;
    let hops = vec![(n1.clone(), n2.clone(), 100), (n2.clone(), n1.clone(), 300)];
    let (echoes, ticks) =
        play_while_moving(&mut client, &p, UnitId::Actor(p.clone()), hops, N).await;
    let all: Vec<u64> = (0..N).collect();
    assert_eq!(echoes, all);
    assert_eq!(inputs(&n2, &p).await, all);
    assert_eq!(ticks, (0..ticks.len() as u64).collect::<Vec<_>>());
    assert!(n1.hosts(&UnitId::Actor(p.clone())));
    assert_eq!(client.session().connects, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_over_the_clients_frame_limit_ends_the_session_without_a_reconnect() {
    let (cluster, gateways, n1) = one_node(SessionLimits::default()).await;
    let me = actor("p");
    n1.create_actor("player", &me).await.expect("created");
    let mut config = gateways.client(&[&n1]);
    config.max_frame = 512;
    let mut client = Client::connect(config).await.expect("connected");
    client.bind(&me).await.expect("bound");
    round_trip(&mut client, &me, 0, 3).await;
    n1.tell(
        &me,
        PlayerMsg::Flood {
            count: 1,
            size: 1000,
        },
    )
    .expect("told");
    loop {
        match client.recv::<PlayerPush>().await {
            // The three inputs ran, but their confirmation may still have been on its way when
            // the session ended: the client may report them, never more.
            Ok(ClientEvent::Undelivered { actor, inputs, .. }) => {
                assert_eq!(actor, me);
                assert!(inputs <= 3, "{inputs} reported of 3 sent");
            }
            Err(ClientError::Closed { code, reason }) => {
                assert_eq!(code, Some(CloseCode::TooLarge), "{reason}");
                assert!(reason.contains("max_frame"), "{reason}");
                break;
            }
            other => panic!("expected the session to end, got {other:?}"),
        }
    }
    assert_eq!(client.session().connects, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inputs_held_for_an_abandoned_move_reach_the_source_in_order() {
    let gateways = Gateways::new();
    let (hooked, gate) = Gate::new(true);
    let HookedPair {
        cluster,
        n1,
        n2,
        room: r,
        player: p,
    } = HookedPair::start(&gateways, hooked, fast(), false).await;
    // The gateway is the target, whose restore fails.
    let mut client = Client::connect(gateways.client(&[&n2]))
        .await
        .expect("connected");
    client.bind(&p).await.expect("bound");
    round_trip(&mut client, &p, 0, 10).await;

    let mover = {
        let (n1, room, to) = (n1.clone(), UnitId::Spot(r.clone()), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&room, Some(to)).await })
    };
    gate.wait_started().await;
    // The room is sealed, its capture on the target: these are held at the gateway.
    for n in 10..30 {
        client.send(&p, &PlayerMsg::Input(n)).expect("sent");
    }
    gate.open();
    let report = mover.await.expect("mover ran").expect("move starts");
    assert!(matches!(report.end, MoveEnd::Restored(_)), "{report:?}");
    let mut ticks = Vec::new();
    for n in 10..30 {
        assert_eq!(next_echo(&mut client, &mut ticks).await, n);
    }
    round_trip(&mut client, &p, 30, 40).await;
    assert!(n1.hosts(&UnitId::Actor(p.clone())));
    assert_eq!(inputs(&n2, &p).await, (0..40).collect::<Vec<_>>());
    assert_eq!(client.session().connects, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_player_keeps_its_session_and_every_input_while_its_room_takes_6s_to_move() {
    let gateways = Gateways::new();
    // Longer than the gateway's seal timeout (3 s) and the source's step (5 s), well inside the
    // move's deadline.
    let (hooked, gate) = Gate::slow(Duration::from_secs(6));
    let HookedPair {
        cluster,
        n1,
        n2,
        room: r,
        player: p,
    } = HookedPair::start(&gateways, hooked, fast(), false).await;
    let mut config = gateways.client(&[&n1]);
    // A session the gateway closed shows as an error here, not as a quiet reconnect.
    config.reconnect = None;
    let mut client = Client::connect(config).await.expect("connected");
    client.bind(&p).await.expect("bound");
    round_trip(&mut client, &p, 0, 10).await;

    let mover = {
        let (n1, room, to) = (n1.clone(), UnitId::Spot(r.clone()), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&room, Some(to)).await })
    };
    gate.wait_started().await;
    // The room is sealed and being restored on n2: these are held at the gateway.
    for n in 10..30 {
        client.send(&p, &PlayerMsg::Input(n)).expect("sent");
    }
    let report = mover.await.expect("mover ran").expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    let mut ticks = Vec::new();
    for n in 10..30 {
        assert_eq!(next_echo(&mut client, &mut ticks).await, n);
    }
    round_trip(&mut client, &p, 30, 40).await;
    assert!(n2.hosts(&UnitId::Actor(p.clone())));
    assert_eq!(
        inputs(&n2, &p).await,
        (0..40).collect::<Vec<_>>(),
        "every input ran once, in order"
    );
    assert_eq!(client.session().connects, 1);
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_whose_gateway_shuts_down_reconnects_elsewhere_binds_again_and_plays_on() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let n1 = gateways.add(&mut cluster, "n1", registry(), fast()).await;
    let n2 = gateways.add(&mut cluster, "n2", registry(), fast()).await;
    let p = actor("p");
    n2.create_actor("player", &p).await.expect("player");
    let mut client = Client::connect(gateways.client(&[&n1, &n2]))
        .await
        .expect("connected");
    assert_eq!(client.session().node, *n1.id());
    client.bind(&p).await.expect("bound");
    round_trip(&mut client, &p, 0, 50).await;

    n1.shutdown().await;
    // The last inputs' confirmation may have been on its way: reported, at most all fifty.
    let mut event = client.recv::<PlayerPush>().await.expect("reconnected");
    if let ClientEvent::Undelivered { inputs, .. } = &event {
        assert!(*inputs <= 50, "{event:?}");
        event = client.recv::<PlayerPush>().await.expect("reconnected");
    }
    match event {
        ClientEvent::Reconnected { reason, session } => {
            assert!(reason.contains("shutting down"), "{reason}");
            assert_eq!(session.node, *n2.id());
            assert_eq!(session.connects, 2);
        }
        other => panic!("expected a reconnect, got {other:?}"),
    }
    round_trip(&mut client, &p, 50, 100).await;
    assert_eq!(inputs(&n2, &p).await, (0..100).collect::<Vec<_>>());
    client.close().await;
    n2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_session_binding_a_player_takes_it_over_and_the_first_is_told_why() {
    let (cluster, gateways, n1) = one_node(fast()).await;
    let (p, q) = (actor("p"), actor("q"));
    n1.create_actor("player", &p).await.expect("player");
    n1.create_actor("player", &q).await.expect("player");
    let mut first = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("connected");
    first.bind(&p).await.expect("bound");
    first.bind(&q).await.expect("bound");
    round_trip(&mut first, &p, 0, 5).await;

    let mut second = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("connected");
    second.bind(&p).await.expect("bound");
    // The first session may not have heard yet that its last inputs ran: it reports those
    // (at most the five it sent) just before the unbind.
    let mut event = first.recv::<PlayerPush>().await.expect("still open");
    if let ClientEvent::Undelivered { actor, inputs, .. } = &event {
        assert_eq!((actor, *inputs <= 5), (&p, true), "{event:?}");
        event = first.recv::<PlayerPush>().await.expect("still open");
    }
    match event {
        ClientEvent::Unbound { actor, reason } => {
            assert_eq!(actor, p);
            assert!(reason.contains("another session"), "{reason}");
        }
        other => panic!("expected an unbind, got {other:?}"),
    }
    assert!(matches!(
        first.send(&p, &PlayerMsg::Input(99)),
        Err(ClientError::NotBound { .. })
    ));
    round_trip(&mut second, &p, 5, 10).await;
    // The first session goes on with its other player.
    round_trip(&mut first, &q, 0, 5).await;
    assert_eq!(inputs(&n1, &p).await, (0..10).collect::<Vec<_>>());
    cluster.shutdown().await;
}

/// A gateway whose node may have lost its owner lease forwards no more input: another node may
/// run its units by now, and inputs it let through late could overtake those the client sends
/// again elsewhere. The session closes, and the client plays on through another gateway: each
/// input runs once, in order, or is reported undelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_whose_lease_may_have_run_out_forwards_no_input_and_its_clients_go_elsewhere() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let n2 = gateways.add(&mut cluster, "n2", registry(), fast()).await;
    let store = FaultyStore::new(cluster.store.clone());
    let shared: Arc<dyn LocationStore> = store.clone();
    let mut config = cluster
        .config("n1")
        .sessions(gateways.settings(fast()))
        .store(shared);
    config.lease_ttl = Duration::from_millis(900);
    config.outage_limit = Duration::from_millis(200);
    let n1 = cluster.add_with(config, registry()).await;
    let me = actor("far");
    n2.create_actor("player", &me).await.expect("created");
    let mut client = Client::connect(gateways.client(&[&n1, &n2]))
        .await
        .expect("connected");
    client.bind(&me).await.expect("bound");
    round_trip(&mut client, &me, 0, 5).await;
    assert_eq!(client.session().connects, 1);

    // n1 can no longer renew its lease: once it may have run out, n1 is fenced.
    let mut state = n1.watch_state();
    store.leave_renewals_unanswered();
    tokio::time::timeout(T, state.wait_for(|s| *s == NodeState::Error))
        .await
        .expect("n1 is fenced")
        .expect("state");

    // What the client sends n1 now never reaches the player: the client is told so, since it
    // does not send inputs again, and carries on through n2.
    client.send(&me, &PlayerMsg::Input(5)).expect("sent");
    match client.recv::<PlayerPush>().await.expect("session goes on") {
        ClientEvent::Undelivered { actor, inputs, .. } => {
            assert_eq!((actor, inputs), (me.clone(), 1))
        }
        other => panic!("expected the input sent to n1 reported undelivered, got {other:?}"),
    }
    match client.recv::<PlayerPush>().await.expect("session goes on") {
        ClientEvent::Reconnected { reason, session } => {
            assert!(reason.contains("owner lease"), "{reason}");
            assert_eq!((session.node, session.connects), (n2.id().clone(), 2));
        }
        other => panic!("expected a reconnect, got {other:?}"),
    }
    round_trip(&mut client, &me, 6, 11).await;
    let expected: Vec<u64> = (0..5).chain(6..11).collect();
    assert_eq!(inputs(&n2, &me).await, expected);
    n1.abort().await;
    cluster.shutdown().await;
}

/// The node running a player dies with the player's last pushes on their way: its gateway binds
/// the player again where recovery rebuilt it, in the same session, and the client tells its
/// application so before the rebuilt player's first push, since what the old binding had on its
/// way is gone and its pushes start again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_hears_that_its_player_was_bound_again_after_the_node_running_it_died() {
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let gateway = gateways.add(&mut cluster, "n1", registry(), fast()).await;
    let mut config = cluster.config("n2");
    config.lease_ttl = Duration::from_millis(600);
    let doomed = cluster.add_with(config, registry()).await;
    let me = actor("p");
    doomed.create_actor("player", &me).await.expect("player");
    let mut client = Client::connect(gateways.client(&[&gateway]))
        .await
        .expect("connected");
    client.bind(&me).await.expect("bound");
    round_trip(&mut client, &me, 0, 3).await;

    let mut recovery = gateway.recovery_events();
    doomed.abort().await;
    let rebuilt = UnitId::Actor(me.clone());
    tokio::time::timeout(T, async {
        loop {
            if let Ok(RecoveryEvent::Completed { ids, .. }) = recovery.recv().await
                && ids.contains(&rebuilt)
            {
                break;
            }
        }
    })
    .await
    .expect("the player is rebuilt on the gateway's node");
    let mut event = tokio::time::timeout(T, client.recv::<PlayerPush>())
        .await
        .expect("the client hears of the new binding")
        .expect("session open");
    // The last inputs' confirmation may have been on its way: reported, at most all three.
    if let ClientEvent::Undelivered { inputs, .. } = &event {
        assert!(*inputs <= 3, "{event:?}");
        event = client.recv::<PlayerPush>().await.expect("session open");
    }
    assert_eq!(event, ClientEvent::Rebound { actor: me.clone() });
    // The rebuilt player starts from nothing and answers on the new binding.
    round_trip(&mut client, &me, 3, 6).await;
    assert_eq!(inputs(&gateway, &me).await, [3, 4, 5]);
    client.close().await;
    cluster.shutdown().await;
}

/// An application that binds a player it has bound already (twice at once, here) has each bind
/// answered and hears of no rebind: only a `bound` the client did not ask for is the gateway's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn binding_a_bound_player_again_is_answered_and_reported_as_no_rebind() {
    let (cluster, gateways, n1) = one_node(fast()).await;
    let me = actor("p");
    n1.create_actor("player", &me).await.expect("player");
    let mut client = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("connected");
    client.bind(&me).await.expect("bound");
    let (again, once_more) = tokio::join!(client.bind(&me), client.bind(&me));
    again.expect("bound again");
    once_more.expect("bound once more");
    // The next event is the first echo: any other fails the round trip.
    round_trip(&mut client, &me, 0, 3).await;
    assert_eq!(inputs(&n1, &me).await, [0, 1, 2]);
    client.close().await;
    cluster.shutdown().await;
}

/// A client that authenticates and binds `victim`, for the bad-input cases.
async fn raw_bound(gateways: &Gateways, node: &Node, victim: &ActorId) -> RawClient {
    node.create_actor("player", victim).await.expect("created");
    let mut raw = RawClient::connect(
        node.session_addr().expect("gateway"),
        &gateways.ca_pem,
        None,
    )
    .await;
    raw.hello().await;
    raw.frame(&ClientFrame::Bind {
        actor: victim.clone(),
    })
    .await;
    assert_eq!(
        raw.next().await,
        Some(ServerFrame::Bound {
            actor: victim.clone()
        })
    );
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_malformed_frame_ends_that_session_only() {
    let (cluster, gateways, n1) = one_node(SessionLimits::default()).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let mut raw = raw_bound(&gateways, &n1, &actor("bad")).await;
    // An Input frame whose Actor id is cut short.
    raw.body(&[3, 40, b'x']).await;
    let (code, reason) = raw.ended().await;
    assert_eq!(code, Some(CloseCode::Malformed), "{reason}");
    assert!(reason.contains("malformed"), "{reason}");
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frame_over_the_size_limit_ends_that_session_only() {
    let limits = SessionLimits {
        max_frame: 1024,
        ..SessionLimits::default()
    };
    let (cluster, gateways, n1) = one_node(limits).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let mut raw = raw_bound(&gateways, &n1, &actor("big")).await;
    // Only the length is sent: the gateway refuses it from its first four bytes.
    raw.bytes(&1025u32.to_be_bytes()).await;
    let (code, reason) = raw.ended().await;
    assert_eq!(code, Some(CloseCode::TooLarge), "{reason}");
    assert!(
        reason.contains("1025") && reason.contains("1024"),
        "{reason}"
    );
    // The client library refuses to send one at all.
    let client = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("connected");
    let me = actor("big");
    client.bind(&me).await.expect("bound");
    let huge = PlayerMsg::Flood { count: 0, size: 0 };
    client.send(&me, &huge).expect("a small one goes");
    assert!(matches!(
        client.send(&me, &vec![0u8; 2000]),
        Err(ClientError::TooLarge { max: 1024 })
    ));
    bystander.check(&n1).await;
    drop(client);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_frame_type_ends_that_session_only() {
    let (cluster, gateways, n1) = one_node(SessionLimits::default()).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let mut raw = raw_bound(&gateways, &n1, &actor("odd")).await;
    raw.body(&[99, 1, 2, 3]).await;
    let (code, reason) = raw.ended().await;
    assert_eq!(code, Some(CloseCode::UnknownFrame), "{reason}");
    assert!(reason.contains("frame type 99"), "{reason}");
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_input_its_player_does_not_take_ends_that_session_only() {
    let (cluster, gateways, n1) = one_node(SessionLimits::default()).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let me = actor("confused");
    n1.create_actor("player", &me).await.expect("created");
    let mut config = gateways.client(&[&n1]);
    config.reconnect = None;
    let mut client = Client::connect(config).await.expect("connected");
    client.bind(&me).await.expect("bound");
    client.send(&me, &"not a player message").expect("sent");
    // The input never ran, and the client says so before the end.
    match client.recv::<PlayerPush>().await {
        Ok(ClientEvent::Undelivered { actor, inputs, .. }) => {
            assert_eq!((actor, inputs), (me.clone(), 1));
        }
        other => panic!("expected the input reported undelivered, got {other:?}"),
    }
    match client.recv::<PlayerPush>().await {
        Err(ClientError::Closed { code, reason }) => {
            assert_eq!(code, Some(CloseCode::BadInput), "{reason}");
            assert!(reason.contains("PlayerMsg"), "{reason}");
        }
        other => panic!("expected the session to close, got {other:?}"),
    }
    assert!(inputs(&n1, &me).await.is_empty());
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frames_before_authentication_or_a_refused_token_end_that_session_only() {
    let limits = SessionLimits {
        auth_timeout: Duration::from_millis(300),
        ..SessionLimits::default()
    };
    let (cluster, gateways, n1) = one_node(limits).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let addr = n1.session_addr().expect("gateway");

    let mut raw = RawClient::connect(addr, &gateways.ca_pem, None).await;
    raw.frame(&ClientFrame::Bind {
        actor: actor("bystander"),
    })
    .await;
    let (code, reason) = raw.ended().await;
    assert_eq!(code, Some(CloseCode::Unauthenticated), "{reason}");
    assert!(reason.contains("authenticate first"), "{reason}");

    // Silence past the authentication timeout.
    let raw = RawClient::connect(addr, &gateways.ca_pem, None).await;
    let (code, reason) = RawClient::close_reason(&raw.conn).await;
    assert_eq!(code, Some(CloseCode::Unauthenticated), "{reason}");

    let mut raw = RawClient::connect(addr, &gateways.ca_pem, None).await;
    raw.frame(&ClientFrame::Hello {
        version: PROTOCOL_VERSION,
        token: Bytes::from_static(b"stolen"),
    })
    .await;
    let (code, reason) = raw.ended().await;
    assert_eq!(code, Some(CloseCode::Unauthenticated), "{reason}");

    let mut config = gateways.client(&[&n1]);
    config.token = b"stolen".to_vec();
    match Client::connect(config).await {
        Err(ClientError::Rejected { reason }) => assert!(reason.contains("token"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_faster_than_its_rate_is_closed_and_others_lose_nothing() {
    let limits = SessionLimits {
        rate_per_second: 50,
        // The bystander's two rounds and its bind fit in one burst; the spammer's 200 do not.
        rate_burst: 45,
        ..SessionLimits::default()
    };
    let (cluster, gateways, n1) = one_node(limits).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let me = actor("spammer");
    n1.create_actor("player", &me).await.expect("created");
    let mut config = gateways.client(&[&n1]);
    config.reconnect = None;
    let mut client = Client::connect(config).await.expect("connected");
    client.bind(&me).await.expect("bound");
    for n in 0..200 {
        if client.send(&me, &PlayerMsg::Input(n)).is_err() {
            break;
        }
    }
    let ended = loop {
        match client.recv::<PlayerPush>().await {
            Ok(ClientEvent::Push { .. } | ClientEvent::Undelivered { .. }) => continue,
            other => break other,
        }
    };
    match ended {
        Err(ClientError::Closed { code, reason }) => {
            assert_eq!(code, Some(CloseCode::RateLimited), "{reason}");
            assert!(reason.contains("50 frames per second"), "{reason}");
        }
        other => panic!("expected the session to close, got {other:?}"),
    }
    // What got through before the limit did, in order.
    let got = inputs(&n1, &me).await;
    assert!(got.len() < 200);
    assert_eq!(got, (0..got.len() as u64).collect::<Vec<_>>());
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_many_inputs_held_during_a_move_close_that_session_only() {
    let gateways = Gateways::new();
    let (hooked, gate) = Gate::new(false);
    let limits = SessionLimits {
        max_held: 5,
        ..SessionLimits::default()
    };
    let HookedPair {
        cluster,
        n1,
        n2,
        room: r,
        player: p,
    } = HookedPair::start(&gateways, hooked, limits, false).await;
    // The bystander plays on n1 in a room that does not move.
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let mut config = gateways.client(&[&n1]);
    config.reconnect = None;
    let mut client = Client::connect(config).await.expect("connected");
    client.bind(&p).await.expect("bound");
    let mover = {
        let (n1, room, to) = (n1.clone(), UnitId::Spot(r.clone()), n2.id().clone());
        tokio::spawn(async move { n1.move_unit(&room, Some(to)).await })
    };
    gate.wait_started().await;
    for n in 0..6 {
        client.send(&p, &PlayerMsg::Input(n)).expect("sent");
    }
    // All six were held, none confirmed: the client reports each before the end.
    match client.recv::<PlayerPush>().await {
        Ok(ClientEvent::Undelivered { actor, inputs, .. }) => {
            assert_eq!((actor, inputs), (p.clone(), 6));
        }
        other => panic!("expected the held inputs reported, got {other:?}"),
    }
    match client.recv::<PlayerPush>().await {
        Err(ClientError::Closed { code, reason }) => {
            assert_eq!(code, Some(CloseCode::TooManyHeld), "{reason}");
            assert!(reason.contains("more than 5"), "{reason}");
        }
        other => panic!("expected the session to close, got {other:?}"),
    }
    gate.open();
    let report = mover.await.expect("mover ran").expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn binds_over_the_limit_are_refused_and_the_session_goes_on() {
    let limits = SessionLimits {
        max_bindings: 2,
        ..SessionLimits::default()
    };
    let (cluster, gateways, n1) = one_node(limits).await;
    let players: Vec<ActorId> = ["a", "b", "c"].iter().map(|id| actor(id)).collect();
    for p in &players {
        n1.create_actor("player", p).await.expect("created");
    }
    let mut client = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("connected");
    client.bind(&players[0]).await.expect("bound");
    client.bind(&players[1]).await.expect("bound");
    match client.bind(&players[2]).await {
        Err(ClientError::BindRefused { reason, .. }) => {
            assert!(reason.contains("the most it may"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A bind of an Actor that exists nowhere is refused too.
    assert!(matches!(
        client.bind(&actor("ghost")).await,
        Err(ClientError::BindRefused { .. })
    ));
    round_trip(&mut client, &players[1], 0, 5).await;
    client.unbind(&players[0]).expect("unbound");
    match client.recv::<PlayerPush>().await.expect("open") {
        ClientEvent::Unbound { actor, .. } => assert_eq!(actor, players[0]),
        other => panic!("expected the unbind, got {other:?}"),
    }
    client
        .bind(&players[2])
        .await
        .expect("room for one more now");
    round_trip(&mut client, &players[2], 0, 5).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_does_not_read_its_pushes_is_closed_and_others_lose_nothing() {
    let limits = SessionLimits {
        max_outbound: 64,
        ..SessionLimits::default()
    };
    let (cluster, gateways, n1) = one_node(limits).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let me = actor("sleepy");
    n1.create_actor("player", &me).await.expect("created");
    let addr = n1.session_addr().expect("gateway");
    let mut raw = RawClient::connect(addr, &gateways.ca_pem, Some(4096)).await;
    raw.hello().await;
    raw.frame(&ClientFrame::Bind { actor: me.clone() }).await;
    assert_eq!(
        raw.next().await,
        Some(ServerFrame::Bound { actor: me.clone() })
    );
    // The client stops reading; its player pushes far more than its window and queue hold.
    n1.tell(
        &me,
        PlayerMsg::Flood {
            count: 200,
            size: 1000,
        },
    )
    .expect("told");
    let (code, reason) = RawClient::close_reason(&raw.conn).await;
    assert_eq!(code, Some(CloseCode::SlowReader), "{reason}");
    assert!(reason.contains("read pushes"), "{reason}");
    bystander.check(&n1).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_connection_is_dropped_after_the_idle_timeout() {
    let limits = SessionLimits {
        idle_timeout: Duration::from_millis(300),
        ..SessionLimits::default()
    };
    let (cluster, gateways, n1) = one_node(limits).await;
    let bystander = Bystander::start(&gateways, &n1, &n1).await;
    let mut raw =
        RawClient::connect(n1.session_addr().expect("gateway"), &gateways.ca_pem, None).await;
    raw.hello().await;
    // This client sends no keep-alives.
    let (code, reason) = RawClient::close_reason(&raw.conn).await;
    assert_eq!(code, None);
    assert!(reason.contains("timed out"), "{reason}");
    bystander.check(&n1).await;
    cluster.shutdown().await;
}
