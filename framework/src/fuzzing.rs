//! Entry points for the fuzz targets in `framework/fuzz/`, and the replay of their corpus on stable Rust.
//!
//! Each feeds untrusted bytes to one decoder that a peer or a client reaches, the way a running
//! node does: the mesh stream (every frame nodes exchange, moves included), the client stream of a
//! gateway, and the capture a target assembles from a move's chunks. They must end in values or
//! typed errors, never in a panic. Built only for tests and with the `fuzzing` feature.

use bytes::BytesMut;
use tokio_util::codec::Decoder;

use crate::cluster::frames::Frame;
use crate::mesh::FrameCodec;
use crate::relocation::assembly::Assembly;
use crate::relocation::capture::{CHUNK, Manifest};
use crate::relocation::precopy::NoDeltas;
use crate::session::quic::ClientDecoder;

/// The frame limit the targets decode with: small, so the length-prefix check is reached often.
const MAX_FRAME: usize = 64 * 1024;

/// Decodes a mesh stream, frame by frame until its end; how many frames decoded.
pub fn mesh_stream(bytes: &[u8]) -> usize {
    drain(FrameCodec::<Frame>::new(MAX_FRAME), bytes)
}

/// Decodes a client stream as a gateway reads it; how many frames decoded.
pub fn client_stream(bytes: &[u8]) -> usize {
    drain(ClientDecoder::new(MAX_FRAME), bytes)
}

/// Assembles the bytes as a move's capture, in chunks the size a source sends, and decodes it;
/// whether it decoded. The manifest is made to fit, so the decoder itself is what gets fuzzed.
pub fn capture(bytes: &[u8]) -> bool {
    let manifest = Manifest {
        len: bytes.len() as u64,
        chunks: bytes.chunks(CHUNK).count() as u32,
        crc: crc32c::crc32c(bytes),
        base: None,
        recipe: None,
    };
    let Ok(mut assembly) = Assembly::new(manifest, None) else {
        return false;
    };
    for (index, chunk) in bytes.chunks(CHUNK).enumerate() {
        let offset = (index * CHUNK) as u64;
        if assembly.add(index as u32, offset, chunk).is_err() {
            return false;
        }
    }
    assembly.finish(&NoDeltas).is_ok()
}

fn drain<D: Decoder>(mut decoder: D, bytes: &[u8]) -> usize {
    let mut src = BytesMut::from(bytes);
    let mut frames = 0;
    loop {
        match decoder.decode_eof(&mut src) {
            Ok(Some(_)) => frames += 1,
            Ok(None) | Err(_) => return frames,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Every input in one target's corpus folder (seeds and what fuzzing kept).
    fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus folder {} is missing: {e}", dir.display()))
            .map(|entry| {
                let path = entry.unwrap().path();
                let bytes = std::fs::read(&path).unwrap();
                (path, bytes)
            })
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "corpus {} is empty", dir.display());
        inputs
    }

    /// Replays a corpus; returns how many inputs decoded to at least one value.
    fn replay(target: &str, decode: impl Fn(&[u8]) -> bool) -> usize {
        corpus(target)
            .iter()
            .filter(|(_, bytes)| decode(bytes))
            .count()
    }

    /// Writes the seed inputs: valid streams of each kind, for fuzzing to start from. Run it after
    /// a wire type changes: `cargo test -p ferry fuzzing -- --ignored`.
    #[test]
    #[ignore = "writes the seed corpus into framework/fuzz/corpus"]
    fn write_seed_corpus() {
        use bytes::Bytes;

        use crate::cluster::frames::Deliver;
        use crate::ids::{ActorId, NodeId, SpotId, UnitId};
        use crate::relocation::RelocationId;
        use crate::relocation::capture::{Capture, CellCapture, MembershipData, QueuedOp};
        use crate::relocation::frames::RelocFrame;
        use crate::session::wire::{ClientFrame, PROTOCOL_VERSION};

        let room = UnitId::Spot(SpotId::new("room-1").unwrap());
        let node = NodeId::new("node-a").unwrap();
        let op = QueuedOp {
            to: room.clone(),
            payload: Bytes::from_static(b"input"),
            session: None,
            reply: Some(crate::node::ReplyTo {
                node: node.clone(),
                request: 7,
            }),
        };
        let capture = Capture {
            unit: room.clone(),
            cells: vec![CellCapture {
                id: room.clone(),
                factory: "chat-room".into(),
                state: Some(b"state".to_vec()),
                timers: Vec::new(),
                membership: MembershipData::Spot(vec![ActorId::new("p1").unwrap()]),
                binding: None,
            }],
            callbacks: Vec::new(),
            ticks: Vec::new(),
            journal: vec![op.clone()],
        };
        let image = capture.clone().into_image().unwrap();
        let sealed =
            crate::relocation::precopy::Precopy::new().seal(Bytes::from(image.clone()), &NoDeltas);
        let rel = RelocationId(1);
        let mesh = [
            Frame::Deliver(Deliver {
                to: room.clone(),
                payload: Bytes::from_static(b"hello"),
                session: None,
                reply: None,
                activate: Some("chat-room".into()),
                origin: node.clone(),
                hops: 0,
            }),
            Frame::RouteHint {
                id: room.clone(),
                owner: node.clone(),
            },
            Frame::Reply {
                request: 7,
                terminal: Ok(Bytes::from_static(b"ok")),
            },
            Frame::Reloc(Box::new(RelocFrame::Offer {
                rel,
                unit: room.clone(),
                records: Vec::new(),
                manifest: sealed.manifest,
                within: std::time::Duration::from_secs(30),
            })),
            Frame::Reloc(Box::new(RelocFrame::Chunk {
                rel,
                index: 0,
                offset: 0,
                bytes: sealed.pieces[0].1.clone(),
            })),
            Frame::Reloc(Box::new(RelocFrame::Precopy {
                rel,
                len: image.len() as u64,
                offset: 0,
                crc: crc32c::crc32c(&image),
                bytes: Bytes::from(image.clone()),
            })),
            Frame::Reloc(Box::new(RelocFrame::Relay { rel, op })),
            Frame::Reloc(Box::new(RelocFrame::Cutover {
                rel,
                count: 1,
                crc: 0,
            })),
        ];
        let client = [
            ClientFrame::Hello {
                version: PROTOCOL_VERSION,
                token: Bytes::from_static(b"token"),
            },
            ClientFrame::Bind {
                actor: ActorId::new("p1").unwrap(),
            },
            ClientFrame::Input {
                actor: ActorId::new("p1").unwrap(),
                payload: Bytes::from_static(b"jump"),
            },
            ClientFrame::Bye,
        ];
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        let write = |target: &str, name: String, bytes: &[u8]| {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        };
        // Each frame alone, and all of them as one stream.
        let stream = |target: &str, frames: Vec<bytes::Bytes>| {
            for (i, bytes) in frames.iter().enumerate() {
                write(target, format!("seed-{i}"), bytes);
            }
            write(target, "seed-all".into(), &frames.concat());
        };
        let mesh_codec = FrameCodec::<Frame>::new(MAX_FRAME);
        let client_codec = FrameCodec::<ClientFrame>::new(MAX_FRAME);
        stream(
            "mesh_stream",
            mesh.iter()
                .map(|f| mesh_codec.encode_frame(f).unwrap())
                .collect(),
        );
        stream(
            "client_stream",
            client
                .iter()
                .map(|f| client_codec.encode_frame(f).unwrap())
                .collect(),
        );
        write("capture", "seed-0".into(), &image);
    }

    #[test]
    fn the_mesh_corpus_replays_without_a_panic_and_its_seeds_decode() {
        assert!(replay("mesh_stream", |b| mesh_stream(b) > 0) > 0);
    }

    #[test]
    fn the_client_corpus_replays_without_a_panic_and_its_seeds_decode() {
        assert!(replay("client_stream", |b| client_stream(b) > 0) > 0);
    }

    #[test]
    fn the_capture_corpus_replays_without_a_panic_and_its_seeds_decode() {
        assert!(replay("capture", capture) > 0);
    }
}
