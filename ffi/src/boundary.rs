//! Glue every entry point uses: the panic boundary, NULL checks, and
//! borrowing caller strings and buffers.

use core::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::codes::pacer_status;

pub(crate) type Outcome = Result<(), pacer_status>;

/// Runs an entry point's body; a panic becomes `PACER_STATUS_PANIC`.
/// Inlined, so the entry point's arguments reach the body in registers
/// rather than through a closure's pointers (about 1 ns of `pacer_reserve`).
#[inline(always)]
pub(crate) fn guard(body: impl FnOnce() -> Outcome) -> pacer_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => pacer_status::Ok,
        Ok(Err(status)) => status,
        Err(_) => pacer_status::Panic,
    }
}

/// For the few entry points that return a value, not a status: a panic
/// yields `fallback`.
pub(crate) fn guard_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// Checks a required pointer: not NULL, and aligned for `T` (a misaligned
/// pointer would make the 128-bit compare-and-swap fault, and any Rust
/// reference to it undefined).
pub(crate) fn checked<T>(ptr: *const T) -> Result<(), pacer_status> {
    if ptr.is_null() {
        Err(pacer_status::NullParameter)
    } else if !ptr.is_aligned() {
        Err(pacer_status::Misaligned)
    } else {
        Ok(())
    }
}

/// Borrows a required input.
///
/// # Safety
/// `ptr` is NULL, misaligned, or points to a valid `T` for `'a`.
pub(crate) unsafe fn arg<'a, T>(ptr: *const T) -> Result<&'a T, pacer_status> {
    checked(ptr)?;
    // SAFETY: non-NULL and aligned (checked); valid per the caller's contract.
    Ok(unsafe { &*ptr })
}

/// Borrows a required in/out argument.
///
/// # Safety
/// `ptr` is NULL, misaligned, or points to a valid, unaliased `T` for `'a`.
pub(crate) unsafe fn arg_mut<'a, T>(ptr: *mut T) -> Result<&'a mut T, pacer_status> {
    checked(ptr)?;
    // SAFETY: non-NULL and aligned (checked); valid and unaliased per the
    // caller's contract.
    Ok(unsafe { &mut *ptr })
}

/// Checks a required output pointer; write through it only on success.
pub(crate) fn out<T>(ptr: *mut T) -> Result<*mut T, pacer_status> {
    checked(ptr)?;
    Ok(ptr)
}

/// Writes a finished output.
///
/// # Safety
/// `ptr` came from [`out`] (non-NULL, aligned) and points to writable
/// memory for a `T`.
pub(crate) unsafe fn put<T>(ptr: *mut T, value: T) {
    // SAFETY: non-NULL (checked by `out`) and writable per the caller.
    unsafe { ptr.write(value) }
}

/// Borrows an optional NUL-terminated UTF-8 string (NULL → `None`).
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn opt_str<'a>(ptr: *const c_char) -> Result<Option<&'a str>, pacer_status> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    core::str::from_utf8(bytes)
        .map(Some)
        .map_err(|_| pacer_status::InvalidUtf8)
}

/// Borrows a caller's output buffer (`len` may be 0, `buf` then may be NULL).
///
/// # Safety
/// `buf` is NULL with `len == 0`, or points to `len` writable bytes.
pub(crate) unsafe fn buffer<'a>(buf: *mut u8, len: usize) -> Result<&'a mut [u8], pacer_status> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(pacer_status::NullParameter);
    }
    // SAFETY: non-NULL and `len` writable bytes per the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(buf, len) })
}

/// Renders text into a caller buffer without touching it unless it fits:
/// measures first, then writes. Returns bytes written, or the needed
/// length with `BUFFER_TOO_SHORT`.
pub(crate) fn render_into(
    out_buf: &mut [u8],
    render: impl Fn(&mut [u8]) -> Result<usize, usize>,
) -> Result<usize, (pacer_status, usize)> {
    let needed = match render(&mut []) {
        Ok(n) | Err(n) => n,
    };
    if needed > out_buf.len() {
        return Err((pacer_status::BufferTooShort, needed));
    }
    render(out_buf).map_err(|n| (pacer_status::BufferTooShort, n))
}
