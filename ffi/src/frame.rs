//! The refusal on the wire: status, content type and the SSE body.

use core::ffi::c_char;

use pacer_core::frame::{write_refusal_body, REFUSAL_CONTENT_TYPE};

use crate::boundary::{buffer, guard, guard_value, opt_str, out, put, render_into};
use crate::status::pacer_status;

/// HTTP status of a refusal (the error travels inside the event stream).
pub const PACER_REFUSAL_STATUS: u16 = 200;
const _: () = assert!(PACER_REFUSAL_STATUS == pacer_core::frame::REFUSAL_STATUS);

const CONTENT_TYPE: &[u8] = b"text/event-stream; charset=utf-8\0";
const _: () = assert!(CONTENT_TYPE.len() == REFUSAL_CONTENT_TYPE.len() + 1);

/// The refusal's content-type header value (static, NUL-terminated).
#[no_mangle]
pub extern "C" fn pacer_refusal_content_type() -> *const c_char {
    guard_value(CONTENT_TYPE.as_ptr().cast(), || {
        CONTENT_TYPE.as_ptr().cast()
    })
}

/// Writes the refusal body (one SSE error event, UTF-8, not NUL-terminated)
/// for `message_prefix` (the proxy's text, JSON-escaped here) and
/// `retry_after_s`; send it with status 200, the content type above and a
/// `retry-after: <retry_after_s>` header. Short buffer: as pacer_notice_render.
#[no_mangle]
pub unsafe extern "C" fn pacer_refusal_body(
    message_prefix: *const c_char,
    retry_after_s: u64,
    buf: *mut u8,
    len: usize,
    out_written: *mut usize,
) -> pacer_status {
    guard(|| {
        // SAFETY: NUL-terminated string or NULL (caller's contract).
        let prefix = unsafe { opt_str(message_prefix) }?.ok_or(pacer_status::NullParameter)?;
        let out_written = out(out_written)?;
        // SAFETY: `buf` holds `len` writable bytes (caller's contract).
        let buf = unsafe { buffer(buf, len) }?;
        let (status, written) =
            match render_into(buf, |b| write_refusal_body(prefix, retry_after_s, b)) {
                Ok(n) => (Ok(()), n),
                Err((status, needed)) => (Err(status), needed),
            };
        // SAFETY: checked by `out`.
        unsafe { put(out_written, written) };
        status
    })
}
