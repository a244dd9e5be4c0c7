//! A connection's incoming streams of frames after the handshake, read in bursts: whatever
//! arrived is read into one buffer and every whole frame in it decoded in one go.

use bytes::BytesMut;
use quinn::RecvStream;
use serde::de::DeserializeOwned;
use tokio::io::AsyncReadExt;
use tokio_util::codec::FramedRead;

use super::codec::{DecodeError, FrameCodec};

/// The room the buffer takes before a read, at least (more when a frame needs it).
const READ_ROOM: usize = 64 * 1024;
/// A buffer with less room left than this grows before the next read.
const MIN_READ: usize = 4 * 1024;

/// Frames off one stream, in order.
pub(crate) struct FrameReader<T> {
    recv: RecvStream,
    buf: BytesMut,
    codec: FrameCodec<T>,
    /// An error met after frames that were handed out first.
    failed: Option<DecodeError>,
}

impl<T: DeserializeOwned> FrameReader<T> {
    /// Takes over the handshake's reader and whatever it buffered past the handshake's frame.
    pub(crate) fn new(handshake: FramedRead<RecvStream, FrameCodec<T>>) -> Self {
        let parts = handshake.into_parts();
        Self {
            recv: parts.io,
            buf: parts.read_buf,
            codec: parts.codec,
            failed: None,
        }
    }

    /// Reads a stream that carries no handshake: a connection's bulk stream.
    pub(crate) fn fresh(recv: RecvStream, codec: FrameCodec<T>) -> Self {
        Self {
            recv,
            buf: BytesMut::new(),
            codec,
            failed: None,
        }
    }

    /// Waits until at least one frame is in, then appends every whole frame read to `out`.
    /// `Ok(false)`: the stream ended where a frame ends, and nothing was appended.
    pub(crate) async fn read(&mut self, out: &mut Vec<T>) -> Result<bool, DecodeError> {
        loop {
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
            let before = out.len();
            let decoded = self.codec.decode_all(&mut self.buf, out);
            let got = out.len() > before;
            match decoded {
                Err(e) if got => self.failed = Some(e),
                Err(e) => return Err(e),
                Ok(()) => {}
            }
            if got {
                return Ok(true);
            }
            if self.buf.capacity() - self.buf.len() < MIN_READ {
                self.buf
                    .reserve(READ_ROOM.max(self.codec.wanted(&self.buf)));
            }
            if self.recv.read_buf(&mut self.buf).await? == 0 {
                // Every whole frame was decoded above: what is left is part of one, or nothing.
                return self.codec.ended(&self.buf).map(|()| false);
            }
        }
    }
}
