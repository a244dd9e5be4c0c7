//! Bytes a game client sends to a gateway, decoded frame by frame.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferry::fuzzing::client_stream(data);
});
