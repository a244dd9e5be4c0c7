//! The sample games played by real clients over QUIC on a two-node cluster, their rooms moved in
//! the middle of play: each test checks what a player would see.

use std::time::Duration;

use ferry::client::{Client, ClientEvent};
use ferry::relocation::protocol::MoveEnd;
use ferry::{ActorId, Node, Registry, SessionLimits, SpotId, UnitId};
use ferry_samples::chat::{self, ChatterMsg, Heard, Line};
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
    chat::register(&mut registry);
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

/// A chatter's client: says its lines one at a time, each once the one before came back.
struct Speaker {
    client: Client,
    me: ActorId,
    heard: Vec<Line>,
}

impl Speaker {
    /// Says `count` lines, then listens until it heard `total` lines; says how many it heard so far
    /// as it goes.
    async fn chat(mut self, count: u64, total: usize, heard: watch::Sender<usize>) -> Self {
        for n in 0..count {
            let text = format!("{} {n}", self.me);
            self.client
                .send(&self.me, &ChatterMsg::Say(text.clone()))
                .expect("line sent");
            loop {
                let line: Line = next_push(&mut self.client).await;
                let mine = line.from == self.me && line.text == text;
                self.heard.push(line);
                heard.send_replace(self.heard.len());
                if mine {
                    break;
                }
            }
        }
        while self.heard.len() < total {
            self.heard.push(next_push(&mut self.client).await);
        }
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chat_clients_see_every_line_of_their_room_in_order_while_it_moves_and_members_come_and_go()
{
    const LINES: u64 = 60;
    let (cluster, gateways, n1, n2) = two_nodes().await;
    let room = spot("lobby");
    let speakers = [actor("ann"), actor("ben"), actor("cid")];
    let clients = room_with_clients(
        &gateways,
        (&n1, &n2),
        (chat::ROOM, &room),
        (chat::CHATTER, &speakers),
    )
    .await;
    let total = speakers.len() * LINES as usize;
    let mut heard = Vec::new();
    let mut tasks = Vec::new();
    for (client, me) in clients.into_iter().zip(&speakers) {
        let speaker = Speaker {
            client,
            me: me.clone(),
            heard: Vec::new(),
        };
        let (heard_tx, heard_rx) = watch::channel(0);
        heard.push(heard_rx);
        tasks.push(tokio::spawn(speaker.chat(LINES, total, heard_tx)));
    }

    // Move the room while they talk.
    within("40 lines", heard[0].wait_for(|n| *n >= 40))
        .await
        .expect("speaker talking");
    let report = n1
        .move_unit(&UnitId::Spot(room.clone()), Some(n2.id().clone()))
        .await
        .expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");

    // A newcomer joins the room where it is now, listens a while and leaves.
    let dan = actor("dan");
    n2.create_actor(chat::CHATTER, &dan).await.expect("created");
    let mut dan_client = Client::connect(gateways.client(&[&n1]))
        .await
        .expect("client connected");
    dan_client.bind(&dan).await.expect("bound");
    n2.join(&dan, &room).await.expect("joined");
    let mut dan_heard: Vec<Line> = Vec::new();
    for _ in 0..10 {
        dan_heard.push(next_push(&mut dan_client).await);
    }
    n2.leave(&dan).await.expect("left");

    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.expect("speaker talked"));
    }
    // One more line, said after the newcomer left: it must not reach it.
    let ann = &mut done[0];
    ann.client
        .send(&ann.me, &ChatterMsg::Say("last".into()))
        .expect("sent");
    let last: Line = next_push(&mut ann.client).await;
    assert_eq!((last.seq, last.text.as_str()), (total as u64, "last"));

    let everything = done[0].heard.clone();
    let seqs: Vec<u64> = everything.iter().map(|l| l.seq).collect();
    assert_eq!(
        seqs,
        (0..total as u64).collect::<Vec<_>>(),
        "every line once, in order"
    );
    for speaker in &done {
        assert_eq!(
            speaker.heard, everything,
            "{} heard the same lines",
            speaker.me
        );
        let own: Vec<&str> = everything
            .iter()
            .filter(|l| l.from == speaker.me)
            .map(|l| l.text.as_str())
            .collect();
        let said: Vec<String> = (0..LINES).map(|n| format!("{} {n}", speaker.me)).collect();
        assert_eq!(own, said, "{}'s lines in the order said", speaker.me);
        assert_eq!(speaker.client.session().connects, 1, "never reconnected");
    }

    // The newcomer heard a run of lines with no gap, while it was a member, and nothing after.
    let counted: Heard = n2
        .request(&dan, ChatterMsg::Count, T)
        .await
        .expect("chatter answers");
    while dan_heard.len() < counted.lines as usize {
        dan_heard.push(next_push(&mut dan_client).await);
    }
    assert_eq!(counted.out_of_order, 0);
    let first = dan_heard[0].seq;
    let dan_seqs: Vec<u64> = dan_heard.iter().map(|l| l.seq).collect();
    assert_eq!(
        dan_seqs,
        (first..first + dan_seqs.len() as u64).collect::<Vec<_>>()
    );
    assert!(first > 0 && *dan_seqs.last().expect("heard") < total as u64);
    assert_eq!(
        dan_heard,
        everything[first as usize..first as usize + dan_heard.len()]
    );

    // The room kept its last 100 lines through the move.
    let history: chat::RoomReply = n1
        .request(&room, chat::RoomMsg::History, T)
        .await
        .expect("room answers");
    let mut kept = everything[total + 1 - chat::HISTORY..].to_vec();
    kept.push(last);
    assert_eq!(history, chat::RoomReply::History(kept));

    dan_client.close().await;
    for speaker in done {
        speaker.client.close().await;
    }
    cluster.shutdown().await;
}
