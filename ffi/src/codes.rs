//! `pacer_status`: what every fallible call returns, and the text of each.
//! Depends on nothing else in the crate; the boundary and every entry point
//! build on it (status.rs names it to C with `pacer_status_str`).

/// Result of a call. Numbers are explicit and never reused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum pacer_status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullParameter = 1,
    /// An internal fault was caught at the boundary; nothing was changed.
    Panic = 2,
    /// An enumerated value passed in (as uint32_t) is not a known value.
    InvalidEnum = 3,
    /// The output buffer is too short; *out_written holds the needed length.
    BufferTooShort = 4,
    /// A string argument is not valid UTF-8.
    InvalidUtf8 = 5,
    /// The storage was not initialised (pacer_init, or
    /// pacer_notice_registry_init for a registry).
    NotInitialized = 6,
    /// Config: rate_per_min above 600.
    RateTooHigh = 7,
    /// Config: burst above PACER_MAX_BURST.
    BurstTooLarge = 8,
    /// Config: max_retries above the ladder ceiling of idle_timeout_ms.
    RetriesExceedLadder = 9,
    /// Shared pacer: this build or target cannot share a pacer between
    /// processes (128-bit atomics are not lock-free, or the page size or
    /// the pacer's layout does not fit the file layout).
    SharedUnsupported = 10,
    /// Shared pacer: a system call failed; errno holds its error.
    SharedOs = 11,
    /// Shared pacer: the name is empty, ".", "..", or too long.
    SharedInvalidName = 12,
    /// Shared pacer: the path is a symbolic link.
    SharedSymlink = 13,
    /// Shared pacer: the path is not a regular file.
    SharedNotRegular = 14,
    /// Shared pacer: the file belongs to another user.
    SharedWrongOwner = 15,
    /// Shared pacer: the file is accessible to its group or to others.
    SharedPermissions = 16,
    /// Shared pacer: the file's size is not the layout's (truncated?).
    SharedTruncated = 17,
    /// Shared pacer: the file is not a shared pacer (bad magic number).
    SharedForeign = 18,
    /// Shared pacer: the file has another layout version.
    SharedLayoutVersion = 19,
    /// Shared pacer: the file was made by a library of another ABI version.
    SharedAbiVersion = 20,
    /// Shared pacer: the file was never completely initialised.
    SharedIncomplete = 21,
    /// Shared pacer: the file holds a different configuration.
    SharedConfigMismatch = 22,
    /// Shared pacer: the handle is not open (never opened, or closed).
    SharedNotOpen = 23,
    /// Shared pacer: no such file.
    SharedNotFound = 24,
    /// A booking presented to pacer_redeem holds no live ticket (already
    /// redeemed, released, or never booked).
    InvalidTicket = 25,
    /// A pointer argument is not aligned for its type (struct pacer and
    /// struct pacer_shared need 16 bytes, a ticket 4, a booking 8).
    Misaligned = 26,
    /// The ticket or booking was issued by another pacer (or forged): its
    /// owner is not this pacer's. Nothing was changed.
    ForeignTicket = 27,
    /// Config: adaptive pacing is on (adaptive_floor_per_min > 0) with a
    /// floor above rate_per_min, or a ceiling (when not 0) below
    /// rate_per_min or above 600.
    AdaptiveRange = 28,
}

impl pacer_status {
    const fn text(self) -> &'static [u8] {
        match self {
            pacer_status::Ok => b"ok\0",
            pacer_status::NullParameter => b"a required pointer argument was NULL\0",
            pacer_status::Panic => b"internal fault caught at the C boundary; nothing changed\0",
            pacer_status::InvalidEnum => b"unknown enumerated value\0",
            pacer_status::BufferTooShort => {
                b"output buffer too short; see *out_written for the needed length\0"
            }
            pacer_status::InvalidUtf8 => b"string argument is not valid UTF-8\0",
            pacer_status::NotInitialized => {
                b"storage not initialised (pacer_init / pacer_notice_registry_init)\0"
            }
            pacer_status::RateTooHigh => b"rate_per_min above 600\0",
            pacer_status::BurstTooLarge => b"burst above PACER_MAX_BURST\0",
            pacer_status::RetriesExceedLadder => {
                b"max_retries above the ladder ceiling of idle_timeout_ms\0"
            }
            pacer_status::SharedUnsupported => {
                b"shared pacer unsupported here (128-bit atomics not lock-free, or layout)\0"
            }
            pacer_status::SharedOs => b"shared pacer: a system call failed; see errno\0",
            pacer_status::SharedInvalidName => b"shared pacer: invalid name or path\0",
            pacer_status::SharedSymlink => b"shared pacer: the path is a symbolic link\0",
            pacer_status::SharedNotRegular => b"shared pacer: the path is not a regular file\0",
            pacer_status::SharedWrongOwner => b"shared pacer: the file belongs to another user\0",
            pacer_status::SharedPermissions => {
                b"shared pacer: the file is accessible to group or others (want 0600)\0"
            }
            pacer_status::SharedTruncated => {
                b"shared pacer: the file's size is not the layout's (truncated)\0"
            }
            pacer_status::SharedForeign => {
                b"shared pacer: the file is not a shared pacer (bad magic)\0"
            }
            pacer_status::SharedLayoutVersion => {
                b"shared pacer: the file has another layout version\0"
            }
            pacer_status::SharedAbiVersion => {
                b"shared pacer: the file was made by another ABI version\0"
            }
            pacer_status::SharedIncomplete => {
                b"shared pacer: the file was never completely initialised\0"
            }
            pacer_status::SharedConfigMismatch => {
                b"shared pacer: the file holds a different configuration\0"
            }
            pacer_status::SharedNotOpen => b"shared pacer: the handle is not open\0",
            pacer_status::SharedNotFound => b"shared pacer: no such file\0",
            pacer_status::InvalidTicket => b"the booking holds no live ticket\0",
            pacer_status::Misaligned => b"a pointer argument is not aligned for its type\0",
            pacer_status::ForeignTicket => b"the ticket or booking was issued by another pacer\0",
            pacer_status::AdaptiveRange => {
                b"adaptive pacing needs 1 <= floor <= rate_per_min <= ceiling <= 600 (ceiling 0 = rate)\0"
            }
        }
    }

    const ALL: [pacer_status; 29] = [
        pacer_status::Ok,
        pacer_status::NullParameter,
        pacer_status::Panic,
        pacer_status::InvalidEnum,
        pacer_status::BufferTooShort,
        pacer_status::InvalidUtf8,
        pacer_status::NotInitialized,
        pacer_status::RateTooHigh,
        pacer_status::BurstTooLarge,
        pacer_status::RetriesExceedLadder,
        pacer_status::SharedUnsupported,
        pacer_status::SharedOs,
        pacer_status::SharedInvalidName,
        pacer_status::SharedSymlink,
        pacer_status::SharedNotRegular,
        pacer_status::SharedWrongOwner,
        pacer_status::SharedPermissions,
        pacer_status::SharedTruncated,
        pacer_status::SharedForeign,
        pacer_status::SharedLayoutVersion,
        pacer_status::SharedAbiVersion,
        pacer_status::SharedIncomplete,
        pacer_status::SharedConfigMismatch,
        pacer_status::SharedNotOpen,
        pacer_status::SharedNotFound,
        pacer_status::InvalidTicket,
        pacer_status::Misaligned,
        pacer_status::ForeignTicket,
        pacer_status::AdaptiveRange,
    ];
}

/// The static, NUL-terminated English text of `status` (any number:
/// unknown ones get "unknown status").
pub(crate) fn status_text(status: u32) -> &'static [u8] {
    match pacer_status::ALL.iter().find(|s| **s as u32 == status) {
        Some(known) => known.text(),
        None => b"unknown status\0",
    }
}
