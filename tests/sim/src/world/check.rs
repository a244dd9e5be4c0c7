//! The invariants: after every step, and once the run has settled.

use std::collections::{BTreeMap, BTreeSet};

use ferry_core::relocation::precopy::IN_FLIGHT_BYTES;
use ferry_core::witness::may_run;

use super::lanes::Cell;
use super::precopy::Copying;
use super::sessions::input_id;
use super::store::Purpose;
use super::{Life, Node, TIMES, Terminal, World, node_index, sender_id};

/// Where a unit's copies are.
#[derive(Debug, Default)]
struct Copies<'a> {
    /// Processes (node, process) that hold it in a lane that may run its turns now.
    running: Vec<(usize, u64)>,
    /// Whether any live process holds a copy at all (staged, sealed, gated or running).
    held: bool,
    /// The log of every copy, and of the one that runs it on a node's current process.
    logs: Vec<&'a Vec<(usize, u64)>>,
    log: Option<&'a Vec<(usize, u64)>>,
}

impl World {
    /// Where the touched units' copies are: one pass over every lane of every live process.
    fn copies(&self, touched: &BTreeSet<usize>) -> BTreeMap<usize, Copies<'_>> {
        let may = |node: &Node| {
            may_run(self.now, node.lease_until, true, &TIMES, || {
                node.witness.vouch(TIMES.grace)
            })
        };
        let mut copies: BTreeMap<usize, Copies<'_>> =
            touched.iter().map(|&u| (u, Copies::default())).collect();
        let processes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| (n, node, false))
            .chain(self.ghosts.iter().map(|(n, g)| (*n, g, true)));
        for (n, node, ghost) in processes {
            if !node.up {
                continue;
            }
            let runs = may(node);
            for lane in node.lanes.values() {
                let running = lane.stance.is_open() && !lane.stance.suspended();
                for (unit, cell) in &lane.cells {
                    let Some(copy) = copies.get_mut(unit) else {
                        continue;
                    };
                    copy.held = true;
                    copy.logs.push(&cell.log);
                    if running && runs {
                        copy.running.push((n, node.process));
                    }
                    if running && !ghost && copy.log.is_none() {
                        copy.log = Some(&cell.log);
                    }
                }
            }
        }
        copies
    }

    /// The log of the copy that runs the unit, if one does.
    fn running_log(&self, unit: usize) -> Option<&Vec<(usize, u64)>> {
        self.nodes
            .iter()
            .filter(|n| n.up)
            .find_map(|n| running_log(n, unit))
    }

    /// What holds after every step.
    pub fn check(&mut self) -> Result<(), String> {
        if let Some(broken) = self.broken.take() {
            return Err(broken);
        }
        for (n, node) in self.nodes.iter().enumerate() {
            if node.up && node.safe && (!node.lanes.is_empty() || !node.incoming.is_empty()) {
                return Err(format!(
                    "n{n} was reported safe to shut down, but holds {} lanes and {} moves into it",
                    node.lanes.len(),
                    node.incoming.len()
                ));
            }
        }
        self.check_in_flight()?;
        if self.touched.is_empty() {
            return Ok(());
        }
        let touched = std::mem::take(&mut self.touched);
        let mut highs = Vec::new();
        for (unit, copies) in self.copies(&touched) {
            if copies.running.len() > 1 {
                return Err(format!(
                    "u{unit} runs turns on {:?} at once",
                    copies.running
                ));
            }
            let life = &self.lives[unit];
            if life.completions > life.defers {
                return Err(format!(
                    "u{unit} heard {} move completions for {} defers",
                    life.completions, life.defers
                ));
            }
            if life.exists
                && !self.store_lost()
                && !copies.held
                && let Some((_, record)) = self.store.record(unit)
            {
                let owner = node_index(&record.owner);
                // An earlier process of the owner's id held it: the owner takes it back later.
                let earlier = record.lease_generation < self.nodes[owner].first_generation;
                let claimed = self.nodes.iter().any(|n| {
                    n.up && n.calls.values().any(|p| {
                        matches!(p, Purpose::Claim { unit: u, .. } | Purpose::ClaimRead { unit: u, .. } if *u == unit)
                    })
                });
                if self.nodes[owner].up && !claimed && !earlier {
                    return Err(format!(
                        "u{unit} is lost: no process holds it, and its record names n{owner}, which runs"
                    ));
                }
            }
            for log in &copies.logs {
                in_order(unit, log, &life.floors)?;
            }
            if let Some(log) = copies.log {
                let len = log.len();
                if len < life.high && !life.rebuilt && !life.renewed {
                    return Err(format!(
                        "u{unit}'s state went back from {} entries to {len}",
                        life.high
                    ));
                }
                highs.push((unit, len));
            }
        }
        for (unit, len) in highs {
            let life = &mut self.lives[unit];
            life.high = life.high.max(len);
        }
        Ok(())
    }

    /// A node's pre-copy rounds waiting for their answer hold at most `IN_FLIGHT_BYTES` in all,
    /// unless one round alone is larger (it then goes alone): a sealed unit's frames never wait
    /// behind more pre-copy than that on the node's links.
    fn check_in_flight(&self) -> Result<(), String> {
        let mut flying: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for (node, s) in self.outgoing.values() {
            if let Copying::Answer { bytes, .. } = s.copying {
                let (sum, rounds) = flying.entry(*node).or_default();
                *sum += bytes;
                *rounds += 1;
            }
        }
        match flying
            .into_iter()
            .find(|(_, (sum, rounds))| *sum > IN_FLIGHT_BYTES && *rounds > 1)
        {
            Some((node, (sum, rounds))) => Err(format!(
                "n{node} has {rounds} pre-copy rounds of {sum} bytes in all sent and not \
                 answered, over its budget of {IN_FLIGHT_BYTES}"
            )),
            None => Ok(()),
        }
    }

    /// A restored unit's state is, byte for byte, the state its source sealed, whatever rounds,
    /// resets and faults came between.
    pub(crate) fn check_restored(&mut self, node: usize, rel: u64, cells: &BTreeMap<usize, Cell>) {
        let sealed = self.sealed.get(&rel);
        for (u, cell) in cells {
            let want = sealed.and_then(|states| states.get(u));
            if want != Some(&cell.state) {
                let (got, want) = (describe(&cell.state), want.map_or("none".into(), describe));
                self.broken.get_or_insert(format!(
                    "n{node} restored u{u} of move {rel} with {got} of state, but its source \
                     sealed {want}"
                ));
            }
        }
    }

    /// A drain lets a move quiesce its unit only while fewer than its window's limit are past
    /// theirs (quiescing or sealed): no unit it seals waits for more than the window lets
    /// through. (A window that narrows may hold more than its new limit for a while; none
    /// enters then.)
    pub(crate) fn check_entry(&mut self, gate: u64, rel: u64) {
        let Some(g) = self.gates.get(&gate) else {
            return;
        };
        let stuck = g.window.stuck();
        let past = self
            .outgoing
            .iter()
            .filter(|(r, (_, s))| **r != rel && s.gate == Some(gate))
            .filter(|(_, (_, s))| {
                s.placed
                    .is_some_and(|(_, at)| self.now.saturating_duration_since(at) < stuck)
            })
            .count();
        if past >= g.window.limit() {
            self.broken.get_or_insert(format!(
                "move {rel} quiesced its unit in n{}'s drain while {past} moves were past their \
                 quiesce, and its window lets {} through",
                g.node,
                g.window.limit()
            ));
        }
    }

    /// Whether the store restarted empty: a record may then point anywhere, or nowhere, and only
    /// the checks that do not trust it hold.
    fn store_lost(&self) -> bool {
        self.store.epoch > 1
    }

    /// What must hold once the run has settled.
    pub fn check_settled(&self, graceful: bool) -> Result<(), String> {
        for (rel, (node, s)) in &self.outgoing {
            if self.nodes[*node].up && s.machine.end().is_none() && !self.store_lost() {
                return Err(format!("move {rel} on n{node} never ended"));
            }
        }
        for (s, sender) in self.senders.iter().enumerate() {
            let node = &self.nodes[s % self.shape.nodes];
            for (&(unit, seq), (process, ends)) in &sender.asked {
                if ends.len() > 1 || (ends.is_empty() && node.up && node.process == *process) {
                    return Err(format!(
                        "s{s}'s ask #{seq} of u{unit} ended {} times",
                        ends.len()
                    ));
                }
            }
        }
        if self.store_lost() {
            return Ok(());
        }
        for unit in 0..self.shape.units() {
            if self.lives[unit].exists && self.running_log(unit).is_none() {
                return Err(format!("u{unit} runs nowhere after settling"));
            }
        }
        if self.lossy {
            return Ok(());
        }
        for (unit, life) in self.lives.iter().enumerate() {
            if life.completions != life.defers {
                return Err(format!(
                    "u{unit} deferred {} moves but heard {} completions",
                    life.defers, life.completions
                ));
            }
        }
        if !graceful {
            return Ok(());
        }
        if self.lost > 0 {
            return Err(format!("{} messages were lost with no crash", self.lost));
        }
        for unit in 0..self.shape.units() {
            let life = &self.lives[unit];
            if !life.exists || life.renewed || life.rebuilt {
                continue;
            }
            let Some(log) = self.running_log(unit) else {
                continue;
            };
            for (s, sender) in self.senders.iter().enumerate() {
                let ran = ran_by(
                    log,
                    life,
                    sender_id(s, self.nodes[s % self.shape.nodes].process),
                );
                let sent = sender.sent.get(&unit).cloned().unwrap_or_default();
                // What must have run: every tell not reported lost, every ask answered with its
                // reply. An ask that timed out may have run; one that failed, or a tell
                // reported lost, must not have.
                let owed = |seq: &u64| match sender.asked.get(&(unit, *seq)) {
                    Some((_, ends)) => match ends.as_slice() {
                        [Terminal::Reply] => Some(true),
                        [Terminal::Timeout] => None,
                        _ => Some(false),
                    },
                    None => Some(!sender.dropped.contains(&(unit, *seq))),
                };
                let mut left = ran.iter().peekable();
                for seq in &sent {
                    let runs = left.peek() == Some(&seq);
                    match (owed(seq), runs) {
                        (Some(true), false) | (Some(false), true) => {
                            return Err(format!(
                                "u{unit}: s{s} sent {sent:?} but {ran:?} ran (#{seq} {})",
                                if runs {
                                    "ran, though it was reported failed"
                                } else {
                                    "is missing"
                                }
                            ));
                        }
                        _ => {}
                    }
                    if runs {
                        left.next();
                    }
                }
                if let Some(extra) = left.next() {
                    return Err(format!(
                        "u{unit}: s{s} sent {sent:?} but {ran:?} ran (#{extra}?)"
                    ));
                }
            }
            for (c, gateway) in self.gateways.iter().enumerate() {
                for (number, sent) in gateway.accepted(unit) {
                    let who = input_id(c, number as u64);
                    let ran = ran_by(log, life, who);
                    if ran != *sent {
                        return Err(format!(
                            "u{unit}: client {c}'s gateway took {sent:?} in session {number}, \
                             but {ran:?} ran"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// What `who` ran of a unit, in the order it ran; in the order sent for a unit whose order was
/// given up, which still runs each at most once.
fn ran_by(log: &[(usize, u64)], life: &Life, who: usize) -> Vec<u64> {
    let mut ran: Vec<u64> = log
        .iter()
        .filter(|(w, _)| *w == who)
        .map(|&(_, seq)| seq)
        .collect();
    if life.disordered {
        ran.sort_unstable();
    }
    ran
}

fn running_log(node: &Node, unit: usize) -> Option<&Vec<(usize, u64)>> {
    node.lanes
        .values()
        .filter(|l| l.stance.is_open() && !l.stance.suspended())
        .find_map(|l| l.cells.get(&unit))
        .map(|c| &c.log)
}

/// Each sender's numbers run at most once, and in the order sent (those sent to an earlier
/// incarnation of the unit, at or below its floor, aside).
fn in_order(
    unit: usize,
    log: &[(usize, u64)],
    floors: &BTreeMap<usize, u64>,
) -> Result<(), String> {
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    for &(who, seq) in log {
        if floors.get(&who).is_some_and(|floor| seq <= *floor) {
            continue;
        }
        let before = last.insert(who, seq).unwrap_or(0);
        if seq <= before {
            let what = if seq == before {
                "twice"
            } else {
                "out of order"
            };
            return Err(format!(
                "u{unit} ran #{seq} of {who} after #{before}: {what}"
            ));
        }
    }
    Ok(())
}

/// State bytes in a failure message: their length and checksum.
fn describe(state: &bytes::Bytes) -> String {
    format!(
        "{} bytes (CRC-32C {:08x})",
        state.len(),
        crc32c::crc32c(state)
    )
}
