//! Random call sequences over every export of the C ABI (see
//! fuzz/src/calls.rs for the operations and the oracles).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        pacer_fuzz::start("abi_calls", vec![pacer_fuzz::calls::report]);
    },
    |data: &[u8]| {
        pacer_fuzz::calls::run(data);
    }
);
