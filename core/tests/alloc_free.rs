//! The core never allocates: a counting global allocator watches every
//! public entry point over many calls, and the sizes that matter are pinned.
//!
//! The count is per thread (a const-initialised thread-local, which itself
//! never allocates), so the test harness's own threads cannot disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::mem::{align_of, size_of};

use pacer_core::{
    frame, resolve, Config, Counters, Decision, Notice, NoticeKind, NoticeRegistry, Pacer,
    ReleasePolicy, Settings,
};

mod support;
use support::decide;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: the slot may be gone while a thread is being torn down.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn allocations_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// 60/min, burst 1, bound 2000 ms: three reservations at one instant drain
/// it, and it refuses.
const REFUSING: Config = Config {
    rate_per_min: 60,
    burst: 1,
    idle_timeout_ms: 30_000,
    max_retries: 3,
    ..Config::DEFAULT
};

#[test]
fn the_counter_sees_allocations() {
    // The instrument works: a single boxed value is counted.
    let n = allocations_in(|| {
        std::hint::black_box(Box::new(7u64));
    });
    assert_eq!(n, 1);
}

#[test]
fn reserve_release_and_refuse_never_allocate() {
    let configs = [
        Config::DEFAULT,
        REFUSING,
        Config {
            release_policy: ReleasePolicy::Strict,
            ..Config::DEFAULT
        },
        Config {
            rate_per_min: 2,
            ..Config::DEFAULT
        }, // shaping, low rate
        Config {
            max_retries: 0,
            ..Config::DEFAULT
        }, // shaping, no retries
        Config {
            rate_per_min: 0,
            ..Config::DEFAULT
        }, // disabled
    ];
    let mut counters = Counters::new();
    let mut admitted = 0u64;
    let mut refused = 0u64;
    let mut refunded = 0u64;
    let n = allocations_in(|| {
        for config in &configs {
            let mut pacer = Pacer::new(config, 1_000).expect("valid config");
            for step in 0..20_000u64 {
                // Mostly bursts at one instant, a clock regression now and
                // then, and time moving on: every path of §4 and §5. Every
                // other call takes the exclusive path.
                let now = 1_000 + (step / 50) * 250 - if step % 97 == 0 { 500 } else { 0 };
                match decide(&mut pacer, &mut counters, now, step % 2 == 1) {
                    Decision::Admitted(admission) => {
                        admitted += 1;
                        if let Some(ticket) = admission.ticket {
                            if step % 3 == 0 {
                                let ok = pacer.release(ticket, now);
                                counters.record_release(ok);
                                refunded += u64::from(ok);
                            }
                        }
                    }
                    Decision::Refused(_) => refused += 1,
                }
            }
            std::hint::black_box(pacer.state());
        }
        std::hint::black_box(counters.snapshot());
    });
    assert_eq!(n, 0, "{n} allocations in reserve/release/refuse");
    // The loop really took each path.
    assert!(
        admitted > 0 && refused > 0 && refunded > 0,
        "{admitted} {refused} {refunded}"
    );
}

#[test]
fn settings_notices_and_frames_never_allocate() {
    let settings = [
        Settings::default(),
        Settings {
            rate_per_min: Some(" 9999 "),
            idle_timeout_ms: Some("1e2"),
            total_timeout_ms: Some("60000"),
            max_retries: Some("99"),
        },
        Settings {
            rate_per_min: Some("60"),
            idle_timeout_ms: Some("14001"),
            total_timeout_ms: None,
            max_retries: Some("-1"),
        },
        Settings {
            rate_per_min: Some("2"),
            idle_timeout_ms: Some("600000"),
            total_timeout_ms: Some("60000"),
            max_retries: Some("4"),
        },
    ];
    let mut buffer = [0u8; 1024];
    let mut tiny = [0u8; 4];
    let mut notices = 0usize;
    let n = allocations_in(|| {
        for _ in 0..200 {
            let mut registry: NoticeRegistry = NoticeRegistry::new();
            for s in &settings {
                let resolution = resolve(s);
                std::hint::black_box(&resolution.budget);
                for notice in &resolution.notices {
                    notices += 1;
                    std::hint::black_box(registry.first_time(notice));
                    assert!(notice.render(&mut buffer).is_ok());
                    assert!(notice.render(&mut tiny).is_err());
                }
            }
            for kind in NoticeKind::ALL {
                let notice = Notice::new(kind, "disabled:3:14001", [5, 120_000, 60]);
                assert!(notice.render(&mut buffer).is_ok());
                std::hint::black_box(notice.key());
            }
            for retry_after_s in [1u64, 4, 15, u64::MAX] {
                let prefix = "Too many new connections \"now\"\\\n\u{1}; ünïcode";
                assert!(frame::write_refusal_body(prefix, retry_after_s, &mut buffer).is_ok());
                assert!(frame::write_refusal_body(prefix, retry_after_s, &mut tiny).is_err());
            }
        }
    });
    assert_eq!(n, 0, "{n} allocations in resolve/render/frame");
    assert!(notices > 0);
}

#[test]
fn the_state_word_is_small() {
    let pacer = size_of::<Pacer>();
    let word = size_of::<portable_atomic::AtomicU128>();
    println!(
        "size_of::<Pacer>() = {pacer} (align {}), state word = {word} bytes, Counters = {}",
        align_of::<Pacer>(),
        size_of::<Counters>()
    );
    // All mutable state is one 128-bit atomic word.
    assert_eq!(word, 16);
    assert!(word <= 32);
    // The immutable parameters and the state word fit one 64-byte cache
    // line; the adaptive control word (SPEC §14) follows them.
    assert!(
        pacer_core::STATE_OFFSET + word <= 64,
        "the state word ends at {}",
        pacer_core::STATE_OFFSET + word
    );
    assert_eq!(
        pacer,
        pacer_core::CONTROL_OFFSET + word,
        "Pacer is {pacer} bytes"
    );
    assert!(pacer <= 80, "Pacer is {pacer} bytes");
}
