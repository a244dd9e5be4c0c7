//! Payload bytes decoded as slices of the frame they arrived in, not copies.
//!
//! A frame decoder marks the body it decodes with [`Decoding::start`]; a `Bytes` field decoded with
//! [`shared_bytes`] meanwhile shares that body's buffer, so a delivered payload is freed with it.

use bytes::Bytes;

thread_local! {
    /// The body a frame decoder decodes on this thread right now, for [`shared_bytes`].
    static DECODING: std::cell::RefCell<Option<Bytes>> = const { std::cell::RefCell::new(None) };
}

/// Makes `body` the one [`shared_bytes`] fields slice from until the guard drops.
pub struct Decoding;

impl Decoding {
    /// Starts decoding `body` on this thread.
    pub fn start(body: &Bytes) -> Decoding {
        DECODING.set(Some(body.clone()));
        Decoding
    }
}

impl Drop for Decoding {
    fn drop(&mut self) {
        DECODING.set(None);
    }
}

/// Decodes a `Bytes` field (`#[serde(deserialize_with = ...)]`) as a slice of the frame body a
/// frame decoder is decoding (inside [`Decoding::start`]), not a copy: a message's payload then shares the buffer it was read
/// into, and is freed with it. Other deserializers get a copy, as with `Bytes`'s own impl.
pub fn shared_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    struct Visit;

    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Bytes;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> Result<Bytes, E> {
            let within = |body: &Bytes| {
                let (start, base) = (v.as_ptr() as usize, body.as_ptr() as usize);
                start >= base && start + v.len() <= base + body.len()
            };
            Ok(DECODING.with_borrow(|body| match body {
                Some(body) if within(body) => body.slice_ref(v),
                _ => Bytes::copy_from_slice(v),
            }))
        }

        fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v))
        }

        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(v))
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(Bytes::from(out))
        }
    }

    d.deserialize_bytes(Visit)
}
