//! Helpers shared by the core's test files that check what the core
//! answered (`support` drives the core; `model` is the independent model).

#![allow(dead_code)]

use pacer_core::BookingDecision;

/// What one `reserve_or_book` answered, in plain numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Admitted {
        wait_ms: u64,
    },
    Booked {
        slot_ms: u64,
        retry_after_s: u64,
    },
    Refused {
        required_wait_ms: u64,
        retry_after_s: u64,
    },
}

pub fn seen(decision: &BookingDecision) -> Seen {
    match decision {
        BookingDecision::Admitted(a) => Seen::Admitted { wait_ms: a.wait_ms },
        BookingDecision::Booked(b) => Seen::Booked {
            slot_ms: b.booking.slot_ms,
            retry_after_s: b.retry_after_s,
        },
        BookingDecision::Refused(r) => Seen::Refused {
            required_wait_ms: r.required_wait_ms,
            retry_after_s: r.retry_after_s,
        },
    }
}
