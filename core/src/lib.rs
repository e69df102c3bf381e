//! # pacer-core
//!
//! Decides whether a **new** upstream connection may open now, after a
//! bounded wait, or must be refused with a retry-after hint — for a proxy
//! running many agents on one account.
//!
//! **No allocation, no lock, no clock, no `std`.** The crate never
//! allocates (it does not link `alloc`), never blocks, and never reads a
//! clock: every call takes `now_ms`, the caller's monotonic milliseconds.
//! Admission is one atomic load and one compare-and-swap on a 128-bit word
//! (native on x86_64 and AArch64; see [`Pacer::is_lock_free`]).
//!
//! - [`Pacer`] — `reserve` / `release`, the atomic store (`pacer.rs`) of the rule of SPEC §4
//!   (`rule.rs`: [`Params`], pure transitions); the types in `types.rs`.
//! - [`settings::resolve`] — settings strings to a [`Budget`], with notices.
//! - [`budget`] — the derived quantities (wait bound, hint, can-refuse).
//! - [`Notice`], [`NoticeRegistry`] — once-per-key notices and their text.
//! - [`frame`] — the refusal as an SSE error event.
//! - [`Counters`] — optional decision counters, off the admission path.
//!
//! ```
//! use pacer_core::{Config, Decision, Pacer};
//!
//! let pacer = Pacer::new(&Config::DEFAULT, 0).unwrap();
//! match pacer.reserve(0) {
//!     Decision::Admitted(a) => assert_eq!(a.wait_ms, 0),
//!     Decision::Refused(_) => unreachable!("a fresh pacer holds a burst"),
//! }
//! ```
//!
//! The derivations and invariant proofs are in `docs/design.md`.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod adaptive;
pub mod budget;
mod counters;
pub mod frame;
#[cfg(all(test, loom))]
mod loom_tests;
mod notice;
mod pacer;
mod rule;
pub mod settings;
mod sync;
mod text;
mod types;

pub use adaptive::{ControlView, Outcome};
pub use budget::Budget;
pub use counters::{CounterSnapshot, Counters, COUNTER_WORDS, WAIT_BOUNDS_MS};
pub use notice::{Notice, NoticeKey, NoticeKind, NoticeRegistry};
pub use pacer::Pacer;
#[cfg(not(loom))]
pub use pacer::{CONTROL_OFFSET, SHARED_OFFSET, STATE_OFFSET};
pub use rule::{Params, Transition};
pub use settings::{resolve, Parsed, Resolution, Settings};
pub use types::{
    Admission, AdmitPath, Booked, Booking, BookingDecision, Config, ConfigError, Decision, Mode,
    Redemption, Refusal, ReleasePolicy, StateView, Ticket, MAX_BURST, UNITS_PER_TOKEN,
};

/// The README's Rust programs, compiled and run as this crate's doctests so
/// that a snippet that stops working fails the tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeSnippets;
