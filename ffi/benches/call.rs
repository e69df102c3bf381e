//! The price of the C boundary: `pacer_reserve` called as a C function
//! beside `Pacer::reserve` called directly from Rust, in one criterion group
//! so the difference in `docs/benchmarks.md` comes from one run
//! (`scripts/bench.sh` runs this with the core's benches).
//!
//! - `rust_admit` / `rust_refuse`: `Pacer::reserve` on the admit path (the
//!   clock advancing 1000 ms per call at 600/min, so every call debits a
//!   token and wins its compare-and-swap) and on a drained pacer (every call
//!   refuses), as one out-of-line call (`direct`).
//! - `c_admit` / `c_refuse`: the same through `pacer_reserve`, called through
//!   a function pointer (`black_box`ed, so it is a real indirect call with
//!   the C calling convention, as from C, Go or Python): storage check,
//!   panic guard, counters, the decision written to the caller's struct.
//!
//! Every call's answer is checked: a wrong one aborts the bench.

use std::hint::black_box;
use std::mem::MaybeUninit;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pacer::pacer::{
    pacer as PacerStorage, pacer_config, pacer_decision, pacer_decision_kind, pacer_init,
    pacer_reserve,
};
use pacer::status::pacer_status;
use pacer_core::{Config, Decision, Pacer};

#[path = "../../core/benches/shared/configs.rs"]
mod configs;
use configs::{ADMIT, REFUSE, STEP_MS};

type ReserveFn =
    unsafe extern "C" fn(*const PacerStorage, u64, *mut pacer_decision) -> pacer_status;

fn c_pacer(config: &Config) -> Box<PacerStorage> {
    // SAFETY: `pacer` is plain bytes; any pattern (zeroes here) is valid
    // storage before pacer_init.
    let mut storage: Box<PacerStorage> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    // SAFETY: both pointers are valid for the call.
    let status = unsafe { pacer_init(&mut *storage, &pacer_config::from(config), 0) };
    assert!(matches!(status, pacer_status::Ok), "pacer_init failed");
    storage
}

/// `Pacer::reserve` as one out-of-line call, as the C call is: the core
/// marks it `#[inline]`, and inlined into the bench loop it would not be
/// the same work.
#[inline(never)]
fn direct(pacer: &Pacer, now_ms: u64) -> Decision {
    pacer.reserve(now_ms)
}

fn blank_decision() -> pacer_decision {
    // SAFETY: pacer_decision is integers and bools; all zeroes is valid.
    unsafe { MaybeUninit::zeroed().assume_init() }
}

fn call(reserve: ReserveFn, storage: &PacerStorage, now_ms: u64, out: &mut pacer_decision) -> u32 {
    // SAFETY: `storage` was initialised by pacer_init; `out` is writable.
    let status = unsafe { reserve(storage, now_ms, out) };
    assert!(matches!(status, pacer_status::Ok), "pacer_reserve failed");
    out.kind
}

fn boundary(c: &mut Criterion) {
    let mut g = c.benchmark_group("call");
    let reserve: ReserveFn = pacer_reserve;
    let admitted = pacer_decision_kind::Admitted as u32;
    let refused = pacer_decision_kind::Refused as u32;

    let pacer = Pacer::new(&ADMIT, 0).expect("valid config");
    let mut now = 0u64;
    g.bench_function(BenchmarkId::new("rust_admit", "1t"), |b| {
        b.iter(|| {
            now += STEP_MS;
            assert!(matches!(
                black_box(direct(&pacer, black_box(now))),
                Decision::Admitted(_)
            ));
        })
    });

    let storage = c_pacer(&ADMIT);
    let mut out = blank_decision();
    let mut now = 0u64;
    g.bench_function(BenchmarkId::new("c_admit", "1t"), |b| {
        b.iter(|| {
            now += STEP_MS;
            let kind = call(black_box(reserve), &storage, black_box(now), &mut out);
            assert_eq!(black_box(kind), admitted);
        })
    });

    let pacer = Pacer::new(&REFUSE, 0).expect("valid config");
    for _ in 0..3 {
        pacer.reserve(0);
    }
    g.bench_function(BenchmarkId::new("rust_refuse", "1t"), |b| {
        b.iter(|| {
            assert!(matches!(
                black_box(direct(&pacer, black_box(0))),
                Decision::Refused(_)
            ));
        })
    });

    let storage = c_pacer(&REFUSE);
    let mut out = blank_decision();
    for _ in 0..3 {
        call(reserve, &storage, 0, &mut out);
    }
    g.bench_function(BenchmarkId::new("c_refuse", "1t"), |b| {
        b.iter(|| {
            let kind = call(black_box(reserve), &storage, black_box(0), &mut out);
            assert_eq!(black_box(kind), refused);
        })
    });
    g.finish();
}

criterion_group!(benches, boundary);
criterion_main!(benches);
