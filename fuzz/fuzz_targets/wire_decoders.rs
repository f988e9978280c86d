//! Every decoder of a payload read from the wire, on arbitrary bytes: each must return
//! a value or an error, never panic, abort or allocate from an unchecked count.
//! The first byte picks the decoder, the next eight give the header's counts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use squall_wire::{compute, finished, graph, keys, packed, spec};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let (counts, payload) = rest.split_at(rest.len().min(8));
    let mut c = [0u8; 8];
    c[..counts.len()].copy_from_slice(counts);
    let n = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize;
    let keys_bytes = u32::from_le_bytes([c[4], c[5], c[6], c[7]]) as usize;
    match which % 7 {
        0 => drop(graph::decode_update_graph(payload, n, keys_bytes)),
        1 => drop(compute::decode_compute(
            payload,
            &["tcp://a:1".into(), "tcp://b:2".into()],
        )),
        2 => drop(finished::FinishedBatch::decode(n, payload)),
        3 => drop(keys::read_keys(payload)),
        4 => drop(packed::decode::<u32>(payload, "fuzz")),
        5 => drop(spec::split_call(payload)),
        _ => drop(spec::call_prefix(payload)),
    }
});
