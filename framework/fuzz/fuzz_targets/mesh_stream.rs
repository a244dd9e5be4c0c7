//! Bytes a peer node sends on the mesh, decoded frame by frame.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferry::fuzzing::mesh_stream(data);
});
