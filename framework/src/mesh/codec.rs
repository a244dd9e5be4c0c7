//! Frames on a mesh stream: a 4-byte big-endian length, then a postcard body.
//!
//! The limit is checked before a body is buffered (a peer announcing 4 GiB is refused
//! from its first 4 bytes) and while a frame is encoded (an oversized frame is refused
//! without serialising all of it). Pure bytes in, values out: no sockets here.

use std::io;
use std::marker::PhantomData;

use bytes::{BufMut, Bytes, BytesMut};
use ferry_core::shared_bytes::Decoding;
use postcard::ser_flavors::Flavor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

/// The default largest frame body, in bytes.
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// Bytes of the length prefix.
const HEADER: usize = 4;

/// Encoded frames are written in pieces of about this size: many small frames copied into one
/// buffer cost the QUIC stream far less than as many separate chunks.
pub(crate) const COALESCE: usize = 16 * 1024;

/// Appends `frames` to `out` as write pieces: runs of small frames joined into one buffer of about
/// [`COALESCE`] bytes, frames that size or larger, and a small frame with no other beside it,
/// passed on as they are (a lone frame is not worth a copy into a fresh buffer). Order is kept.
pub(crate) fn coalesce(frames: impl IntoIterator<Item = Bytes>, out: &mut Vec<Bytes>) {
    let mut run = Run::default();
    for frame in frames {
        if frame.len() >= COALESCE {
            run.flush(out);
            out.push(frame);
            continue;
        }
        run.push(frame);
        if run.len() >= COALESCE {
            run.flush(out);
        }
    }
    run.flush(out);
}

/// Small frames waiting to be written as one piece: the first is kept as it is until a second
/// comes to join it.
#[derive(Default)]
struct Run {
    first: Option<Bytes>,
    joined: BytesMut,
}

impl Run {
    fn len(&self) -> usize {
        self.first.as_ref().map_or(self.joined.len(), Bytes::len)
    }

    fn push(&mut self, frame: Bytes) {
        match self.first.take() {
            None if self.joined.is_empty() => self.first = Some(frame),
            None => self.joined.extend_from_slice(&frame),
            Some(first) => {
                self.joined.reserve(COALESCE + frame.len());
                self.joined.extend_from_slice(&first);
                self.joined.extend_from_slice(&frame);
            }
        }
    }

    fn flush(&mut self, out: &mut Vec<Bytes>) {
        if let Some(first) = self.first.take() {
            out.push(first);
        } else if !self.joined.is_empty() {
            out.push(self.joined.split().freeze());
        }
    }
}

/// Why a frame could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The frame body would be longer than the limit.
    #[error(
        "frame body is over the {max}-byte limit; send smaller frames (chunk large payloads) \
         or raise max_frame on every node"
    )]
    TooLarge {
        /// The limit in force.
        max: usize,
    },
    /// postcard could not encode the value.
    #[error(
        "could not encode the frame with postcard: {0}; frame types must not use \
         serde features postcard lacks (untagged enums, unknown-length sequences)"
    )]
    Serialize(#[source] postcard::Error),
    /// Writing encoded frames failed (only when the codec drives a `FramedWrite`).
    #[error("writing frames failed: {0}")]
    Io(#[from] io::Error),
}

/// Why bytes from a peer could not be decoded into a frame.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The peer announced a frame longer than the limit.
    #[error("peer announced a {len}-byte frame, over the {max}-byte limit")]
    TooLarge {
        /// The announced body length.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// The body is not a valid postcard encoding of the frame type.
    #[error(
        "malformed {len}-byte frame: {source}; the peer runs another frame version or is faulty"
    )]
    Malformed {
        /// The body length.
        len: usize,
        /// What postcard found.
        source: postcard::Error,
    },
    /// The body decoded but left bytes over.
    #[error("frame has {extra} bytes after its value; the peer runs another frame version")]
    TrailingBytes {
        /// How many bytes were left.
        extra: usize,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame, with {buffered} bytes of it received")]
    Truncated {
        /// Bytes received of the unfinished frame.
        buffered: usize,
    },
    /// Reading from the stream failed.
    #[error("reading frames failed: {0}")]
    Io(#[from] io::Error),
}

/// How much a thread's encoding buffer takes from the allocator at a time. Frames are split off it,
/// so thousands of small frames share one allocation, freed once the last of them is dropped
/// (written and acknowledged), instead of one allocation and one free per frame.
const ARENA: usize = 64 * 1024;

thread_local! {
    /// Where this thread encodes frames (see [`ARENA`]).
    static ARENA_BUF: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// `data` as `Bytes` in this thread's encoding buffer (see [`ARENA`]): for the small encoded
/// messages that are about to become frames, without an allocation of their own.
pub(crate) fn copy_shared(data: &[u8]) -> Bytes {
    if data.len() > ARENA / 2 {
        return Bytes::copy_from_slice(data);
    }
    ARENA_BUF.with_borrow_mut(|buf| {
        if buf.capacity() - buf.len() < data.len() {
            *buf = BytesMut::with_capacity(ARENA);
        }
        buf.extend_from_slice(data);
        buf.split().freeze()
    })
}

/// The longest piece [`Capped`] copies a byte at a time.
const SHORT_PIECE: usize = 16;

/// A postcard flavor that appends to a buffer and fails as soon as the buffer would pass the
/// limit (the end of the frame being encoded, at its longest).
struct Capped<'a> {
    buf: &'a mut BytesMut,
    limit: usize,
}

impl Flavor for Capped<'_> {
    type Output = ();

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if self.buf.len() + data.len() > self.limit {
            return Err(postcard::Error::SerializeBufferFull);
        }
        // Most pieces of a frame are a few bytes (a tag, a length, a short id): copied a byte at
        // a time they cost less than a call to copy them.
        if data.len() <= SHORT_PIECE {
            for &byte in data {
                self.buf.put_u8(byte);
            }
        } else {
            self.buf.extend_from_slice(data);
        }
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.try_extend(&[data])
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Encodes and decodes frames of type `T` with a hard size limit.
#[derive(Debug)]
pub struct FrameCodec<T> {
    max: usize,
    inner: LengthDelimitedCodec,
    /// The current frame's length prefix was already checked against the limit.
    head_checked: bool,
    _frame: PhantomData<fn() -> T>,
}

impl<T> Clone for FrameCodec<T> {
    /// A fresh codec with the same limit (decoding state is not copied).
    fn clone(&self) -> Self {
        Self::new(self.max)
    }
}

impl<T> FrameCodec<T> {
    /// A codec refusing bodies over `max_frame` bytes (at most `u32::MAX`, the prefix's range).
    pub fn new(max_frame: usize) -> Self {
        let max = max_frame.min(u32::MAX as usize);
        Self {
            max,
            inner: LengthDelimitedCodec::builder()
                .length_field_length(HEADER)
                .max_frame_length(max)
                .new_codec(),
            head_checked: false,
            _frame: PhantomData,
        }
    }

    /// The largest body this codec accepts.
    pub fn max_frame(&self) -> usize {
        self.max
    }
}

impl<T: Serialize> FrameCodec<T> {
    /// Encodes one frame, prefix included, as one buffer ready to write.
    pub fn encode_frame(&self, item: &T) -> Result<Bytes, EncodeError> {
        self.encode_as(item)
    }
}

impl<T> FrameCodec<T> {
    /// Encodes a value that encodes exactly as a `T` does (a `T` made of references, say), so a
    /// sender can keep what it encoded.
    pub(crate) fn encode_as<U: Serialize>(&self, item: &U) -> Result<Bytes, EncodeError> {
        ARENA_BUF.with_borrow_mut(|buf| {
            // A buffer left with little room starts a fresh allocation rather than growing (a
            // `BytesMut` whose earlier frames are still alive cannot grow in place).
            if buf.capacity() - buf.len() < 1024 {
                *buf = BytesMut::with_capacity(ARENA);
            }
            self.encode_into(item, buf)?;
            let frame = buf.split().freeze();
            // A large frame may have grown the buffer: its allocation is not kept alive by the
            // frames after it.
            if frame.len() > ARENA / 2 {
                *buf = BytesMut::new();
            }
            Ok(frame)
        })
    }

    /// Appends one frame, prefix included, to `buf`; a frame that fails leaves `buf` as it was.
    pub(crate) fn encode_into<U: Serialize>(
        &self,
        item: &U,
        buf: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        let start = buf.len();
        buf.extend_from_slice(&[0; HEADER]);
        let flavor = Capped {
            buf: &mut *buf,
            limit: start + HEADER + self.max,
        };
        let encoded = postcard::serialize_with_flavor(item, flavor).map_err(|e| match e {
            postcard::Error::SerializeBufferFull => EncodeError::TooLarge { max: self.max },
            other => EncodeError::Serialize(other),
        });
        let len = encoded.and_then(|()| {
            u32::try_from(buf.len() - start - HEADER)
                .map_err(|_| EncodeError::TooLarge { max: self.max })
        });
        match len {
            Ok(len) => {
                buf[start..start + HEADER].copy_from_slice(&len.to_be_bytes());
                Ok(())
            }
            Err(e) => {
                buf.truncate(start);
                Err(e)
            }
        }
    }
}

impl<T: Serialize> Encoder<T> for FrameCodec<T> {
    type Error = EncodeError;

    fn encode(&mut self, item: T, dst: &mut BytesMut) -> Result<(), EncodeError> {
        dst.extend_from_slice(&self.encode_frame(&item)?);
        Ok(())
    }
}

impl<T> FrameCodec<T> {
    /// Takes the next whole frame body off `src`, checked against the limit but not decoded: for
    /// readers that look at a frame (its enum tag, say) before decoding it.
    pub fn decode_body(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, DecodeError> {
        if !self.head_checked && src.len() >= HEADER {
            let mut head = [0; HEADER];
            head.copy_from_slice(&src[..HEADER]);
            let len = u32::from_be_bytes(head) as usize;
            if len > self.max {
                return Err(DecodeError::TooLarge { len, max: self.max });
            }
            self.head_checked = true;
        }
        let Some(body) = self.inner.decode(src)? else {
            return Ok(None);
        };
        self.head_checked = false;
        Ok(Some(body))
    }

    /// [`FrameCodec::decode_body`] at the end of the stream: a frame cut off is `Truncated`.
    pub fn decode_body_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, DecodeError> {
        match self.decode_body(src)? {
            Some(body) => Ok(Some(body)),
            None => self.ended(src).map(|()| None),
        }
    }

    /// At the end of the stream, with no whole frame left in `src`: whether the stream ended
    /// where a frame ends, or `Truncated`.
    pub(crate) fn ended(&self, src: &BytesMut) -> Result<(), DecodeError> {
        if src.is_empty() && !self.head_checked {
            return Ok(());
        }
        Err(DecodeError::Truncated {
            buffered: src.len() + if self.head_checked { HEADER } else { 0 },
        })
    }
}

impl<T: DeserializeOwned> FrameCodec<T> {
    /// Decodes every whole frame at the start of `src` into `out`, in order. They share one
    /// buffer (a payload is a slice of it, see `ferry_core::shared_bytes`), so a frame costs no
    /// split and no allocation of its own. The frames before a faulty one are in `out` when its
    /// error is returned.
    pub(crate) fn decode_all(
        &mut self,
        src: &mut BytesMut,
        out: &mut Vec<T>,
    ) -> Result<(), DecodeError> {
        if self.head_checked {
            // A `Decoder` call took this frame's head already: it ends first.
            match Decoder::decode(self, src)? {
                Some(value) => out.push(value),
                None => return Ok(()),
            }
        }
        let mut end = 0;
        let mut result = Ok(());
        while let Some(len) = head(&src[end..]) {
            if len > self.max {
                result = Err(DecodeError::TooLarge { len, max: self.max });
                break;
            }
            if src.len() - end - HEADER < len {
                break;
            }
            end += HEADER + len;
        }
        if end == 0 {
            return result;
        }
        let whole = src.split_to(end).freeze();
        let _decoding = Decoding::start(&whole);
        let mut rest = &whole[..];
        while let Some(len) = head(rest) {
            let body = &rest[HEADER..HEADER + len];
            let (value, left) = postcard::take_from_bytes::<T>(body)
                .map_err(|source| DecodeError::Malformed { len, source })?;
            if !left.is_empty() {
                return Err(DecodeError::TrailingBytes { extra: left.len() });
            }
            out.push(value);
            rest = &rest[HEADER + len..];
        }
        result
    }

    /// The bytes the frame at the start of `src` still lacks, head included (at least one).
    pub(crate) fn wanted(&self, src: &[u8]) -> usize {
        match head(src) {
            Some(len) => (HEADER + len.min(self.max))
                .saturating_sub(src.len())
                .max(1),
            None => HEADER - src.len().min(HEADER),
        }
    }
}

/// The body length a frame's head announces, once `src` holds the head.
fn head(src: &[u8]) -> Option<usize> {
    let head: [u8; HEADER] = src.get(..HEADER)?.try_into().ok()?;
    Some(u32::from_be_bytes(head) as usize)
}

impl<T: DeserializeOwned> Decoder for FrameCodec<T> {
    type Item = T;
    type Error = DecodeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<T>, DecodeError> {
        let Some(body) = self.decode_body(src)? else {
            return Ok(None);
        };
        let body = body.freeze();
        let decoding = Decoding::start(&body);
        let (value, rest) =
            postcard::take_from_bytes::<T>(&body).map_err(|source| DecodeError::Malformed {
                len: body.len(),
                source,
            })?;
        drop(decoding);
        if !rest.is_empty() {
            return Err(DecodeError::TrailingBytes { extra: rest.len() });
        }
        Ok(Some(value))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<T>, DecodeError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None => self.ended(src).map(|()| None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_joins_small_frames_in_order_and_passes_large_ones_through() {
        let small = |n: u8| Bytes::from(vec![n; 100]);
        let large = Bytes::from(vec![9u8; COALESCE]);
        let mut out = Vec::new();
        let frames: Vec<Bytes> = (0..200)
            .map(small)
            .chain([large.clone()])
            .chain((200..=210).map(small))
            .collect();
        coalesce(frames.clone(), &mut out);
        // The same bytes in the same order, in few pieces.
        let joined: Vec<u8> = out.iter().flat_map(|p| p.iter().copied()).collect();
        let expected: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
        assert_eq!(joined, expected);
        // 200 small frames (20,000 bytes) make two pieces, the large one goes alone, then the tail.
        let sizes: Vec<usize> = out.iter().map(Bytes::len).collect();
        assert_eq!(sizes, [16_400, 3_600, COALESCE, 1_100]);
    }

    /// A small frame with no other small one beside it is written as it came, not copied.
    #[test]
    fn a_lone_small_frame_is_passed_on_without_a_copy() {
        let lone = Bytes::from(vec![1u8; 100]);
        let large = Bytes::from(vec![9u8; COALESCE]);
        let mut out = Vec::new();
        coalesce([lone.clone(), large.clone(), lone.clone()], &mut out);
        assert_eq!(out, [lone.clone(), large, lone.clone()]);
        for piece in [&out[0], &out[2]] {
            assert_eq!(piece.as_ptr(), lone.as_ptr(), "the frame's own bytes");
        }
    }
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Ping(u32),
        Text(String),
        Blob(Vec<u8>),
    }

    fn decode_all(codec: &mut FrameCodec<Msg>, bytes: &[u8]) -> Result<Vec<Msg>, DecodeError> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(m) = codec.decode(&mut buf)? {
            out.push(m);
        }
        if let Some(m) = codec.decode_eof(&mut buf)? {
            out.push(m);
        }
        Ok(out)
    }

    #[test]
    fn frames_round_trip_in_order_even_byte_by_byte() {
        let msgs = vec![
            Msg::Ping(7),
            Msg::Text("héllo".into()),
            Msg::Blob(vec![1; 300]),
        ];
        let codec = FrameCodec::<Msg>::new(1024);
        let mut wire = Vec::new();
        for m in &msgs {
            wire.extend_from_slice(&codec.encode_frame(m).unwrap());
        }
        assert_eq!(decode_all(&mut FrameCodec::new(1024), &wire).unwrap(), msgs);

        let mut decoder = FrameCodec::<Msg>::new(1024);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for byte in &wire {
            buf.extend_from_slice(&[*byte]);
            while let Some(m) = decoder.decode(&mut buf).unwrap() {
                out.push(m);
            }
        }
        assert_eq!(out, msgs);
    }

    #[test]
    fn wire_format_is_a_4_byte_big_endian_length_and_a_postcard_body() {
        let bytes = FrameCodec::<Msg>::new(64)
            .encode_frame(&Msg::Ping(5))
            .unwrap();
        assert_eq!(&bytes[..], &[0, 0, 0, 2, 0, 5]);
        let mut via_encoder = BytesMut::new();
        FrameCodec::<Msg>::new(64)
            .encode(Msg::Ping(5), &mut via_encoder)
            .unwrap();
        assert_eq!(&via_encoder[..], &bytes[..]);
    }

    #[test]
    fn encoding_refuses_frames_over_the_limit() {
        let codec = FrameCodec::<Msg>::new(16);
        assert!(codec.encode_frame(&Msg::Blob(vec![0; 14])).is_ok());
        let err = codec.encode_frame(&Msg::Blob(vec![0; 15])).unwrap_err();
        assert!(matches!(err, EncodeError::TooLarge { max: 16 }), "{err}");
    }

    #[test]
    fn a_refused_frame_leaves_nothing_behind_for_the_frames_after_it() {
        let codec = FrameCodec::<Msg>::new(16);
        let first = codec.encode_frame(&Msg::Ping(1)).unwrap();
        assert!(codec.encode_frame(&Msg::Blob(vec![7; 40])).is_err());
        let after = codec.encode_frame(&Msg::Ping(2)).unwrap();
        assert_eq!(
            &after[..],
            &[0, 0, 0, 2, 0, 2],
            "no bytes of the refused frame"
        );
        // Frames that share the thread's buffer keep their own bytes, also a large one in between.
        let big = FrameCodec::<Msg>::new(1 << 20);
        let large = big.encode_frame(&Msg::Blob(vec![9; ARENA])).unwrap();
        let last = codec.encode_frame(&Msg::Ping(3)).unwrap();
        let wire: Vec<u8> = [first, after, large, last].concat();
        assert_eq!(
            decode_all(&mut FrameCodec::new(1 << 20), &wire).unwrap(),
            vec![
                Msg::Ping(1),
                Msg::Ping(2),
                Msg::Blob(vec![9; ARENA]),
                Msg::Ping(3)
            ]
        );
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Carrier {
        #[serde(deserialize_with = "ferry_core::shared_bytes::shared_bytes")]
        payload: Bytes,
        tail: u8,
    }

    #[test]
    fn a_shared_bytes_field_decodes_the_same_through_the_codec_and_elsewhere() {
        let sent = Carrier {
            payload: Bytes::from_static(b"payload"),
            tail: 9,
        };
        let frame = FrameCodec::<Carrier>::new(64).encode_frame(&sent).unwrap();
        let mut buf = BytesMut::from(&frame[..]);
        let got = FrameCodec::<Carrier>::new(64).decode(&mut buf).unwrap();
        assert_eq!(got.as_ref(), Some(&sent));
        // Outside a codec (here JSON, as a sequence of numbers) the field is a copy.
        let json = serde_json::to_string(&sent).unwrap();
        assert_eq!(serde_json::from_str::<Carrier>(&json).unwrap(), sent);
        assert_eq!(
            postcard::from_bytes::<Carrier>(&frame[HEADER..]).unwrap(),
            sent
        );
    }

    #[test]
    fn an_announced_length_over_the_limit_fails_before_the_body_arrives() {
        let mut codec = FrameCodec::<Msg>::new(16);
        let mut buf = BytesMut::from(&[0, 0, 0, 17][..]);
        let err = codec.decode(&mut buf).unwrap_err();
        assert!(
            matches!(err, DecodeError::TooLarge { len: 17, max: 16 }),
            "{err}"
        );
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            FrameCodec::<Msg>::new(DEFAULT_MAX_FRAME).decode(&mut buf),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn garbage_bodies_are_typed_errors() {
        // Variant 9 does not exist.
        let err = decode_all(&mut FrameCodec::new(64), &[0, 0, 0, 1, 9]).unwrap_err();
        assert!(
            matches!(err, DecodeError::Malformed { len: 1, .. }),
            "{err}"
        );
        // A valid Ping(5) followed by a stray byte.
        let err = decode_all(&mut FrameCodec::new(64), &[0, 0, 0, 3, 0, 5, 1]).unwrap_err();
        assert!(
            matches!(err, DecodeError::TrailingBytes { extra: 1 }),
            "{err}"
        );
        // Text claiming 100 bytes but holding 1.
        let err = decode_all(&mut FrameCodec::new(64), &[0, 0, 0, 3, 1, 100, b'x']).unwrap_err();
        assert!(matches!(err, DecodeError::Malformed { .. }), "{err}");
    }

    #[test]
    fn a_stream_ending_inside_a_frame_is_truncated() {
        let err = decode_all(&mut FrameCodec::new(64), &[0, 0, 0, 4, 0]).unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { buffered: 5 }),
            "{err}"
        );
        let err = decode_all(&mut FrameCodec::new(64), &[0, 0]).unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { buffered: 2 }),
            "{err}"
        );
        assert!(
            decode_all(&mut FrameCodec::new(64), &[])
                .unwrap()
                .is_empty()
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
                let _ = decode_all(&mut FrameCodec::new(128), &bytes);
                // In bursts too, and a burst gives the frames one at a time would.
                let mut burst = Vec::new();
                let in_burst = FrameCodec::<Msg>::new(128)
                    .decode_all(&mut BytesMut::from(&bytes[..]), &mut burst);
                let mut one_by_one = FrameCodec::<Msg>::new(128);
                let mut buf = BytesMut::from(&bytes[..]);
                let mut single = Vec::new();
                while let Ok(Some(m)) = one_by_one.decode(&mut buf) { single.push(m); }
                if in_burst.is_ok() {
                    prop_assert_eq!(burst, single);
                } else {
                    prop_assert!(single.starts_with(&burst));
                }
            }

            #[test]
            fn any_split_of_valid_frames_decodes_the_same(
                texts in proptest::collection::vec(".{0,40}", 1..8),
                cut in 0usize..400,
            ) {
                let codec = FrameCodec::<Msg>::new(1024);
                let msgs: Vec<Msg> = texts.into_iter().map(Msg::Text).collect();
                let mut wire = Vec::new();
                for m in &msgs {
                    wire.extend_from_slice(&codec.encode_frame(m).unwrap());
                }
                let cut = cut.min(wire.len());
                let mut decoder = FrameCodec::<Msg>::new(1024);
                let mut buf = BytesMut::from(&wire[..cut]);
                let mut out = Vec::new();
                while let Some(m) = decoder.decode(&mut buf).unwrap() { out.push(m); }
                buf.extend_from_slice(&wire[cut..]);
                while let Some(m) = decoder.decode(&mut buf).unwrap() { out.push(m); }
                prop_assert_eq!(out, msgs);
            }
        }
    }

    #[test]
    fn frames_read_in_pieces_are_each_decoded_once_in_order_when_whole() {
        let mut codec = FrameCodec::<Msg>::new(1 << 20);
        let sent: Vec<Msg> = (0..50)
            .map(|n| {
                if n % 7 == 0 {
                    Msg::Blob(vec![n as u8; 90])
                } else {
                    Msg::Ping(n)
                }
            })
            .collect();
        let wire: Vec<u8> = sent
            .iter()
            .flat_map(|m| codec.encode_frame(m).unwrap().to_vec())
            .collect();
        // Read 13 bytes at a time: most reads end inside a frame.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in wire.chunks(13) {
            assert!(codec.wanted(&buf) >= 1);
            buf.extend_from_slice(piece);
            codec.decode_all(&mut buf, &mut got).unwrap();
        }
        assert!(buf.is_empty());
        assert!(codec.ended(&buf).is_ok());
        assert_eq!(got, sent);
    }

    #[test]
    fn the_frames_before_a_faulty_one_are_decoded_and_a_cut_frame_is_truncated() {
        let mut codec = FrameCodec::<Msg>::new(16);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&codec.encode_frame(&Msg::Ping(1)).unwrap());
        buf.extend_from_slice(&codec.encode_frame(&Msg::Ping(2)).unwrap());
        buf.extend_from_slice(&[0, 0, 1, 0]);
        let mut got = Vec::new();
        let err = codec.decode_all(&mut buf, &mut got).unwrap_err();
        assert!(
            matches!(err, DecodeError::TooLarge { len: 256, max: 16 }),
            "{err}"
        );
        assert_eq!(got, vec![Msg::Ping(1), Msg::Ping(2)]);

        let mut buf = BytesMut::from(&codec.encode_frame(&Msg::Ping(3)).unwrap()[..3]);
        codec.decode_all(&mut buf, &mut got).unwrap();
        assert_eq!(codec.wanted(&buf), 1, "the head's last byte");
        assert!(matches!(
            codec.ended(&buf),
            Err(DecodeError::Truncated { buffered: 3 })
        ));
    }
}
