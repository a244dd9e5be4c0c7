//! The sample games played by real clients over QUIC on a two-node cluster, their rooms moved in
//! the middle of play: each test checks what a player would see.

use std::time::Duration;

use ferry::client::{Client, ClientEvent};
use ferry::relocation::protocol::MoveEnd;
use ferry::{ActorId, Node, Registry, SessionLimits, SpotId, UnitId};
use ferry_samples::bingo::{self, Push};
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

/// Quick bingo draws, so a test plays a round in about a second.
const BINGO: bingo::Rules = bingo::Rules {
    seats: 4,
    draw_every: Duration::from_millis(25),
    prize: 90,
};

fn registry() -> Registry {
    registry_with(FPS)
}

fn registry_with(rounds: fps::Rules) -> Registry {
    let mut registry = Registry::new();
    fps::register(&mut registry, rounds);
    chat::register(&mut registry);
    bingo::register(&mut registry, BINGO);
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
    two_nodes_with(FPS, SessionLimits::default().seal_timeout).await
}

/// [`two_nodes`] with these FPS rounds, holding a moving Actor's inputs at most `seal_timeout`.
async fn two_nodes_with(
    rounds: fps::Rules,
    seal_timeout: Duration,
) -> (Cluster, Gateways, Node, Node) {
    let limits = SessionLimits {
        rate_per_second: 10_000,
        rate_burst: 10_000,
        seal_timeout,
        ..SessionLimits::default()
    };
    let gateways = Gateways::new();
    let mut cluster = Cluster::start(0, registry).await;
    let n1 = gateways
        .add(&mut cluster, "n1", registry_with(rounds), limits)
        .await;
    let n2 = gateways
        .add(&mut cluster, "n2", registry_with(rounds), limits)
        .await;
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
        let gateway = if i % 2 == 0 { node } else { other };
        let client = Client::connect(gateways.client(&[gateway]))
            .await
            .expect("client connected");
        // Bound before it joins, so the client sees everything the room tells it.
        client.bind(player).await.expect("player bound");
        node.join(player, room).await.expect("player joined");
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
    play_fps_through_a_move(two_nodes().await, Phase::Play).await;
}

/// Rounds of two seconds, and gateways that hold a moving Actor's inputs for at most one: the
/// move, asked as a round starts, waits for the round to end without holding anyone's inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn players_inputs_are_not_held_while_an_fps_room_plays_out_its_round_before_a_move() {
    let rounds = fps::Rules { round_ticks: 60 };
    let nodes = two_nodes_with(rounds, Duration::from_secs(1)).await;
    play_fps_through_a_move(nodes, Phase::Start).await;
}

/// Bots play an FPS room on n1; the room is moved to n2 once the first bot sees round 2 in
/// `ask_in`; every bot checks every input and snapshot, and none reconnects.
async fn play_fps_through_a_move(
    (cluster, gateways, n1, n2): (Cluster, Gateways, Node, Node),
    ask_in: Phase,
) {
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
        first.wait_for(|(round, phase)| *round >= 2 && *phase == ask_in),
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
    /// Says `count` lines, waiting halfway until `resume` says go on, then listens until it heard
    /// `total` lines; says how many it heard so far as it goes.
    async fn chat(
        mut self,
        (count, total): (u64, usize),
        heard: watch::Sender<usize>,
        mut resume: watch::Receiver<bool>,
    ) -> Self {
        for n in 0..count {
            if n == count / 2 {
                // Paused, but still listening, as a client does between its own lines.
                loop {
                    tokio::select! {
                        biased;
                        go = resume.wait_for(|go| *go) => {
                            go.expect("test running");
                            break;
                        }
                        line = next_push::<Line>(&mut self.client) => {
                            self.heard.push(line);
                            heard.send_replace(self.heard.len());
                        }
                    }
                }
            }
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
    let (resume_tx, resume) = watch::channel(false);
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
        tasks.push(tokio::spawn(speaker.chat(
            (LINES, total),
            heard_tx,
            resume.clone(),
        )));
    }

    // Move the room while they talk (they stop halfway until the newcomer is in).
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
    resume_tx.send_replace(true);
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

/// Receives a bingo client's pushes into `log` until one matches `until`; returns that one.
async fn bingo_until(
    client: &mut Client,
    log: &mut Vec<Push>,
    until: impl Fn(&Push) -> bool,
) -> Push {
    loop {
        let push: Push = next_push(client).await;
        log.push(push.clone());
        if until(&push) {
            return push;
        }
    }
}

/// The numbers of a round drawn in a log, in the order they came.
fn drawn_in(log: &[Push], of: u32) -> Vec<u8> {
    log.iter()
        .filter_map(|p| match p {
            Push::Drawn { round, number, .. } if *round == of => Some(*number),
            _ => None,
        })
        .collect()
}

/// Asks a client's player for its whole state and waits for it.
async fn sync(client: &mut Client, me: &ActorId, log: &mut Vec<Push>) -> bingo::PlayerView {
    client
        .send(me, &bingo::PlayerMsg::Sync { seq: 0 })
        .expect("sent");
    match bingo_until(client, log, |p| matches!(p, Push::State(_))).await {
        Push::State(view) => view,
        other => panic!("expected a state, got {other:?}"),
    }
}

/// Checks one round of a client's log against the game its room must have played: the card dealt,
/// every number drawn in order with no gap and none twice, each marked exactly when on the card.
fn check_round(log: &[Push], room: &SpotId, of: u32, me: &ActorId) {
    let order = bingo::draw_order(room, of);
    let mine = bingo::card(room, of, me);
    let mut pushes = log.iter().filter(|p| match p {
        Push::Dealt { round, .. } | Push::Drawn { round, .. } => *round == of,
        _ => false,
    });
    let Some(Push::Dealt { card, marks, .. }) = pushes.next() else {
        panic!("{me}: round {of} starts with its card: {log:?}");
    };
    assert_eq!(*card, mine, "{me}: the card of round {of}");
    let pushes: Vec<_> = pushes.collect();
    // Marks alone do not tell how many numbers were drawn before the card (numbers off the card
    // mark nothing), so the first draw seen says where the round was.
    let mut position = match pushes.first() {
        Some(Push::Drawn { position, .. }) => position - 1,
        _ => (0..=order.len())
            .find(|&k| card.marks(&order[..k]) == *marks)
            .expect("marks are those of some numbers drawn before the card"),
    };
    assert_eq!(
        card.marks(&order[..position]),
        *marks,
        "{me}: marks are those of the numbers drawn before the card"
    );
    for push in pushes {
        let Push::Drawn {
            position: at,
            number,
            marked,
            ..
        } = push
        else {
            panic!("{me}: one card per round");
        };
        position += 1;
        assert_eq!(
            (*at, *number),
            (position, order[position - 1]),
            "{me}: round {of}"
        );
        assert_eq!(*marked, card.cell(*number).is_some(), "{me}: {number}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bingo_room_and_its_players_keep_cards_draws_marks_and_rewards_through_a_move() {
    let (cluster, gateways, n1, n2) = two_nodes().await;
    let room = spot("hall");
    let players = [actor("ann"), actor("ben"), actor("cid")];
    let mut clients = room_with_clients(
        &gateways,
        (&n1, &n2),
        (bingo::ROOM, &room),
        (bingo::PLAYER, &players),
    )
    .await;
    let mut logs = vec![Vec::new(); players.len()];

    // Move the room (its players with it) a few draws into the first round.
    bingo_until(
        &mut clients[0],
        &mut logs[0],
        |p| matches!(p, Push::Drawn { round: 1, position, .. } if *position >= 5),
    )
    .await;
    let report = n1
        .move_unit(&UnitId::Spot(room.clone()), Some(n2.id().clone()))
        .await
        .expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");

    // Still in round 1 (it lasts 40 draws in this room): the marks made before the move are there.
    for ((client, me), log) in clients.iter_mut().zip(&players).zip(&mut logs) {
        let view = sync(client, me, log).await;
        let card = bingo::card(&room, 1, me);
        assert_eq!((view.round, view.card), (1, Some(card)), "{me}");
        assert_eq!(view.marks, card.marks(&drawn_in(log, 1)), "{me}");
        assert_eq!(view.seat, None);
    }

    // Play to a few draws into round 2.
    for (client, log) in clients.iter_mut().zip(&mut logs) {
        bingo_until(client, log, |p| {
            matches!(
                p,
                Push::Drawn {
                    round: 2,
                    position: 3,
                    ..
                }
            )
        })
        .await;
    }
    let order = bingo::draw_order(&room, 1);
    let cards: Vec<bingo::Card> = players.iter().map(|p| bingo::card(&room, 1, p)).collect();
    let draws = (1..=order.len())
        .find(|&k| {
            cards
                .iter()
                .any(|c| bingo::Card::wins(&c.marks(&order[..k])))
        })
        .expect("someone wins");
    assert_eq!(draws, 40, "the round this test counts on");
    let winners: Vec<ActorId> = players
        .iter()
        .zip(&cards)
        .filter(|(_, c)| bingo::Card::wins(&c.marks(&order[..draws])))
        .map(|(p, _)| p.clone())
        .collect();
    let prize = BINGO.prize / winners.len() as u64;
    for ((client, me), log) in clients.iter_mut().zip(&players).zip(&mut logs) {
        check_round(log, &room, 1, me);
        check_round(log, &room, 2, me);
        assert_eq!(
            drawn_in(log, 1),
            order[..draws],
            "{me}: no draw lost or repeated"
        );
        let over = Push::RoundOver {
            round: 1,
            winners: winners.clone(),
            prize,
        };
        assert!(log.contains(&over), "{me}: {log:?}");
        let view = sync(client, me, log).await;
        let won = if winners.contains(me) { prize } else { 0 };
        assert_eq!((view.round, view.rewards), (2, won), "{me}");
        assert_eq!(client.session().connects, 1, "never reconnected");
    }

    let state: bingo::RoomReport = n1
        .request(&room, bingo::RoomMsg::Report, T)
        .await
        .expect("room answers");
    assert_eq!(state.round, 2);
    assert_eq!(
        state.results,
        vec![bingo::RoundResult {
            round: 1,
            draws,
            winners
        }]
    );
    let dealt: Vec<(ActorId, bingo::Card)> = players
        .iter()
        .map(|p| (p.clone(), bingo::card(&room, 2, p)))
        .collect();
    assert_eq!(state.cards, dealt.into_iter().collect());
    assert!(n2.hosts(&UnitId::Spot(room.clone())));
    for client in clients {
        client.close().await;
    }
    cluster.shutdown().await;
}

/// Asks the matchmaker for a seat through a player's client, and seats the player where it says.
async fn find_room(node: &Node, client: &mut Client, me: &ActorId) -> SpotId {
    client.send(me, &bingo::PlayerMsg::FindRoom).expect("sent");
    let mut log = Vec::new();
    let Push::Seated { room } =
        bingo_until(client, &mut log, |p| matches!(p, Push::Seated { .. })).await
    else {
        unreachable!("bingo_until returns what matched");
    };
    if !node.hosts(&UnitId::Spot(room.clone())) {
        node.create_spot_on(node.id(), bingo::ROOM, &room)
            .await
            .expect("room created");
    }
    node.join(me, &room).await.expect("joined");
    room
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bingo_matchmaker_rebuilds_what_it_knew_from_the_rooms_after_a_recreate_move() {
    let (cluster, gateways, n1, n2) = two_nodes().await;
    let mut seated = Vec::new();
    for i in 1..=7 {
        let me = actor(&format!("player-{i}"));
        n1.create_actor(bingo::PLAYER, &me).await.expect("created");
        let client = Client::connect(gateways.client(&[&n1]))
            .await
            .expect("connected");
        client.bind(&me).await.expect("bound");
        seated.push((me, client));
    }
    let mut rooms = Vec::new();
    for (me, client) in &mut seated[..6] {
        rooms.push(find_room(&n1, client, me).await);
    }
    let (one, two) = (
        bingo::room_id(1).expect("id"),
        bingo::room_id(2).expect("id"),
    );
    assert_eq!(
        rooms,
        [&one, &one, &one, &one, &two, &two].map(SpotId::clone)
    );

    // The matchmaker moves with Recreate: its state stays behind.
    let matchmaker = UnitId::Spot(SpotId::new(bingo::MATCHMAKER_ID).expect("id"));
    let (home, away) = if n1.hosts(&matchmaker) {
        (&n1, &n2)
    } else {
        (&n2, &n1)
    };
    let report = home
        .move_unit(&matchmaker, Some(away.id().clone()))
        .await
        .expect("move starts");
    assert_eq!(report.end, MoveEnd::Moved, "{report:?}");
    assert!(away.hosts(&matchmaker));

    // Fresh, it asks the rooms before it seats anyone: the next seat is the free one in bingo-2.
    let (me, client) = &mut seated[6];
    assert_eq!(find_room(&n1, client, me).await, two);
    let known: bingo::MatchReport = n1
        .request(matchmaker.clone(), bingo::MatchMsg::Report, T)
        .await
        .expect("matchmaker answers");
    assert_eq!(
        known,
        bingo::MatchReport {
            known: true,
            rooms: vec![4, 3],
            waiting: 0
        }
    );
    for (_, client) in seated {
        client.close().await;
    }
    cluster.shutdown().await;
}
