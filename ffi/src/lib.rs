//! The C ABI of the pacer core: `libpacer.a`, `libpacer.so` and the
//! generated `include/pacer.h`.
//!
//! One module per C type; `boundary` holds the glue every entry point uses
//! (panic boundary, NULL checks, borrowed strings and buffers), and `codes`
//! the status every call returns, on which everything else builds. The
//! conventions are stated once, in the header's preamble and the README.

#![allow(non_camel_case_types)]
// The pointer contract of every entry point is stated once, in the header
// preamble (cbindgen.toml) and the README, rather than on each function.
#![allow(clippy::missing_safety_doc)]
// Status texts are one table of NUL-terminated byte strings.
#![allow(clippy::manual_c_str_literals)]

mod boundary;
mod codes;
pub mod derived;
pub mod frame;
pub mod pacer;
pub mod settings;
pub mod shm;
pub mod status;
pub mod version;
