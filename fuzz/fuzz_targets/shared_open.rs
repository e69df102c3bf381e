//! pacer_shared_open on hostile files in a private temporary directory
//! (see fuzz/src/shared.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        pacer_fuzz::start("shared_open", vec![pacer_fuzz::shared::cleanup]);
        pacer_fuzz::shared::init();
    },
    |data: &[u8]| {
        pacer_fuzz::shared::run(data);
    }
);
