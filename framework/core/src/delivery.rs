//! Delivery across connections, as plain data: what a link sent and the peer has not yet
//! acknowledged, and what a link received from each peer incarnation. No sockets, no clock.
//!
//! Frames to one peer are numbered 1, 2, 3, ... per sending incarnation. The numbers are not
//! written into each frame: every stream starts with a resume message
//! naming the number of its first frame, and the frames after it count up from there, which
//! the one ordered stream makes exact. The receiver acknowledges cumulatively; the sender
//! keeps every frame until it is acknowledged and sends what is kept again, first and in
//! order, on the next connection. The receiver drops numbers it already delivered, so a
//! frame is delivered at most once per receiving incarnation and, while both incarnations
//! live, exactly once, unless the sender was fenced (it may have lost its owner lease): it then
//! drops what it kept and resumes from its next number, and the receiver takes the gap.

use std::collections::VecDeque;

use bytes::Bytes;

/// The frames sent to one peer and not yet acknowledged by it, kept as the runs they were
/// written in (a run is one buffer holding a number of frames back to back).
///
/// A run is forgotten once its last frame is acknowledged. A run acknowledged in part is sent
/// again whole: the receiver drops the numbers it already delivered.
#[derive(Debug)]
pub struct Outbox {
    /// The number the next new frame gets.
    next: u64,
    /// Unacknowledged runs, oldest first.
    runs: VecDeque<Kept>,
    bytes: usize,
    /// The highest number the peer acknowledged.
    acked: u64,
    /// The peer incarnation the kept frames were sent to, once a link came up.
    peer: Option<u64>,
}

#[derive(Debug)]
struct Kept {
    /// The number of its first frame.
    first: u64,
    frames: u64,
    run: Bytes,
}

impl Kept {
    fn last(&self) -> u64 {
        self.first + self.frames - 1
    }
}

/// Frames kept for a peer that will never acknowledge them.
#[derive(Debug, Default)]
pub struct Unacked {
    /// The runs, oldest first.
    pub runs: Vec<Bytes>,
    /// How many frames at the start of the first run the peer did acknowledge: those are not lost.
    pub acknowledged: usize,
}

impl Unacked {
    /// Whether nothing was lost.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            next: 1,
            runs: VecDeque::new(),
            bytes: 0,
            acked: 0,
            peer: None,
        }
    }
}

impl Outbox {
    /// Keeps a run of `frames` frames (at least one) until its last is acknowledged; returns the
    /// number of its first frame.
    pub fn push(&mut self, run: Bytes, frames: usize) -> u64 {
        let first = self.next;
        let frames = (frames as u64).max(1);
        self.bytes += run.len();
        self.runs.push_back(Kept { first, frames, run });
        self.next += frames;
        first
    }

    /// The number of the oldest kept frame (or of the next new one when none is kept).
    pub fn first(&self) -> u64 {
        self.runs.front().map_or(self.next, |kept| kept.first)
    }

    /// Notes that the peer delivered every frame up to and including `upto`, and forgets the
    /// runs it delivered whole.
    pub fn ack(&mut self, upto: u64) {
        self.acked = self.acked.max(upto.min(self.next - 1));
        while let Some(kept) = self.runs.front() {
            if kept.last() > self.acked {
                break;
            }
            self.bytes -= kept.run.len();
            self.runs.pop_front();
        }
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Frames sent and not acknowledged.
    pub fn len(&self) -> usize {
        if self.runs.is_empty() {
            return 0;
        }
        (self.next - self.first().max(self.acked + 1)) as usize
    }

    /// Whether every frame sent was acknowledged.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The kept runs, oldest first, to send again on a new connection from number
    /// [`Outbox::first`].
    pub fn pending(&self) -> impl Iterator<Item = &Bytes> {
        self.runs.iter().map(|kept| &kept.run)
    }

    /// A link came up with peer incarnation `instance`. Frames kept for an earlier incarnation
    /// can never be acknowledged (that process is gone): they are given back for the caller to
    /// report as lost.
    pub fn connected(&mut self, instance: u64) -> Unacked {
        let lost = match self.peer {
            Some(old) if old != instance => self.clear(),
            _ => Unacked::default(),
        };
        self.peer = Some(instance);
        lost
    }

    /// Gives back every kept frame (the peer is gone for good).
    pub fn clear(&mut self) -> Unacked {
        let acknowledged = self
            .runs
            .front()
            .map_or(0, |kept| self.acked.saturating_sub(kept.first - 1) as usize);
        self.bytes = 0;
        self.acked = self.next - 1;
        Unacked {
            runs: self.runs.drain(..).map(|kept| kept.run).collect(),
            acknowledged,
        }
    }
}

/// What has been delivered from one peer, per its incarnation.
#[derive(Debug, Default)]
pub struct Inbox {
    /// The incarnation counted, `None` before the first frame.
    instance: Option<u64>,
    /// The highest number delivered from that incarnation.
    delivered: u64,
}

impl Inbox {
    /// Whether frame `seq` of incarnation `instance` is new and should be delivered; a new
    /// incarnation starts the count again.
    pub fn admit(&mut self, instance: u64, seq: u64) -> bool {
        if self.instance != Some(instance) {
            self.instance = Some(instance);
            self.delivered = 0;
        }
        if seq <= self.delivered {
            return false;
        }
        self.delivered = seq;
        true
    }

    /// What to acknowledge: the incarnation and the highest number delivered from it.
    pub fn ack(&self) -> Option<(u64, u64)> {
        self.instance.map(|i| (i, self.delivered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(n: u8) -> Bytes {
        Bytes::from(vec![n; usize::from(n)])
    }

    #[test]
    fn frames_are_numbered_and_kept_until_acknowledged() {
        let mut out = Outbox::default();
        assert_eq!(out.first(), 1);
        assert_eq!(
            (out.push(b(1), 1), out.push(b(2), 1), out.push(b(3), 1)),
            (1, 2, 3)
        );
        assert_eq!((out.len(), out.bytes()), (3, 6));
        out.ack(2);
        assert_eq!((out.first(), out.len(), out.bytes()), (3, 1, 3));
        // Stale and repeated acks change nothing; an ack past what was sent stops at the end.
        out.ack(1);
        out.ack(2);
        assert_eq!(out.first(), 3);
        out.ack(99);
        assert_eq!((out.first(), out.len(), out.bytes()), (4, 0, 0));
        assert!(out.is_empty());
        assert_eq!(out.push(b(4), 1), 4);
    }

    #[test]
    fn a_new_connection_resends_the_unacknowledged_in_order() {
        let mut out = Outbox::default();
        assert!(out.connected(7).is_empty());
        for n in 1..=5 {
            out.push(b(n), 1);
        }
        out.ack(2);
        // Same incarnation again (a redial): nothing is lost, 3..=5 go again from number 3.
        assert!(out.connected(7).is_empty());
        assert_eq!(out.first(), 3);
        let again: Vec<u8> = out.pending().map(|f| f[0]).collect();
        assert_eq!(again, [3, 4, 5]);
    }

    /// A fenced sender drops what it kept and resumes from its next number; the receiver takes
    /// the frames after the gap, once each, and none from before it again.
    #[test]
    fn frames_after_a_dropped_run_are_delivered_across_the_gap() {
        let mut out = Outbox::default();
        let mut inbox = Inbox::default();
        out.connected(7);
        for n in 1..=5 {
            out.push(b(n), 1);
        }
        for seq in 1..=2 {
            assert!(inbox.admit(3, seq));
        }
        let dropped = out.clear();
        assert_eq!((dropped.runs.len(), out.len()), (5, 0));
        assert!(out.connected(7).is_empty());
        assert_eq!(
            out.first(),
            6,
            "the next link resumes after what was dropped"
        );
        assert_eq!(out.push(b(6), 1), 6);
        let admitted: Vec<bool> = [6, 7, 6, 2]
            .iter()
            .map(|&seq| inbox.admit(3, seq))
            .collect();
        assert_eq!(admitted, [true, true, false, false]);
    }

    #[test]
    fn a_restarted_peer_makes_the_unacknowledged_lost() {
        let mut out = Outbox::default();
        out.connected(7);
        for n in 1..=5 {
            out.push(b(n), 1);
        }
        out.ack(1);
        let lost = out.connected(8);
        let lost_frames: Vec<u8> = lost.runs.iter().map(|f| f[0]).collect();
        assert_eq!(lost_frames, [2, 3, 4, 5], "each lost frame, in order");
        assert_eq!(lost.acknowledged, 0);
        assert_eq!((out.len(), out.bytes()), (0, 0));
        // Numbering goes on; the new incarnation takes whatever number comes first.
        assert_eq!(out.push(b(6), 1), 6);
        assert_eq!(out.clear().runs.len(), 1);
    }

    #[test]
    fn a_run_is_kept_until_its_last_frame_is_acknowledged_and_sent_again_whole() {
        let mut out = Outbox::default();
        out.connected(7);
        assert_eq!(out.push(b(3), 3), 1);
        assert_eq!(out.push(b(2), 2), 4);
        assert_eq!((out.len(), out.bytes()), (5, 5));
        out.ack(2);
        // Frames 1 and 2 arrived; their run stays, for frame 3.
        assert_eq!((out.first(), out.len(), out.bytes()), (1, 3, 5));
        out.ack(3);
        assert_eq!((out.first(), out.len(), out.bytes()), (4, 2, 2));
        out.ack(4);
        assert!(out.connected(7).is_empty(), "a redial loses nothing");
        assert_eq!(out.first(), 4, "the run of 4 and 5 goes again whole");
        assert_eq!(out.pending().count(), 1);
        // The peer restarted: of the run kept, frame 4 was acknowledged, frame 5 is lost.
        let lost = out.connected(8);
        assert_eq!((lost.runs.len(), lost.acknowledged), (1, 1));
        assert_eq!((out.len(), out.first()), (0, 6));
    }

    #[test]
    fn the_receiver_drops_what_it_already_delivered() {
        let mut inbox = Inbox::default();
        assert_eq!(inbox.ack(), None);
        assert!(inbox.admit(7, 1) && inbox.admit(7, 2) && inbox.admit(7, 3));
        // The sender resends 2..=4 after a reset: only 4 is new.
        let resent: Vec<bool> = (2..=4).map(|n| inbox.admit(7, n)).collect();
        assert_eq!(resent, [false, false, true]);
        assert_eq!(inbox.ack(), Some((7, 4)));
    }

    #[test]
    fn a_restarted_sender_starts_again_and_a_restarted_receiver_takes_any_start() {
        let mut inbox = Inbox::default();
        assert!(inbox.admit(7, 1) && inbox.admit(7, 2));
        // The sender restarted: its numbers start at 1 again.
        assert!(inbox.admit(9, 1));
        assert_eq!(inbox.ack(), Some((9, 1)));
        // A fresh receiver takes an old sender's next number, whatever it is.
        let mut fresh = Inbox::default();
        assert!(fresh.admit(7, 5000) && !fresh.admit(7, 5000) && fresh.admit(7, 5001));
    }

    #[test]
    fn both_sides_resending_through_any_number_of_resets_deliver_each_frame_once_in_order() {
        // A model of two resets, each losing part of what was in flight and some acks.
        let mut out = Outbox::default();
        let mut inbox = Inbox::default();
        let mut delivered = Vec::new();
        out.connected(1);
        let mut wire: Vec<(u64, Bytes)> = Vec::new();
        for n in 1..=30u8 {
            let seq = out.push(b(n), 1);
            wire.push((seq, b(n)));
        }
        for reset in 0..3 {
            // Only the first part of what is on the wire arrives; the ack of half of it arrives.
            let arrive = 7 + reset * 5;
            for (seq, frame) in wire.drain(..).take(arrive) {
                if inbox.admit(2, seq) {
                    delivered.push(frame[0]);
                }
            }
            if let Some((_, upto)) = inbox.ack() {
                out.ack(upto / 2);
            }
            assert!(out.connected(1).is_empty());
            let first = out.first();
            wire = out
                .pending()
                .cloned()
                .enumerate()
                .map(|(i, f)| (first + i as u64, f))
                .collect();
        }
        for (seq, frame) in wire {
            if inbox.admit(2, seq) {
                delivered.push(frame[0]);
            }
        }
        assert_eq!(delivered, (1..=30).collect::<Vec<u8>>());
    }
}
