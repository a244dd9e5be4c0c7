//! The sample games played by real clients over QUIC on a two-node cluster, their rooms moved in
//! the middle of play: each test checks what a player would see.

use std::time::Duration;

use ferry::client::{Client, ClientEvent};
use ferry::relocation::protocol::MoveEnd;
use ferry::{ActorId, Node, Registry, SessionLimits, SpotId, UnitId};
use ferry_samples::fps::{self, Phase, Snapshot};
use ferry_tests::cluster::Cluster;
use ferry_tests::sessions::Gateways;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// How long any one wait may take before the test gives up (a hang guard, not a measure).
const T: Duration = Duration::from_secs(30);

/// Short FPS rounds, so a test plays several.
const FPS: fps::Rules = fps::Rules { round_ticks: 12 };

fn registry() -> Registry {
    let mut registry = Registry::new();
    fps::register(&mut registry, FPS);
    registry
}

fn actor(id: &str) -> ActorId {
    ActorId::new(id).expect("valid id")
}

fn spot(id: &str) -> SpotId {
    SpotId::new(id).expect("valid id")
}

/// Two nodes that both accept clients, pacing them no more than a bot needs.
async fn two_nodes() -> (Cluster, Gateways, Node, Node) {
    let limits = SessionLimits {
        rate_per_second: 10_000,
        rate_burst: 10_000,
        ..SessionLimits::default()
    };
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let n1 = gateways.add(&mut cluster, "n1", registry(), limits).await;
    let n2 = gateways.add(&mut cluster, "n2", registry(), limits).await;
    (cluster, gateways, n1, n2)
}

/// Creates a room of `kind` on `node` with players of `player_kind` in it, each bound to a client
/// of its own, on the two gateways in turn.
async fn room_with_clients(
    gateways: &Gateways,
    (node, other): (&Node, &Node),
    (kind, room): (&str, &SpotId),
    (player_kind, players): (&str, &[ActorId]),
) -> Vec<Client> {
    node.create_spot_on(node.id(), kind, room)
        .await
        .expect("room created");
    let mut clients = Vec::new();
    for (i, player) in players.iter().enumerate() {
        node.create_actor(player_kind, player)
            .await
            .expect("player created");
        node.join(player, room).await.expect("player joined");
        let gateway = if i % 2 == 0 { node } else { other };
        let client = Client::connect(gateways.client(&[gateway]))
            .await
            .expect("client connected");
        client.bind(player).await.expect("player bound");
        clients.push(client);
    }
    clients
}

/// Waits for `what`, failing the test instead of hanging when it never comes.
async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(T, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what} did not happen within {T:?}"),
    }
}

/// The next push to a client, which must be one.
async fn next_push<P: DeserializeOwned + std::fmt::Debug>(client: &mut Client) -> P {
    let event = within("a push", client.recv::<P>())
        .await
        .expect("session open");
    match event {
        ClientEvent::Push { msg, .. } => msg,
        other => panic!("expected a push, got {other:?}"),
    }
}

/// An FPS bot: sends numbered inputs as snapshots arrive and checks every snapshot.
struct FpsBot {
    client: Client,
    me: ActorId,
    room: SpotId,
    sent: u64,
    points: u64,
    watch: fps::Watch,
}

impl FpsBot {
    /// Plays until told to stop, then until the room has applied every input sent; says the
    /// round and phase of each snapshot as it goes.
    async fn play(
        mut self,
        seen: watch::Sender<(u32, Phase)>,
        mut stop: watch::Receiver<bool>,
    ) -> Self {
        loop {
            let snapshot: Snapshot = next_push(&mut self.client).await;
            seen.send_replace((snapshot.round, snapshot.phase));
            self.watch.see(snapshot);
            if !*stop.borrow_and_update() {
                for _ in 0..2 {
                    let input = fps::Input {
                        seq: self.sent,
                        aim: (self.sent * 37 % 360) as u16,
                    };
                    self.points += fps::points(&self.room, &self.me, &input);
                    self.client
                        .send(&self.me, &fps::PlayerMsg::Input(input))
                        .expect("input sent");
                    self.sent += 1;
                }
            } else if self.watch.caught_up(self.sent) {
                return self;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_fps_room_moves_only_between_rounds_and_keeps_scores_rounds_and_every_input() {
    let (cluster, gateways, n1, n2) = two_nodes().await;
    let room = spot("arena");
    let players = [actor("alice"), actor("bob"), actor("carol")];
    let clients = room_with_clients(
        &gateways,
        (&n1, &n2),
        (fps::ROOM, &room),
        (fps::PLAYER, &players),
    )
    .await;

    let (stop_tx, stop) = watch::channel(false);
    let mut seen = Vec::new();
    let mut bots = Vec::new();
    for (client, me) in clients.into_iter().zip(&players) {
        let bot = FpsBot {
            client,
            me: me.clone(),
            room: room.clone(),
            sent: 0,
            points: 0,
            watch: fps::Watch::default(),
        };
        let (seen_tx, seen_rx) = watch::channel((0, Phase::Start));
        seen.push(seen_rx);
        bots.push(tokio::spawn(bot.play(seen_tx, stop.clone())));
    }

    // Ask for the move in the middle of round 2: it must wait for the round to settle.
    let first = &mut seen[0];
    let asked_in = within(
        "round 2",
        first.wait_for(|(round, phase)| *round >= 2 && *phase == Phase::Play),
    )
    .await
    .expect("bot playing")
    .0;
    let report = n1
        .move_unit(&UnitId::Spot(room.clone()), Some(n2.id().clone()))
        .await
        .expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    within(
        "three more rounds",
        first.wait_for(|(round, _)| *round >= asked_in + 3),
    )
    .await
    .expect("bot playing");
    stop_tx.send_replace(true);

    let mut done = Vec::new();
    for bot in bots {
        done.push(bot.await.expect("bot played"));
    }
    let room_report: fps::RoomReport = n1
        .request(&room, fps::RoomMsg::Report, T)
        .await
        .expect("room answers");
    for bot in &done {
        let watch = &bot.watch;
        assert_eq!(
            watch.inputs(bot.sent),
            fps::InputCheck::default(),
            "{}: every input applied once, in order",
            bot.me
        );
        assert_eq!(watch.went_back, 0, "{}: nothing went back", bot.me);
        // One move, seen between the settlement of a round and the start of the next.
        let [seen_move] = watch.moves.as_slice() else {
            panic!("{}: expected one move, saw {:?}", bot.me, watch.moves);
        };
        assert_eq!((&seen_move.from, &seen_move.to), (n1.id(), n2.id()));
        let round = seen_move.before.0;
        assert!(round == asked_in || round == asked_in + 1, "{seen_move:?}");
        assert_eq!(seen_move.before, (round, Phase::Settle), "{}", bot.me);
        assert_eq!(seen_move.after, (round + 1, Phase::Start), "{}", bot.me);
        assert_eq!(room_report.moved_after, vec![round]);
        // Scores and rounds carried on: the points are all the inputs' points, on either node.
        let last = watch.last.as_ref().expect("snapshots seen");
        assert_eq!(last.scores[&bot.me].points, bot.points, "{}", bot.me);
        assert!(last.round >= asked_in + 3);
        assert_eq!(room_report.players[&bot.me].1.points, bot.points);
        assert_eq!(bot.client.session().connects, 1, "never reconnected");
    }
    let wins: u32 = room_report.players.values().map(|(_, s)| s.wins).sum();
    assert!(wins > 0, "rounds were won: {room_report:?}");
    for bot in done {
        bot.client.close().await;
    }
    cluster.shutdown().await;
}
