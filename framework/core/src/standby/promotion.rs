//! Which copy recovery promotes when a room's owner died, and on what condition.
//!
//! The store names each room's standby ([`Named`]) once the owner's standby acknowledged a
//! checkpoint of a new series, and confirmed mode releases a turn's effects only once the store
//! names the series that holds it. So the named holder's copy, in that series or a later one,
//! holds every effect the owner released, and promoting it loses nothing anyone was told had
//! happened. The promotion is a conditional write like a rebuild's: the unit's record still names
//! the dead owner, the dead owner's descriptor is the one it was taken for dead under, and the
//! standby's record is the one the coordinator read.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::Series;
use super::replica::Replica;
use crate::authority::UnitRecord;
use crate::ids::{NodeId, ObjectGeneration, UnitId};
use crate::relocation::capture::Capture;

/// The store's record of a room's standby.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    /// The node that holds the copy.
    pub holder: NodeId,
    /// The series its copy is in, or was in when the owner wrote this: a later one holds more.
    pub series: Series,
    /// The room's incarnation: a copy of an earlier one is never promoted into a later one.
    pub incarnation: ObjectGeneration,
}

impl Named {
    /// Encodes the record as a store value.
    pub fn encode(&self) -> bytes::Bytes {
        crate::authority::encode(self)
    }

    /// Decodes a store value; a value that does not decode is reported as corrupt.
    pub fn decode(key: &str, value: &[u8]) -> Result<Self, crate::authority::CorruptRecord> {
        crate::authority::decode(key, value, "standby record")
    }
}

/// What recovery does with a room its owner left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Promotion {
    /// Its owner is not taken for dead: it may still run turns, and the room is left alone.
    Wait,
    /// Ask the holder to make its copy the room.
    Promote {
        /// The node that holds the copy.
        holder: NodeId,
        /// The oldest series the copy may be in.
        series: Series,
    },
    /// Rebuild it from nothing, and report why.
    Rebuild(Fresh),
}

/// Why a room is rebuilt from nothing rather than promoted: reported per room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Fresh {
    /// It keeps no standby, or none was ever acknowledged.
    #[error("the room had no standby; it starts again from nothing")]
    NoStandby,
    /// The standby named is of an earlier incarnation of the room.
    #[error("the room's standby is of an earlier incarnation; it starts again from nothing")]
    OtherIncarnation,
    /// The standby's node is gone too (or is the dead owner itself), or takes no rebuilds (it
    /// drains).
    #[error("the room's standby died with its owner or is draining; it starts again from nothing")]
    HolderGone,
    /// The holder no longer holds the copy the store names (its process restarted).
    #[error("the room's standby lost its copy; it starts again from nothing")]
    CopyLost,
    /// The copy did not decode or its adapters could not restore it on the holder.
    #[error("the room's standby copy could not be restored; it starts again from nothing")]
    Unrestorable,
}

/// Decides for one room whose record names `record.owner`: promote only if that owner is taken
/// for `dead` (a node that may still run turns never has its rooms promoted), the store names a
/// standby of this incarnation, and its holder is among the nodes that take rebuilds now
/// (`takers`: live and serving).
pub fn choose(
    record: &UnitRecord,
    named: Option<&Named>,
    dead: &BTreeSet<NodeId>,
    takers: &BTreeSet<NodeId>,
) -> Promotion {
    if !dead.contains(&record.owner) {
        return Promotion::Wait;
    }
    let Some(named) = named else {
        return Promotion::Rebuild(Fresh::NoStandby);
    };
    if named.incarnation != record.object_generation {
        return Promotion::Rebuild(Fresh::OtherIncarnation);
    }
    if named.holder == record.owner || !takers.contains(&named.holder) {
        return Promotion::Rebuild(Fresh::HolderGone);
    }
    Promotion::Promote {
        holder: named.holder.clone(),
        series: named.series,
    }
}

/// On the holder: the copy to promote, if it holds the named series or a later one (a later
/// series began with the whole image, taken after every effect released under the named one).
pub fn promotable(copy: Option<&Replica>, named: Series) -> Result<&Replica, Fresh> {
    copy.filter(|c| c.series() >= named).ok_or(Fresh::CopyLost)
}

/// What of a copy's capture a promotion makes units of: the room, and each member `recorded`
/// says is still the dead owner's (one that moved off since the checkpoint, or whose id was
/// freed, is left as it is now). A member left out takes its queued work and callbacks with it.
/// A queued request from the dead owner `dead` runs without its reply: nobody there waits for it,
/// and a process that comes back under that id numbers its requests afresh.
pub fn promoted(
    mut capture: Capture,
    dead: &NodeId,
    recorded: impl Fn(&UnitId) -> bool,
) -> Capture {
    let room = capture.unit.clone();
    let kept = |id: &UnitId| *id == room || recorded(id);
    capture.cells.retain(|cell| kept(&cell.id));
    capture.callbacks.retain(|(id, _)| kept(id));
    capture.ticks.retain(|(id, _)| kept(id));
    capture.journal.retain(|op| kept(&op.to));
    for op in &mut capture.journal {
        if op.reply.as_ref().is_some_and(|r| r.node == *dead) {
            op.reply = None;
        }
    }
    capture
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::Stage;
    use crate::relocation::capture::Manifest;
    use crate::standby::checkpoints::Checkpoint;
    use crate::standby::replica;

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    fn record(owner: &str) -> UnitRecord {
        UnitRecord {
            owner: node(owner),
            lease_generation: 1,
            object_generation: ObjectGeneration(5),
            owner_generation: 2,
            factory: "room".into(),
            stage: Stage::Active,
            spot: None,
            recoverable: true,
        }
    }

    fn named(holder: &str, epoch: u64) -> Named {
        Named {
            holder: node(holder),
            series: Series {
                generation: 2,
                epoch,
            },
            incarnation: ObjectGeneration(5),
        }
    }

    fn set(nodes: &[&str]) -> BTreeSet<NodeId> {
        nodes.iter().map(|n| node(n)).collect()
    }

    #[test]
    fn only_a_dead_owners_room_is_promoted_and_only_from_a_live_holder_of_this_incarnation() {
        let live = set(&["b", "c"]);
        let rec = record("a");
        assert_eq!(
            choose(&rec, Some(&named("b", 1)), &set(&[]), &live),
            Promotion::Wait
        );
        let dead = set(&["a"]);
        assert_eq!(
            choose(&rec, Some(&named("b", 1)), &dead, &live),
            Promotion::Promote {
                holder: node("b"),
                series: named("b", 1).series
            }
        );
        assert_eq!(
            choose(&rec, None, &dead, &live),
            Promotion::Rebuild(Fresh::NoStandby)
        );
        assert_eq!(
            choose(&rec, Some(&named("d", 1)), &dead, &live),
            Promotion::Rebuild(Fresh::HolderGone)
        );
        let mut other = named("b", 1);
        other.incarnation = ObjectGeneration(4);
        assert_eq!(
            choose(&rec, Some(&other), &dead, &live),
            Promotion::Rebuild(Fresh::OtherIncarnation)
        );
    }

    #[test]
    fn the_holder_promotes_the_named_series_or_a_later_one_only() {
        let whole = |epoch| Checkpoint {
            series: Series {
                generation: 2,
                epoch,
            },
            number: 1,
            turn: 1,
            manifest: Manifest {
                len: 1,
                chunks: 1,
                crc: crc32c::crc32c(b"x"),
                base: None,
                recipe: None,
            },
            pieces: vec![(0, bytes::Bytes::from_static(b"x"))],
        };
        let mut held = None;
        assert_eq!(
            promotable(held.as_ref(), named("b", 1).series),
            Err(Fresh::CopyLost)
        );
        replica::apply(&mut held, &whole(2), false).unwrap();
        assert!(promotable(held.as_ref(), named("b", 2).series).is_ok());
        assert!(promotable(held.as_ref(), named("b", 1).series).is_ok());
        assert_eq!(
            promotable(held.as_ref(), named("b", 3).series),
            Err(Fresh::CopyLost)
        );
    }

    #[test]
    fn a_promotion_leaves_out_a_member_that_is_no_longer_the_dead_owners_with_its_work() {
        use crate::ids::{ActorId, SpotId};
        use crate::relocation::capture::{CellCapture, MembershipData, QueuedOp};
        let room = UnitId::Spot(SpotId::new("r").unwrap());
        let stayed = UnitId::Actor(ActorId::new("stayed").unwrap());
        let left = UnitId::Actor(ActorId::new("left").unwrap());
        let cell = |id: &UnitId| CellCapture {
            id: id.clone(),
            factory: "f".into(),
            state: None,
            timers: Vec::new(),
            membership: MembershipData::Spot(Vec::new()),
            binding: None,
        };
        let op = |to: &UnitId, asker: Option<&str>| QueuedOp {
            to: to.clone(),
            payload: bytes::Bytes::from_static(b"m"),
            session: None,
            reply: asker.map(|asker| crate::reply::ReplyTo {
                node: node(asker),
                request: 7,
            }),
        };
        let capture = Capture {
            unit: room.clone(),
            cells: vec![cell(&room), cell(&stayed), cell(&left)],
            callbacks: Vec::new(),
            ticks: Vec::new(),
            journal: vec![
                op(&left, None),
                op(&room, Some("n1")),
                op(&stayed, Some("n2")),
                op(&left, None),
            ],
        };
        let kept = promoted(capture, &node("n1"), |id| *id == stayed);
        let cells: Vec<&UnitId> = kept.cells.iter().map(|c| &c.id).collect();
        assert_eq!(
            cells,
            [&room, &stayed],
            "the room always, and the member still recorded"
        );
        let queued: Vec<&UnitId> = kept.journal.iter().map(|op| &op.to).collect();
        assert_eq!(
            queued,
            [&room, &stayed],
            "each queued message once, in order"
        );
        let askers: Vec<Option<&str>> = kept
            .journal
            .iter()
            .map(|op| op.reply.as_ref().map(|r| r.node.as_str()))
            .collect();
        assert_eq!(
            askers,
            [None, Some("n2")],
            "the dead owner's own request runs unanswered; another node's is answered"
        );
    }
}
