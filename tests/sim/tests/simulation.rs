//! The deterministic simulator: many seeds of moves, membership changes, messages, game clients,
//! crashes and faults against the protocol core, each checked step by step (see `ferry_sim`).
//!
//! - `FERRY_SIM_SEEDS=1000000` runs that many seeds instead of the default.
//! - `FERRY_SIM_FIRST_SEED=<seed>` starts the seeds there instead of at 0 (CI explores a fresh
//!   range on every run, and prints where it starts).
//! - `FERRY_SIM_SEED=<seed>` replays one seed and prints its trace.

use std::process::Command;

use ferry_sim::{Outcome, Plan, Recipes, Rng, Shape, Step, Waits, replay, run, shrink};

const SHAPE: Shape = Shape {
    nodes: 4,
    rooms: 3,
    actors: 6,
    senders: 3,
    clients: 3,
    large: 96 * 1024,
    standby: false,
};
const STEPS: usize = 150;

/// The cluster a seed runs on: one seed in two gives some of its units states large enough to be
/// pre-copied, the others keep theirs small, which keeps the run short; one seed in three gives
/// its rooms warm standbys.
fn shape(seed: u64) -> Shape {
    let large = if seed.is_multiple_of(2) {
        SHAPE.large
    } else {
        0
    };
    Shape {
        large,
        standby: seed % 3 == 1,
        ..SHAPE
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs one seed's plan on a world of `shape`; on a violation, panics with the shortest plan
/// found, its trace, and how to run the seed again (`again`).
fn check_plan(shape: Shape, plan: &Plan, again: &str) -> Outcome {
    let seed = plan.seed;
    let outcome = run(shape, plan);
    if let Some((at, broken)) = &outcome.violation {
        let short = shrink(shape, plan);
        let replayed = replay(shape, &short);
        panic!(
            "seed {seed} broke an invariant at step {at}: {broken}\n\
             shortest plan ({} steps): {:?}\n\
             its trace:\n{}\n\
             run it again with {again}",
            short.steps.len(),
            short.steps,
            replayed.trace.join("\n")
        );
    }
    outcome
}

/// Twenty thousand seeds (or `FERRY_SIM_SEEDS`, from `FERRY_SIM_FIRST_SEED`) of 150 steps each,
/// split over two threads: no invariant breaks, and the runs do real work (moves end, messages run).
/// It prints how many messages promoted copies took over from their checkpoints' queues: about one
/// in 4,000 seeds; seed 7,513 of [`FOUND`] is one.
#[test]
fn twenty_thousand_seeds_keep_every_invariant() {
    let seeds = env_number("FERRY_SIM_SEEDS").unwrap_or(20_000);
    let first = env_number("FERRY_SIM_FIRST_SEED").unwrap_or(0);
    println!("seeds {first} to {}", first + seeds - 1);
    let halves: Vec<std::thread::JoinHandle<(usize, usize, usize)>> = (0..2u64)
        .map(|half| {
            std::thread::spawn(move || {
                let (mut moves, mut ran, mut requeued) = (0, 0, 0);
                for seed in (first + half..first + seeds).step_by(2) {
                    let again = format!(
                        "FERRY_SIM_SEED={seed} cargo test -p ferry-sim --test simulation replays -- --nocapture"
                    );
                    let outcome = check_plan(shape(seed), &Plan::generate(seed, STEPS), &again);
                    moves += outcome.moves_ended;
                    ran += outcome.tells_ran;
                    requeued += outcome.requeued;
                }
                (moves, ran, requeued)
            })
        })
        .collect();
    let (mut moves, mut ran, mut requeued) = (0, 0, 0);
    for half in halves {
        let (m, t, q) = half.join().expect("a simulation thread panicked");
        moves += m;
        ran += t;
        requeued += q;
    }
    println!("{moves} moves ended, {ran} messages ran, {requeued} taken over by promoted copies");
    // A few moves and messages a seed on average, or the simulator explores nothing.
    assert!(
        moves as u64 >= seeds,
        "{moves} moves ended over {seeds} seeds"
    );
    assert!(
        ran as u64 >= seeds * 5,
        "{ran} messages ran over {seeds} seeds"
    );
}

/// A cluster whose first node holds more large rooms than its pre-copy budget takes: each of 400
/// seeds (or `FERRY_SIM_LARGE_SEEDS`, from `FERRY_SIM_FIRST_SEED`) drains that node first, then
/// takes a random plan's steps. No invariant breaks, moves wait for leave to copy and pre-copy
/// rounds for their node's budget, as seals do for their drain's window, and some seals send the
/// rooms' own deltas.
#[test]
fn drains_of_large_rooms_wait_for_budget_and_window() {
    const LARGE: Shape = Shape {
        nodes: 4,
        rooms: 12,
        actors: 4,
        senders: 3,
        clients: 2,
        large: 768 * 1024,
        standby: false,
    };
    let seeds = env_number("FERRY_SIM_LARGE_SEEDS").unwrap_or(400);
    let first = env_number("FERRY_SIM_FIRST_SEED").unwrap_or(0);
    let mut waits = Waits::default();
    let mut recipes = Recipes::default();
    for seed in first..first + seeds {
        let mut plan = Plan::generate(seed, STEPS);
        plan.steps.insert(0, Step::Drain { node: 0 });
        let again = format!(
            "FERRY_SIM_FIRST_SEED={seed} FERRY_SIM_LARGE_SEEDS=1 cargo test --release -p ferry-sim \
             --test simulation large_rooms"
        );
        let outcome = check_plan(LARGE, &plan, &again);
        waits.budget += outcome.waits.budget;
        waits.window += outcome.waits.window;
        waits.copy += outcome.waits.copy;
        recipes.sent += outcome.recipes.sent;
        recipes.wrong += outcome.recipes.wrong;
    }
    // Moves copy only as far ahead of the seals as the window lets them, so that most find a
    // place free once they copied: fewer wait for one than for leave to copy. Rounds waited for
    // their budget 333 to 396 times in each of the first three ranges of 400 seeds.
    assert!(
        waits.copy >= seeds as usize
            && waits.budget >= seeds as usize / 2
            && waits.window >= seeds as usize / 2,
        "{waits:?} over {seeds} seeds"
    );
    // Seals reach the core's choice of a recipe of the rooms' deltas, and targets catch the
    // ones rebuilt wrong by the image's checksum (a recipe is sent in about one seed of 15 to
    // 20, and one of five is wrong: the floors leave room for the seeds' spread).
    assert!(
        recipes.sent >= seeds as usize / 40 && recipes.wrong >= seeds as usize / 200,
        "{recipes:?} over {seeds} seeds"
    );
}

/// Seeds that once broke an invariant, or that reach what broke it, kept so that what they found
/// stays fixed.
const FOUND: &[u64] = &[
    // A drained room left its node, came back rebuilt with a standby elsewhere, and was sent to
    // that standby's node; the check still held the standby the drain had first found. Since
    // drains' moves ask leave to copy before their first snapshot, this seed takes another path.
    1_112_191_153,
    // A drained room leaves its node and its drain finds it again, with a standby.
    1_112_109_058,
    // A player whose owner died waited for its room's node to end its drain, which takes no
    // rebuilds; the run was judged settled as the drain ended, before recovery's next round.
    1_115_038_940,
    // A confirmed room promoted from its standby copy lacked the follow-up its last checkpointed
    // turn had queued: checkpoints held the room's cell and not its queue.
    7_513,
];

/// Every seed of [`FOUND`] keeps every invariant, and they still reach a unit that a drain finds
/// again after it left.
#[test]
fn seeds_that_once_broke_an_invariant_keep_them() {
    let mut found_again = 0;
    for &seed in FOUND {
        let again = format!(
            "FERRY_SIM_SEED={seed} cargo test --release -p ferry-sim --test simulation a_seed -- --nocapture"
        );
        found_again += check_plan(shape(seed), &Plan::generate(seed, STEPS), &again).found_again;
    }
    assert!(
        found_again >= 1,
        "no drain found a unit again after it left"
    );
}

/// A seed run twice gives the same trace, step by step; `FERRY_SIM_SEED` picks the seed.
#[test]
fn a_seed_replays_step_by_step() {
    let seed = env_number("FERRY_SIM_SEED").unwrap_or(4242);
    let first = replay(shape(seed), &Plan::generate(seed, STEPS));
    if std::env::var("FERRY_SIM_SEED").is_ok() {
        println!("{}", first.trace.join("\n"));
        if let Some((at, broken)) = &first.violation {
            println!("broke an invariant at step {at}: {broken}");
        }
    }
    let again = replay(shape(seed), &Plan::generate(seed, STEPS));
    assert_eq!(first.trace, again.trace);
    let untraced = run(shape(seed), &Plan::generate(seed, STEPS));
    assert_eq!(
        (untraced.violation, untraced.moves_ended, untraced.tells_ran),
        (first.violation.clone(), first.moves_ended, first.tells_ran),
        "a run without its trace takes the same steps"
    );
    assert!(first.trace.len() > STEPS / 2, "{} lines", first.trace.len());
}

/// A bigger cluster: 100 nodes, 10,000 rooms, one node drained of its 100 rooms while tells keep
/// coming; the run settles with every move ended and every tell run once, in order.
#[test]
fn a_hundred_node_cluster_drains_a_node_and_settles() {
    let shape = Shape {
        nodes: 100,
        rooms: 10_000,
        actors: 2,
        senders: 20,
        clients: 1,
        large: 0,
        standby: false,
    };
    let mut steps = vec![Step::Drain { node: 7 }];
    let mut rng = Rng::new(7);
    for i in 0..4000u32 {
        steps.push(if i % 4 == 0 {
            Step::Tell {
                sender: rng.below(20) as u8,
                unit: 7,
            }
        } else {
            Step::Next(rng.below(1 << 16) as u32)
        });
    }
    let outcome = run(shape, &Plan { seed: 3, steps });
    assert_eq!(outcome.violation, None);
    // Some moves end at their own short deadline and are tried again.
    assert!(outcome.moves_ended >= 100, "{} moves", outcome.moves_ended);
    assert_eq!(
        outcome.drained,
        vec![7],
        "every room of the drained node moved, and it is safe to shut down"
    );
    assert_eq!(outcome.tells_ran, 1000);
}

/// The protocol core builds with no async runtime, socket layer or clock in its dependencies.
#[test]
fn the_core_depends_on_no_async_runtime() {
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../framework/core/Cargo.toml"
    );
    let tree = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--manifest-path",
            manifest,
            "-p",
            "ferry-core",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--offline",
        ])
        .output()
        .expect("cargo tree runs");
    assert!(
        tree.status.success(),
        "{}",
        String::from_utf8_lossy(&tree.stderr)
    );
    let tree = String::from_utf8_lossy(&tree.stdout);
    assert!(tree.contains("ferry-core"), "{tree}");
    for runtime in ["tokio", "async-std", "smol", "mio", "quinn", "futures"] {
        assert!(
            !tree
                .lines()
                .any(|l| l.split_whitespace().next() == Some(runtime)),
            "ferry-core depends on {runtime}:\n{tree}"
        );
    }
}

/// Runs `FERRY_SIM_SEEDS` seeds (1,000 by default) without stopping at the first failure, and
/// prints each kind of invariant broken with how often, its first seed, the step that broke it and
/// the length of the shortest plan that still does: where to look first.
/// `cargo test -p ferry-sim --test simulation survey -- --ignored --nocapture`
#[test]
#[ignore = "a survey to read, not a check"]
fn survey() {
    let seeds = env_number("FERRY_SIM_SEEDS").unwrap_or(1_000);
    let mut kinds: std::collections::BTreeMap<String, (u64, u64, usize, String)> =
        Default::default();
    for seed in 0..seeds {
        let outcome = run(shape(seed), &Plan::generate(seed, STEPS));
        if let Some((at, broken)) = outcome.violation {
            let kind: String = broken.chars().filter(|c| !c.is_ascii_digit()).collect();
            let entry = kinds.entry(kind).or_insert((0, seed, at, broken));
            entry.0 += 1;
        }
    }
    for (count, first, at, example) in kinds.values() {
        let short = shrink(shape(*first), &Plan::generate(*first, STEPS));
        println!(
            "{count:>6}  first seed {first:>7} at step {at:>3} (shortest plan {:>3} steps)  {example}",
            short.steps.len()
        );
    }
}
