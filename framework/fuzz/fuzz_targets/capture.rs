//! Bytes a target assembles from a move's chunks, decoded as a capture.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferry::fuzzing::capture(data);
});
