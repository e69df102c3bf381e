//! The refusal on the wire (SPEC §9): an Anthropic-style SSE error event
//! that the client's SDK treats as a retryable rate limit.
//!
//! Status 200, headers `content-type: text/event-stream; charset=utf-8` and
//! `retry-after: N`, and a body of exactly one event. The header is
//! load-bearing: the SDK reads only headers for the delay.

use core::fmt::{self, Write};

use crate::text::write_into;

/// HTTP status of a refusal (the error travels inside the event stream).
pub const REFUSAL_STATUS: u16 = 200;
/// `content-type` of a refusal.
pub const REFUSAL_CONTENT_TYPE: &str = "text/event-stream; charset=utf-8";

/// Writes the refusal body for `message_prefix` (the embedding proxy's text)
/// and `retry_after_s` into `out`: `Ok(written)` or `Err(needed)`.
///
/// The prefix is JSON-escaped; the `retry-after` header value is the
/// decimal `retry_after_s`.
pub fn write_refusal_body(
    message_prefix: &str,
    retry_after_s: u64,
    out: &mut [u8],
) -> Result<usize, usize> {
    write_into(out, |w| {
        w.write_str(
            "data: {\"type\":\"error\",\"sequence_number\":0,\"error\":{\"type\":\"rate_limit_error\",\"code\":\"429\",\"message\":\"",
        )?;
        write_json_escaped(w, message_prefix)?;
        write!(
            w,
            "; retry after {retry_after_s}s\",\"param\":null,\"retry_after_seconds\":{retry_after_s}}}}}\n\n"
        )
    })
}

/// Escapes `text` for the inside of a JSON string: quote, backslash and
/// control characters; everything else passes through as UTF-8.
fn write_json_escaped(w: &mut dyn Write, text: &str) -> fmt::Result {
    let mut plain_from = 0;
    for (index, ch) in text.char_indices() {
        let escape: Option<&str> = match ch {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            c if (c as u32) < 0x20 => None,
            _ => continue,
        };
        w.write_str(&text[plain_from..index])?;
        match escape {
            Some(e) => w.write_str(e)?,
            None => write!(w, "\\u{:04x}", ch as u32)?,
        }
        plain_from = index + ch.len_utf8();
    }
    w.write_str(&text[plain_from..])
}
