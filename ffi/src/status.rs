//! `pacer_status`: what every fallible call returns (the type and its
//! texts are in codes.rs), and `pacer_status_str`, which names any status.

use core::ffi::c_char;

use crate::boundary::guard_value;
pub use crate::codes::pacer_status;
use crate::codes::status_text;

/// A static, NUL-terminated English description of `status` (any number:
/// unknown ones get "unknown status"). Never NULL; never free it.
#[no_mangle]
pub extern "C" fn pacer_status_str(status: u32) -> *const c_char {
    guard_value(b"unknown status\0".as_ptr().cast(), || {
        status_text(status).as_ptr().cast()
    })
}
