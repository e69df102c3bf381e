//! Formatting into caller buffers without allocation.

use core::fmt;

/// Counts bytes, then copies them if they fit.
struct SliceWriter<'b> {
    out: &'b mut [u8],
    needed: usize,
}

impl fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let start = self.needed;
        self.needed = start.saturating_add(s.len());
        if let Some(dest) = self.out.get_mut(start..self.needed) {
            dest.copy_from_slice(s.as_bytes());
        }
        Ok(())
    }
}

/// Runs `render` against `out`: `Ok(bytes written)` when everything fit,
/// else `Err(bytes needed)`. The text is produced in one pass either way.
pub(crate) fn write_into(
    out: &mut [u8],
    render: impl FnOnce(&mut dyn fmt::Write) -> fmt::Result,
) -> Result<usize, usize> {
    let mut writer = SliceWriter { out, needed: 0 };
    // Our renderers never fail; a formatting error would be a bug, and the
    // count still tells the caller what was attempted.
    let _ = render(&mut writer);
    if writer.needed <= writer.out.len() {
        Ok(writer.needed)
    } else {
        Err(writer.needed)
    }
}
