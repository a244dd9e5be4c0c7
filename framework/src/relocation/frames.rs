//! What the source and the target of a move say to each other, on the ordered mesh stream.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::RelocationId;
use super::capture::{Manifest, QueuedOp};
use crate::cluster::authority::UnitRecord;
use crate::ids::UnitId;

/// An authority record as the source read it, with the store version a commit is conditional on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordAt {
    pub id: UnitId,
    pub record: UnitRecord,
    pub version: u64,
}

/// One frame of a move.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum RelocFrame {
    /// Source → target: a unit is coming; its records and the manifest of its capture.
    Offer {
        rel: RelocationId,
        unit: UnitId,
        records: Vec<RecordAt>,
        manifest: Manifest,
    },
    /// Source → target: one chunk of the capture.
    Chunk {
        rel: RelocationId,
        index: u32,
        bytes: Bytes,
    },
    /// Target → source: restored into a queue that does not run yet; relay may start. With how
    /// long the restore took there.
    RelayReady {
        rel: RelocationId,
        restore: Duration,
    },
    /// Target → source: the unit was refused.
    Refused { rel: RelocationId, reason: String },
    /// Source → target: relay records sent again follow; drop the ones before.
    RelayReset { rel: RelocationId },
    /// Source → target: the move was given up before the handover; drop what was staged.
    Withdraw { rel: RelocationId },
    /// Source → target: one operation that arrived after the seal.
    Relay { rel: RelocationId, op: QueuedOp },
    /// Source → target: no more relay records; their count and checksum.
    Cutover {
        rel: RelocationId,
        count: u32,
        crc: u32,
    },
    /// Target → source: recorded as owner and open. With how long the store commit took there.
    Committed { rel: RelocationId, commit: Duration },
    /// Target → source: gave up before committing.
    Aborted { rel: RelocationId, reason: String },
}
