//! A seed's plan: which pending event happens next, and when an operation or a fault comes.

/// One step of a plan. Indices are taken modulo what exists (nodes, units, members...), so every
/// step means something in every world and a shortened plan stays valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The pending event at this place (modulo how many are pending) happens: a frame arrives, the
    /// store takes a call or its answer arrives, a lane reaches a turn boundary, a restore ends, or
    /// the clock moves on to the next timer.
    Next(u32),
    /// The clock moves on this many milliseconds; every timer due meanwhile fires, in time order.
    Wait(u16),
    /// A sender tells a unit its next number.
    Tell {
        /// Which sender.
        sender: u8,
        /// Which unit.
        unit: u8,
    },
    /// A sender asks a unit its next number: a request that ends in exactly one terminal.
    Ask {
        /// Which sender.
        sender: u8,
        /// Which unit.
        unit: u8,
    },
    /// A unit is moved to a node, from wherever it runs.
    Move {
        /// Which unit (an Actor in a room moves with its room).
        unit: u8,
        /// To which node.
        to: u8,
    },
    /// Every unit a node runs is moved to the next live node.
    Drain {
        /// Which node.
        node: u8,
    },
    /// An Actor running alone on a room's node joins the room.
    Join {
        /// Which room.
        room: u8,
        /// Which of the Actors alone on the room's node.
        pick: u8,
    },
    /// A member leaves its room.
    Leave {
        /// Which room.
        room: u8,
        /// Which of its members.
        pick: u8,
    },
    /// A unit that does not exist (stopped, or never created) is created on a node.
    Create {
        /// Which unit.
        unit: u8,
        /// On which node.
        node: u8,
    },
    /// A unit is stopped where it runs.
    Stop {
        /// Which unit.
        unit: u8,
    },
    /// The unit that moved last is stopped where it runs and created again at once on another
    /// node: the routes its moves left behind must not lead its new incarnation's messages astray.
    Recreate {
        /// On which node (the next one, if it ran there).
        node: u8,
    },
    /// A node's process dies: its copies, its links' traffic and its moves are gone.
    Crash {
        /// Which node.
        node: u8,
    },
    /// A node shuts down gracefully: moves into it that have not reached their commit go back,
    /// a commit in flight is waited for, then its units end, their records are released and its
    /// process exits.
    Shutdown {
        /// Which node.
        node: u8,
    },
    /// A node whose process is gone starts again, empty, as a new process of the same id.
    Restart {
        /// Which node.
        node: u8,
    },
    /// A second process starts with a node id that a live process holds.
    Duplicate {
        /// Which node id.
        node: u8,
    },
    /// The connection between two nodes resets: what was in flight on it is lost, and what was
    /// not acknowledged is sent again on the next one.
    Reset {
        /// One end.
        a: u8,
        /// The other end.
        b: u8,
    },
    /// Nothing passes between two nodes until they heal (frames wait, in order).
    Partition {
        /// One end.
        a: u8,
        /// The other end.
        b: u8,
    },
    /// Every partition heals.
    Heal,
    /// A node cannot reach the store until the cut heals (its calls fail).
    StoreCut {
        /// Which node.
        node: u8,
    },
    /// Every node reaches the store again.
    StoreHeal,
    /// The store's answer to its next write is lost: the write landed or not.
    StoreBlind {
        /// Whether it landed.
        applied: bool,
    },
    /// The store restarts empty: everything it held is forgotten, under a new epoch.
    StoreWipe,
    /// The store fails over to a replica that lacks the last few writes it had not confirmed
    /// (their answers were lost, or said they were not replicated yet).
    StoreFailover {
        /// How many of those writes are lost, at most.
        lose: u8,
    },
    /// The next capture on a source fails (its state adapter panics).
    CaptureFails,
    /// The next restore on a target fails (its state adapter panics).
    RestoreFails,
    /// A game client binds an Actor through its gateway.
    Bind {
        /// Which client.
        client: u8,
        /// Which Actor.
        actor: u8,
    },
    /// A game client sends its bound Actor its next input.
    Input {
        /// Which client.
        client: u8,
    },
}

/// The steps one seed takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The seed it came from.
    pub seed: u64,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// SplitMix64: small, fast, and the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// How often each kind of step comes, in parts of a thousand, in a run with crashes and every
/// fault of the store.
const CHAOS: [(Kind, u16); 27] = [
    (Kind::Next, 456),
    (Kind::Wait, 60),
    (Kind::Tell, 140),
    (Kind::Ask, 40),
    (Kind::Move, 70),
    (Kind::Drain, 8),
    (Kind::Join, 20),
    (Kind::Leave, 20),
    (Kind::Create, 10),
    (Kind::Stop, 8),
    (Kind::Recreate, 8),
    (Kind::Crash, 6),
    (Kind::Shutdown, 6),
    (Kind::Restart, 8),
    (Kind::Duplicate, 4),
    (Kind::Reset, 16),
    (Kind::Partition, 8),
    (Kind::Heal, 8),
    (Kind::StoreCut, 6),
    (Kind::StoreHeal, 6),
    (Kind::StoreBlind, 20),
    (Kind::StoreWipe, 1),
    (Kind::StoreFailover, 2),
    (Kind::CaptureFails, 6),
    (Kind::RestoreFails, 6),
    (Kind::Bind, 18),
    (Kind::Input, 35),
];

/// The same in a graceful run: links reset and partition, store answers are lost and the store
/// fails over (losing what it had not confirmed), but no process dies and the store keeps what it
/// confirmed, so every accepted message must run exactly once, in order.
const GRACEFUL: [(Kind, u16); 20] = [
    (Kind::Next, 472),
    (Kind::Wait, 50),
    (Kind::Tell, 150),
    (Kind::Ask, 40),
    (Kind::Move, 70),
    (Kind::Drain, 8),
    (Kind::Join, 20),
    (Kind::Leave, 20),
    (Kind::Create, 10),
    (Kind::Stop, 8),
    (Kind::Recreate, 8),
    (Kind::Reset, 16),
    (Kind::Partition, 8),
    (Kind::Heal, 10),
    (Kind::StoreBlind, 20),
    (Kind::StoreFailover, 6),
    (Kind::CaptureFails, 6),
    (Kind::RestoreFails, 6),
    (Kind::Bind, 18),
    (Kind::Input, 40),
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Next,
    Wait,
    Tell,
    Ask,
    Move,
    Drain,
    Join,
    Leave,
    Create,
    Stop,
    Recreate,
    Crash,
    Shutdown,
    Restart,
    Duplicate,
    Reset,
    Partition,
    Heal,
    StoreCut,
    StoreHeal,
    StoreBlind,
    StoreWipe,
    StoreFailover,
    CaptureFails,
    RestoreFails,
    Bind,
    Input,
}

impl Plan {
    /// The plan of `seed`: `len` steps. One seed in three is graceful (see [`Plan::graceful`]).
    pub fn generate(seed: u64, len: usize) -> Plan {
        let mut rng = Rng::new(seed);
        let weights: &[(Kind, u16)] = if Plan::graceful_seed(seed) {
            &GRACEFUL
        } else {
            &CHAOS
        };
        let total: u64 = weights.iter().map(|(_, w)| u64::from(*w)).sum();
        let steps = (0..len)
            .map(|_| {
                let mut at = rng.below(total);
                let kind = weights
                    .iter()
                    .find(|(_, w)| {
                        let hit = at < u64::from(*w);
                        at = at.saturating_sub(u64::from(*w));
                        hit
                    })
                    .map_or(Kind::Next, |(k, _)| *k);
                let mut byte = || rng.below(256) as u8;
                match kind {
                    Kind::Next => Step::Next(u32::from(byte()) << 8 | u32::from(byte())),
                    Kind::Wait => Step::Wait(match byte() % 8 {
                        0..=2 => 50,
                        3..=4 => 400,
                        5 => 1_500,
                        6 => 4_000,
                        _ => 9_000,
                    }),
                    Kind::Tell => Step::Tell {
                        sender: byte(),
                        unit: byte(),
                    },
                    Kind::Ask => Step::Ask {
                        sender: byte(),
                        unit: byte(),
                    },
                    Kind::Move => Step::Move {
                        unit: byte(),
                        to: byte(),
                    },
                    Kind::Drain => Step::Drain { node: byte() },
                    Kind::Join => Step::Join {
                        room: byte(),
                        pick: byte(),
                    },
                    Kind::Leave => Step::Leave {
                        room: byte(),
                        pick: byte(),
                    },
                    Kind::Create => Step::Create {
                        unit: byte(),
                        node: byte(),
                    },
                    Kind::Stop => Step::Stop { unit: byte() },
                    Kind::Recreate => Step::Recreate { node: byte() },
                    Kind::Crash => Step::Crash { node: byte() },
                    Kind::Shutdown => Step::Shutdown { node: byte() },
                    Kind::Restart => Step::Restart { node: byte() },
                    Kind::Duplicate => Step::Duplicate { node: byte() },
                    Kind::Reset => Step::Reset {
                        a: byte(),
                        b: byte(),
                    },
                    Kind::Partition => Step::Partition {
                        a: byte(),
                        b: byte(),
                    },
                    Kind::Heal => Step::Heal,
                    Kind::StoreCut => Step::StoreCut { node: byte() },
                    Kind::StoreHeal => Step::StoreHeal,
                    Kind::StoreBlind => Step::StoreBlind {
                        applied: byte() % 2 == 1,
                    },
                    Kind::StoreWipe => Step::StoreWipe,
                    Kind::StoreFailover => Step::StoreFailover {
                        lose: 1 + byte() % 3,
                    },
                    Kind::CaptureFails => Step::CaptureFails,
                    Kind::RestoreFails => Step::RestoreFails,
                    Kind::Bind => Step::Bind {
                        client: byte(),
                        actor: byte(),
                    },
                    Kind::Input => Step::Input { client: byte() },
                }
            })
            .collect();
        Plan { seed, steps }
    }

    /// Whether a seed's plan is graceful: no process dies and the store loses nothing it
    /// confirmed.
    pub fn graceful_seed(seed: u64) -> bool {
        seed.is_multiple_of(3)
    }

    /// Whether this plan is graceful: none of its steps kills a process or makes the store lose
    /// what it confirmed (a shortened chaos plan may be).
    pub fn graceful(&self) -> bool {
        !self.steps.iter().any(|s| {
            matches!(
                s,
                Step::Crash { .. }
                    | Step::Shutdown { .. }
                    | Step::Restart { .. }
                    | Step::Duplicate { .. }
                    | Step::StoreCut { .. }
                    | Step::StoreWipe
            )
        })
    }

    /// Which pending event happens next while the run settles, after the plan's steps.
    pub fn settle_picks(&self) -> impl Iterator<Item = u32> {
        let mut rng = Rng::new(self.seed ^ 0x5E77_1E00);
        std::iter::repeat_with(move || rng.below(1 << 16) as u32)
    }
}
