//! The one place frames from peers come in: each is handed to the part of the node that acts on
//! it (routing, replies, moves, sessions, calls, lost tells, probes). The mesh calls it on the
//! task that read the frame, in the order the peer sent them.

use super::handle::Node;
use crate::cluster::frames::Frame;
use crate::mesh::Inbound;
use crate::unit::envelope::Payload;
use ferry_core::relocation::protocol::{Addressed, addressed};

impl Node {
    /// Acts on one frame from a peer (the mesh calls it on the task that read the frame).
    pub(crate) fn serve_frame(&self, Inbound { from, frame }: Inbound<Frame>) {
        match frame {
            Frame::Deliver(deliver) => self.on_deliver(from, deliver),
            Frame::Reply { request, terminal } => self
                .core
                .units
                .replies
                .complete(request, terminal.map(Payload::Encoded)),
            Frame::RouteHint { id, owner } => self.on_route_hint(id, owner),
            Frame::Reloc(frame) => match addressed(*frame) {
                Addressed::ToSource { rel, event, phase } => {
                    self.core.moves.to_source(rel, event, phase);
                }
                Addressed::ToTarget(frame) => self.on_target_frame(from, frame),
            },
            Frame::Session(frame) => self.on_session_frame(from, frame),
            Frame::Standby(frame) => self.on_standby_frame(from, *frame),
            Frame::Call { request, call } => {
                tokio::spawn(self.clone().answer_call(from, request, *call));
            }
            Frame::TellLost { to, peer, payload } => self.report_tell(to, peer, payload),
            Frame::Probe { stamp, generation } => self.answer_probe(&from, stamp, generation),
            Frame::ProbeAnswer {
                stamp,
                running,
                vouched,
            } => self.probe_answered(&from, stamp, running, vouched),
        }
    }
}
