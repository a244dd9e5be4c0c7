//! The standby's side: the copy of a room it holds, changed only by the next checkpoint of its
//! series, or replaced by the whole image that starts a later series.

use bytes::Bytes;

use super::Series;
use super::checkpoints::Checkpoint;
use crate::relocation::assembly::Assembly;
use crate::relocation::capture::TransferError;
use crate::relocation::precopy::NoDeltas;

/// Why a standby did not apply a checkpoint. The owner starts a new series with the whole image,
/// except after [`Refusal::Stale`]: a later owner runs the room, and the sender stops
/// checkpointing it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The checkpoint belongs to an older series than the copy: its owner no longer runs the
    /// room as this standby knows it.
    #[error(
        "checkpoint of series {got:?} is older than the copy held here ({held:?}); its sender no longer owns the room and should stop checkpointing it"
    )]
    Stale {
        /// The series of the copy held.
        held: Series,
        /// The series of the checkpoint.
        got: Series,
    },
    /// Applying it would skip a checkpoint.
    #[error(
        "checkpoint {got} would skip what follows checkpoint {held}; the owner must send the whole image in a new series"
    )]
    Gap {
        /// The number of the checkpoint held (0: none).
        held: u64,
        /// The number of the checkpoint refused.
        got: u64,
    },
    /// The checkpoint patches an image this standby does not hold.
    #[error(
        "the checkpoint patches a base this standby does not hold; the owner must send the whole image in a new series"
    )]
    BaseLost,
    /// This node runs the room: it keeps no standby of it.
    #[error(
        "this node runs the room and keeps no standby of it; the owner must choose another holder"
    )]
    Owner,
    /// Its pieces did not add up to the image it announced.
    #[error(
        "the checkpoint's pieces are damaged ({0}); the owner must send the whole image in a new series"
    )]
    Damaged(TransferError),
}

/// What applying a checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It is the copy now.
    New,
    /// It was applied before (its answer was lost): acknowledge it again.
    Again,
}

/// A standby's replica of a room: the image of the last checkpoint it applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    series: Series,
    number: u64,
    turn: u64,
    image: Bytes,
}

impl Replica {
    /// The series of the last checkpoint applied.
    pub fn series(&self) -> Series {
        self.series
    }

    /// The number of the last checkpoint applied.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The last of the room's turns the copy contains.
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// The room's image as of that checkpoint.
    pub fn image(&self) -> &Bytes {
        &self.image
    }

    /// Whether an owner's drop of `series` or an older one ends this copy: a copy of a later
    /// series belongs to a later owner, or to a series that began after the drop was sent.
    pub fn dropped_by(&self, series: Series) -> bool {
        self.series <= series
    }
}

/// Applies `checkpoint` to the copy `held` (none yet: `None`), on a node that runs the room
/// (`runs_room`) or not. Only the checkpoint after the one held, patching exactly its image, or
/// the first (whole) checkpoint of a later series, changes the copy.
pub fn apply(
    held: &mut Option<Replica>,
    checkpoint: &Checkpoint,
    runs_room: bool,
) -> Result<Applied, Refusal> {
    if runs_room {
        return Err(Refusal::Owner);
    }
    let base = match held.as_ref() {
        Some(copy) if checkpoint.series < copy.series => {
            return Err(Refusal::Stale {
                held: copy.series,
                got: checkpoint.series,
            });
        }
        Some(copy) if checkpoint.series == copy.series => {
            if checkpoint.number <= copy.number {
                return Ok(Applied::Again);
            }
            if checkpoint.number > copy.number + 1 {
                return Err(Refusal::Gap {
                    held: copy.number,
                    got: checkpoint.number,
                });
            }
            Some(copy.image.to_vec())
        }
        _ if checkpoint.number != 1 => {
            return Err(Refusal::Gap {
                held: 0,
                got: checkpoint.number,
            });
        }
        _ => None,
    };
    let image = assemble(checkpoint, base)?;
    *held = Some(Replica {
        series: checkpoint.series,
        number: checkpoint.number,
        turn: checkpoint.turn,
        image: Bytes::from(image),
    });
    Ok(Applied::New)
}

fn assemble(checkpoint: &Checkpoint, base: Option<Vec<u8>>) -> Result<Vec<u8>, Refusal> {
    let damaged = |e: TransferError| match e {
        TransferError::BaseLost => Refusal::BaseLost,
        other => Refusal::Damaged(other),
    };
    let mut assembly = Assembly::new(checkpoint.manifest, base).map_err(damaged)?;
    for (index, (offset, bytes)) in checkpoint.pieces.iter().enumerate() {
        assembly
            .add(index as u32, *offset, bytes)
            .map_err(damaged)?;
    }
    assembly.image(&NoDeltas).map_err(damaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relocation::capture::{Base, Manifest};

    fn series(generation: u64, epoch: u64) -> Series {
        Series { generation, epoch }
    }

    fn checkpoint(series: Series, number: u64, image: &[u8], base: Option<&[u8]>) -> Checkpoint {
        Checkpoint {
            series,
            number,
            turn: number,
            manifest: Manifest {
                len: image.len() as u64,
                chunks: 1,
                crc: crc32c::crc32c(image),
                base: base.map(Base::of),
                recipe: None,
            },
            pieces: vec![(0, Bytes::copy_from_slice(image))],
        }
    }

    #[test]
    fn checkpoints_apply_in_order_and_never_skip() {
        let s = series(1, 1);
        let mut held = None;
        assert_eq!(
            apply(&mut held, &checkpoint(s, 2, b"b", None), false),
            Err(Refusal::Gap { held: 0, got: 2 })
        );
        assert_eq!(
            apply(&mut held, &checkpoint(s, 1, b"a", None), false),
            Ok(Applied::New)
        );
        assert_eq!(
            apply(&mut held, &checkpoint(s, 3, b"c", Some(b"b")), false),
            Err(Refusal::Gap { held: 1, got: 3 })
        );
        assert_eq!(
            apply(&mut held, &checkpoint(s, 2, b"c", Some(b"x")), false),
            Err(Refusal::BaseLost)
        );
        assert_eq!(
            apply(&mut held, &checkpoint(s, 2, b"b", Some(b"a")), false),
            Ok(Applied::New)
        );
        let copy = held.clone().unwrap();
        assert_eq!(
            (copy.number(), copy.turn(), copy.image().as_ref()),
            (2, 2, &b"b"[..])
        );
        assert_eq!(
            apply(&mut held, &checkpoint(s, 1, b"a", None), false),
            Ok(Applied::Again)
        );
        assert_eq!(held.unwrap().image().as_ref(), b"b");
    }

    #[test]
    fn an_older_series_never_replaces_a_newer_one_and_a_newer_one_starts_whole() {
        let mut held = None;
        apply(&mut held, &checkpoint(series(2, 1), 1, b"new", None), false).unwrap();
        assert!(matches!(
            apply(&mut held, &checkpoint(series(1, 9), 1, b"old", None), false),
            Err(Refusal::Stale { .. })
        ));
        assert_eq!(
            apply(
                &mut held,
                &checkpoint(series(2, 2), 1, b"d", Some(b"new")),
                false
            ),
            Err(Refusal::BaseLost)
        );
        assert_eq!(
            apply(
                &mut held,
                &checkpoint(series(2, 2), 1, b"newer", None),
                false
            ),
            Ok(Applied::New)
        );
        assert_eq!(held.unwrap().series(), series(2, 2));
    }

    #[test]
    fn a_drop_ends_only_a_copy_of_its_series_or_an_older_one() {
        let mut held = None;
        apply(&mut held, &checkpoint(series(2, 2), 1, b"a", None), false).unwrap();
        let copy = held.unwrap();
        assert!(copy.dropped_by(series(2, 2)));
        assert!(copy.dropped_by(series(3, 1)));
        assert!(!copy.dropped_by(series(2, 1)));
    }

    #[test]
    fn the_node_that_runs_the_room_or_damaged_pieces_are_refused() {
        let mut held = None;
        assert_eq!(
            apply(&mut held, &checkpoint(series(1, 1), 1, b"a", None), true),
            Err(Refusal::Owner)
        );
        let mut bad = checkpoint(series(1, 1), 1, b"a", None);
        bad.manifest.crc ^= 1;
        assert!(matches!(
            apply(&mut held, &bad, false),
            Err(Refusal::Damaged(_))
        ));
        assert_eq!(held, None);
    }

    proptest::proptest! {
        /// Whatever the changes, losses and refusals, a standby's copy is the image of the last
        /// checkpoint it acknowledged, and its numbers follow each other within a series.
        #[test]
        fn the_copy_is_always_the_last_acknowledged_image(
            steps in proptest::collection::vec((0usize..120_000, 0usize..20_000, 0u8..4), 1..30),
        ) {
            use crate::standby::Policy;
            use crate::standby::checkpoints::{Budget, Checkpoints, Take};
            let now = std::time::Instant::now();
            let mut budget = Budget::default();
            let mut owner = Checkpoints::new(Policy::Confirmed, series(1, 1));
            owner.aim(Some(crate::ids::NodeId::new("b").unwrap()), &mut budget);
            let mut held: Option<Replica> = None;
            let mut state = vec![7u8; 90_000];
            let mut last: Option<(Series, u64)> = None;
            for (at, len, fault) in steps {
                let at = at.min(state.len());
                let end = (at + len).min(state.len() + 5_000);
                state.resize(state.len().max(end), 0);
                for b in &mut state[at..end] {
                    *b = b.wrapping_add(1);
                }
                owner.turn(now);
                let image = Bytes::from(state.clone());
                let Take::Ship(cp) = owner.take(now, image.clone(), &mut budget) else {
                    continue;
                };
                if fault == 0 {
                    held = None;
                }
                match apply(&mut held, &cp, false) {
                    Ok(Applied::New) => {
                        let copy = held.as_ref().unwrap();
                        proptest::prop_assert_eq!(copy.image(), &image);
                        if let Some((s, n)) = last && s == cp.series {
                            proptest::prop_assert_eq!(cp.number, n + 1);
                        } else {
                            proptest::prop_assert_eq!(cp.number, 1);
                        }
                        last = Some((cp.series, cp.number));
                        if fault == 1 {
                            owner.restart(&mut budget);
                        } else {
                            owner.acked(cp.series, cp.number, &mut budget);
                        }
                    }
                    Ok(Applied::Again) => proptest::prop_assert!(false, "shipped twice"),
                    Err(_) => owner.refused(cp.series, cp.number, &mut budget),
                }
            }
            proptest::prop_assert!(budget.used() == 0);
        }
    }
}
