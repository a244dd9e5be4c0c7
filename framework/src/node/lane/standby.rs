//! A lane's part in its room's standby: the room's checkpoints start when it opens here, are
//! taken at turn boundaries (and when one falls due while the room is idle), and end when the
//! room leaves the node. A lane whose room keeps no standby does none of this.

use tokio::time::Instant;

use super::Lane;
use crate::ids::UnitId;
use crate::unit::lane::Owned;

impl Lane {
    /// The room opened here, recorded as `owned`: its checkpoints start if its factory keeps a
    /// standby.
    pub(super) fn standby_open(&mut self, owned: Owned, now: Instant) {
        let Some(unit) = self.primary_spot() else {
            return;
        };
        let Some(cell) = self.cells.get(&unit) else {
            return;
        };
        let room = self
            .node
            .standby_start(unit, cell.info(), owned, self.me.clone());
        if let Some(old) = std::mem::replace(&mut self.standby, room) {
            self.node.standby_end(&old);
        }
        self.standby_checkpoint(now);
    }

    /// A turn ran on the room at `now`: counted, and a checkpoint taken if one may go. Returns
    /// the turn's number, under which its effects are held (0: the room keeps no standby).
    pub(super) fn standby_turn(&mut self, now: Instant) -> u64 {
        let Some(room) = &self.standby else {
            return 0;
        };
        let turn = self.node.standby_turn(room, now);
        self.standby_checkpoint(now);
        turn
    }

    /// Takes a checkpoint if one may go now, with the image a pre-copy round would take; and
    /// sets when to look again if no turn comes first.
    pub(super) fn standby_checkpoint(&mut self, now: Instant) {
        let Some(room) = self.standby.clone() else {
            return;
        };
        self.standby_due = self.node.standby_checkpoint(&room, now, || self.snapshot());
    }

    /// Whether the room's next checkpoint fell due by `now` with no turn since.
    pub(super) fn standby_due_by(&self, now: Instant) -> bool {
        self.standby_due.is_some_and(|due| due <= now)
    }

    /// Unit `unit` left this node: if it is the room, its checkpoints end.
    pub(super) fn standby_left(&mut self, unit: &UnitId) {
        if self.standby.as_ref().is_some_and(|r| r.unit == *unit) {
            self.standby_gone();
        }
    }

    /// The room left this node (moved away, stopped, or the node shuts down): its checkpoints
    /// end, and its holder drops the copy.
    pub(super) fn standby_gone(&mut self) {
        self.standby_due = None;
        if let Some(room) = self.standby.take() {
            self.node.standby_end(&room);
        }
    }
}
