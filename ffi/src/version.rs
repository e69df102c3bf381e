//! Library and ABI versions.

use core::ffi::c_char;

use crate::boundary::guard_value;

/// The ABI version this header describes. A library whose
/// pacer_abi_version() differs is not compatible with it.
pub const PACER_ABI_VERSION: u32 = 3;

const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library version, e.g. "0.1.0" (static, NUL-terminated).
#[no_mangle]
pub extern "C" fn pacer_version() -> *const c_char {
    guard_value(VERSION.as_ptr().cast(), || VERSION.as_ptr().cast())
}

/// The ABI version of the loaded library (compare with PACER_ABI_VERSION).
#[no_mangle]
pub extern "C" fn pacer_abi_version() -> u32 {
    guard_value(PACER_ABI_VERSION, || PACER_ABI_VERSION)
}
