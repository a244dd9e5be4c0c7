//! A seed's plan: which pending event happens next, and when an operation or a fault comes.

/// One step of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The pending event at this place (modulo how many are pending) happens.
    Next(u32),
    /// A sender tells a unit its next number.
    Tell {
        /// Which sender.
        sender: u8,
        /// Which unit.
        unit: u8,
    },
    /// A unit is moved to a node (from wherever it runs).
    Move {
        /// Which unit.
        unit: u8,
        /// To which node.
        to: u8,
    },
    /// Every unit a node runs is moved to the next node.
    Drain {
        /// Which node.
        node: u8,
    },
    /// A node dies: its copies, its links' traffic and its moves are gone.
    Crash {
        /// Which node.
        node: u8,
    },
    /// A dead node starts again, empty, as a new incarnation.
    Restart {
        /// Which node.
        node: u8,
    },
    /// Survivors rebuild the units whose records name a dead node.
    Recover,
    /// The connection between two nodes resets: what was in flight on it is lost.
    Reset {
        /// One end.
        a: u8,
        /// The other end.
        b: u8,
    },
    /// The store's answer to its next write is lost: the write landed or not.
    StoreBlind {
        /// Whether it landed.
        applied: bool,
    },
    /// The next restore on a target fails (its state adapter panics).
    RestoreFails,
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

impl Plan {
    /// The plan of `seed`: `len` steps over `nodes` nodes, `units` units and `senders` senders.
    pub fn generate(seed: u64, len: usize, nodes: usize, units: usize, senders: usize) -> Plan {
        let mut rng = Rng::new(seed);
        let mut pick = |n: usize| rng.below(n as u64) as u8;
        let steps = (0..len)
            .map(|_| match pick(100) {
                0..=51 => Step::Next(u32::from(pick(251))),
                52..=71 => Step::Tell {
                    sender: pick(senders),
                    unit: pick(units),
                },
                72..=80 => Step::Move {
                    unit: pick(units),
                    to: pick(nodes),
                },
                81..=82 => Step::Drain { node: pick(nodes) },
                83..=84 => Step::Crash { node: pick(nodes) },
                85..=86 => Step::Restart { node: pick(nodes) },
                87..=88 => Step::Recover,
                89..=93 => Step::Reset {
                    a: pick(nodes),
                    b: pick(nodes),
                },
                94..=97 => Step::StoreBlind {
                    applied: pick(2) == 1,
                },
                _ => Step::RestoreFails,
            })
            .collect();
        Plan { seed, steps }
    }

    /// Which pending event happens next while the run settles, after the plan's steps.
    pub fn settle_picks(&self) -> impl Iterator<Item = u32> {
        let mut rng = Rng::new(self.seed ^ 0x5E77_1E00);
        std::iter::repeat_with(move || rng.below(1 << 16) as u32)
    }
}
