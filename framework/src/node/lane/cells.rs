//! The units a lane runs: found by slot for each message, by id for everything else.

use foldhash::HashMap;

use crate::ids::UnitId;
use crate::node::handle::Node;
use crate::unit::cell::UnitCell;
use crate::unit::lane::Slot;

/// A lane's cells, each under its unit's slot.
///
/// A message turn finds its cell by the slot alone, so the lane never reads or clones the id of
/// the unit it runs a message for.
#[derive(Default)]
pub(super) struct Cells {
    by_slot: HashMap<Slot, Box<dyn UnitCell<Node>>>,
    slots: HashMap<UnitId, Slot>,
}

impl Cells {
    pub fn insert(&mut self, slot: Slot, cell: Box<dyn UnitCell<Node>>) {
        self.slots.insert(cell.id().clone(), slot);
        self.by_slot.insert(slot, cell);
    }

    /// Takes a unit's cell out, with its slot.
    pub fn remove(&mut self, id: &UnitId) -> Option<(Slot, Box<dyn UnitCell<Node>>)> {
        let slot = self.slots.remove(id)?;
        self.by_slot.remove(&slot).map(|cell| (slot, cell))
    }

    pub fn clear(&mut self) {
        self.by_slot.clear();
        self.slots.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.by_slot.is_empty()
    }

    pub fn contains(&self, id: &UnitId) -> bool {
        self.slots.contains_key(id)
    }

    pub fn slot(&self, id: &UnitId) -> Option<Slot> {
        self.slots.get(id).copied()
    }

    pub fn get(&self, id: &UnitId) -> Option<&dyn UnitCell<Node>> {
        self.at(self.slot(id)?)
    }

    pub fn get_mut(&mut self, id: &UnitId) -> Option<&mut Box<dyn UnitCell<Node>>> {
        let slot = self.slot(id)?;
        self.at_mut(slot)
    }

    /// The cell of the unit in `slot`, if it runs here.
    pub fn at(&self, slot: Slot) -> Option<&dyn UnitCell<Node>> {
        self.by_slot.get(&slot).map(|cell| &**cell)
    }

    pub fn at_mut(&mut self, slot: Slot) -> Option<&mut Box<dyn UnitCell<Node>>> {
        self.by_slot.get_mut(&slot)
    }

    pub fn ids(&self) -> impl Iterator<Item = &UnitId> {
        self.slots.keys()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Slot, &dyn UnitCell<Node>)> {
        self.by_slot.iter().map(|(slot, cell)| (*slot, &**cell))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Slot, &mut Box<dyn UnitCell<Node>>)> {
        self.by_slot.iter_mut().map(|(slot, cell)| (*slot, cell))
    }
}
