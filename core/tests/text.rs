//! Notices, their dedupe registry, the refusal frame and counters. Expected
//! texts are written out by hand from SPEC §2, §7 and §9.

use pacer_core::frame::{write_refusal_body, REFUSAL_CONTENT_TYPE, REFUSAL_STATUS};
use pacer_core::settings::{parse_setting, resolve, Parsed, Settings};
use pacer_core::{Config, CounterSnapshot, Counters, Notice, NoticeKind, NoticeRegistry, Pacer};

mod support;
use support::decide;

fn render(notice: &Notice<'_>) -> String {
    let mut buf = [0u8; 512];
    let n = notice.render(&mut buf).unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

#[test]
fn parse_is_strict_decimal() {
    assert_eq!(parse_setting(None), Parsed::Unset);
    assert_eq!(parse_setting(Some("")), Parsed::Unset);
    assert_eq!(parse_setting(Some(" \t\n")), Parsed::Unset);
    assert_eq!(parse_setting(Some(" 42 ")), Parsed::Value(42));
    assert_eq!(parse_setting(Some("007")), Parsed::Value(7));
    assert_eq!(
        parse_setting(Some("18446744073709551615")),
        Parsed::Value(u64::MAX)
    );
    for bad in [
        "18446744073709551616",
        "1e2",
        "0x10",
        "-0",
        "+1",
        "12.5",
        "1,000",
        "1_000",
        "Infinity",
        "NaN",
        "4 2",
        "٤",
    ] {
        assert_eq!(parse_setting(Some(bad)), Parsed::Malformed, "{bad:?}");
    }
}

#[test]
fn norefuse_notice_text_at_one_per_minute() {
    // SPEC §7 / the design record: "a 5-retry schedule spans only 20000ms …
    // the 60000ms wait".
    let resolution = resolve(&Settings {
        rate_per_min: Some("1"),
        ..Settings::default()
    });
    assert_eq!(resolution.notices.len(), 1);
    assert_eq!(
        render(&resolution.notices[0]),
        "pacing new connections at 1/minute without refusing overflow: a 5-retry schedule spans only 20000ms, \
         which cannot outlast the 60000ms wait for a free connection slot, so excess connections are admitted late rather than failed"
    );
}

#[test]
fn disabled_and_malformed_notice_texts() {
    let idle_14001 = Settings {
        idle_timeout_ms: Some("14001"),
        ..Settings::default()
    };
    let rate_1e2 = Settings {
        rate_per_min: Some("1e2\n"),
        ..Settings::default()
    };
    for (settings, first_notice) in [
        (
            idle_14001,
            "not pacing new connections: a 3-retry budget leaves no room to queue inside the resolved 14001ms request deadline",
        ),
        (
            rate_1e2,
            "ignoring new-connection rate \"1e2\\n\": not a whole number of connections per minute; using 60/minute",
        ),
    ] {
        assert_eq!(render(&resolve(&settings).notices[0]), first_notice);
    }
}

#[test]
fn render_reports_needed_length_when_short() {
    let notice = Notice::new(NoticeKind::RateClamped, "601", [600, 0, 0]);
    let full = render(&notice);
    let mut small = [0u8; 8];
    assert_eq!(notice.render(&mut small), Err(full.len()));
    let mut exact = vec![0u8; full.len()];
    assert_eq!(notice.render(&mut exact), Ok(full.len()));
    assert_eq!(notice.render(&mut []), Err(full.len()));
}

#[test]
fn each_notice_once_per_key() {
    let mut registry: NoticeRegistry = NoticeRegistry::new();
    assert!(registry.is_empty());
    let a = Notice::new(NoticeKind::RateMalformed, "abc", [60, 0, 0]);
    let b = Notice::new(NoticeKind::RateMalformed, "abd", [60, 0, 0]);
    assert!(registry.first_time(&a));
    assert!(!registry.is_empty());
    assert!(!registry.first_time(&a));
    assert!(registry.first_time(&b));
    let disabled = Notice::new(NoticeKind::PacingDisabled, "", [3, 14001, 60]);
    assert!(registry.first_time(&disabled));
    assert!(!registry.first_time(&disabled));
    assert!(registry.first_time(&Notice::new(NoticeKind::PacingDisabled, "", [2, 14001, 60])));
    assert_eq!(registry.len(), 4);
}

#[test]
fn notice_keys_as_text() {
    let key = |n: Notice<'_>| {
        let mut buf = [0u8; 64];
        let len = n.write_key(&mut buf).unwrap();
        String::from_utf8(buf[..len].to_vec()).unwrap()
    };
    for (kind, raw, values, want) in [
        // Text-keyed: the namespace and the text as given (untrimmed).
        (NoticeKind::RateMalformed, " 9x", [60, 0, 0], "rate: 9x"),
        (NoticeKind::RateClamped, "900", [600, 0, 0], "rate:900"),
        (NoticeKind::RetriesClamped, "9", [2, 14000, 0], "retries:9"),
        // Number-keyed: the namespace and all three numbers.
        (
            NoticeKind::PacingDisabled,
            "",
            [3, 14001, 60],
            "disabled:3:14001:60",
        ),
        (NoticeKind::NoRefuse, "", [6, 1, 2000], "norefuse:6:1:2000"),
        (
            NoticeKind::IdleLowered,
            "",
            [120000, 60000, 0],
            "pair-idle:120000:60000:0",
        ),
        // A hostile rate text keeps its own namespace.
        (
            NoticeKind::RateMalformed,
            "disabled:3:14001:60",
            [60, 0, 0],
            "rate:disabled:3:14001:60",
        ),
    ] {
        assert_eq!(key(Notice::new(kind, raw, values)), want);
    }
    // Too short: the needed length, as for render.
    let mut short = [0u8; 4];
    assert_eq!(
        Notice::new(NoticeKind::RateMalformed, "abc", [60, 0, 0]).write_key(&mut short),
        Err(8)
    );
}

#[test]
fn hostile_setting_cannot_suppress_disabled_notice() {
    // The design record's bug: a rate text equal to the disabled notice's key
    // suppressed the one notice that must never go missing.
    let resolution = resolve(&Settings {
        rate_per_min: Some("disabled:3:14001"),
        idle_timeout_ms: Some("14001"),
        ..Settings::default()
    });
    let mut registry: NoticeRegistry<8> = NoticeRegistry::new();
    let emitted: Vec<NoticeKind> = resolution
        .notices
        .iter()
        .filter(|n| registry.first_time(n))
        .map(|n| n.kind)
        .collect();
    assert_eq!(
        emitted,
        vec![NoticeKind::RateMalformed, NoticeKind::PacingDisabled]
    );
    // Texts that look like another namespace's key stay in their own.
    for raw in ["disabled:3:14001", "norefuse:1:5:4833", "idle:abc"] {
        assert!(registry.first_time(&Notice::new(NoticeKind::IdleMalformed, raw, [120000, 0, 0])));
    }
}

#[test]
fn full_registry_lets_notices_through() {
    let mut registry: NoticeRegistry<2> = NoticeRegistry::new();
    let notices = [
        Notice::new(NoticeKind::RateMalformed, "a", [60, 0, 0]),
        Notice::new(NoticeKind::RateMalformed, "b", [60, 0, 0]),
        Notice::new(NoticeKind::RateMalformed, "c", [60, 0, 0]),
    ];
    for n in &notices {
        assert!(registry.first_time(n));
    }
    assert!(!registry.first_time(&notices[0]));
    assert!(
        registry.first_time(&notices[2]),
        "unremembered notice repeats rather than vanishing"
    );
}

const PREFIX: &str = "clodex is limiting how fast it opens new OpenAI connections to reduce the chance of an upstream rate limit";

#[test]
fn refusal_frame_is_byte_exact() {
    let mut buf = [0u8; 512];
    let n = write_refusal_body(PREFIX, 4, &mut buf).unwrap();
    let expected = "data: {\"type\":\"error\",\"sequence_number\":0,\"error\":{\"type\":\"rate_limit_error\",\"code\":\"429\",\
\"message\":\"clodex is limiting how fast it opens new OpenAI connections to reduce the chance of an upstream rate limit; retry after 4s\",\
\"param\":null,\"retry_after_seconds\":4}}\n\n";
    assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), expected);
    assert_eq!(REFUSAL_STATUS, 200);
    assert_eq!(REFUSAL_CONTENT_TYPE, "text/event-stream; charset=utf-8");
}

#[test]
fn refusal_frame_escapes_and_parses_as_json() {
    let prefix = "say \"no\" \\ twice\n\ttab\u{1}é";
    let mut buf = [0u8; 512];
    let n = write_refusal_body(prefix, 15, &mut buf).unwrap();
    let text = std::str::from_utf8(&buf[..n]).unwrap();
    let json = text
        .strip_prefix("data: ")
        .unwrap()
        .strip_suffix("\n\n")
        .unwrap();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(
        value["error"]["message"],
        format!("{prefix}; retry after 15s")
    );
    assert_eq!(value["error"]["retry_after_seconds"], 15);
    // The short escapes for \n, \r, \t; \u00XX for other control bytes.
    assert!(text.contains(r#"say \"no\" \\ twice\n\ttab\u0001é"#));
    let mut buf = [0u8; 256];
    let n = write_refusal_body("a\rb", 1, &mut buf).unwrap();
    assert!(std::str::from_utf8(&buf[..n])
        .unwrap()
        .contains(r#""a\rb; retry after 1s""#));
}

#[test]
fn refusal_frame_reports_needed_length() {
    let mut buf = [0u8; 512];
    let full = write_refusal_body("x", 1, &mut buf).unwrap();
    let mut short = vec![0u8; full - 1];
    assert_eq!(write_refusal_body("x", 1, &mut short), Err(full));
    assert_eq!(write_refusal_body("x", 1, &mut []), Err(full));
}

#[test]
fn counters_count_each_path() {
    for exclusive in [false, true] {
        count_each_path(exclusive);
    }
}

fn count_each_path(exclusive: bool) {
    // rate 60, burst 1, bound 2000: now, 1000, 2000, then refusals.
    let config = Config {
        burst: 1,
        idle_timeout_ms: 30000,
        max_retries: 3,
        ..Config::DEFAULT
    };
    let mut pacer = Pacer::new(&config, 100).unwrap();
    let mut counters = Counters::new();
    let mut tickets = Vec::new();
    for _ in 0..5 {
        let decision = decide(&mut pacer, &mut counters, 100, exclusive);
        if let pacer_core::Decision::Admitted(a) = decision {
            tickets.push(a.ticket.unwrap());
        }
    }
    // behind the mark: refused, regressed
    decide(&mut pacer, &mut counters, 50, exclusive);
    let refunded = pacer.release(tickets.pop().unwrap(), 100);
    counters.record_release(refunded);
    assert_eq!(
        counters.snapshot(),
        CounterSnapshot {
            admitted: 3,
            admitted_after_wait: 2,
            refused: 3,
            shaped: 0,
            released: 1,
            refunded: 1,
            clock_regressions: 1,
            booked: 0,
            opened: 0,
            throttled: 0,
            // waits 1000 (bucket ≤ 1000 ms) and 2000 (bucket ≤ 2500 ms)
            wait_ms_total: 3000,
            redeemed: 0,
            wait_buckets: [0, 0, 0, 0, 1, 1, 0, 0],
        },
        "exclusive: {exclusive}"
    );
    // Shaping at 1/min: #10 is shaped (waits the bound), #11 passes the floor.
    let mut pacer = Pacer::new(
        &Config {
            rate_per_min: 1,
            ..Config::DEFAULT
        },
        0,
    )
    .unwrap();
    let mut counters = Counters::new();
    for _ in 0..12 {
        decide(&mut pacer, &mut counters, 0, exclusive);
    }
    let snap = counters.snapshot();
    assert_eq!(
        (
            snap.admitted,
            snap.admitted_after_wait,
            snap.shaped,
            snap.refused
        ),
        (12, 1, 2, 0),
        "exclusive: {exclusive}"
    );
}

#[test]
fn idle_override_is_used_as_given_and_lowered_silently() {
    use pacer_core::settings::resolve_with_idle_override;
    // 30000 ms: ladder ceiling 3 (2000·(2^3−1) = 14000 < 30000, 2^4 step
    // 30000 is not), so the default 5 retries become 3, silently.
    // Each resolution below is silent (no notice); its budget is returned.
    let silent = |settings: Settings<'_>, idle_override: u64| {
        let r = resolve_with_idle_override(&settings, idle_override);
        assert!(r.notices.is_empty(), "{:?}", r.notices);
        r.budget
    };
    let b = silent(Settings::default(), 30_000);
    assert_eq!((b.idle_timeout_ms, b.max_retries), (30_000, 3));
    // The idle setting text is not read: no malformed/clamp notice for it.
    // 5000 is below the accepted range but an override is not clamped;
    // ladder ceiling 1 (2000 < 5000, 6000 is not), bound
    // floor((5000 − 2000)/(2·2)) = 750 > 0, so pacing stays on.
    let idle_abc = Settings {
        idle_timeout_ms: Some("abc"),
        ..Settings::default()
    };
    let b = silent(idle_abc, 5_000);
    assert_eq!((b.idle_timeout_ms, b.max_retries), (5_000, 1));
    // Total 60000 below an override of 700000: idle lowered to 60000 with no
    // pair notice; retries ceiling(60000) = 4 (30000 < 60000, 62000 is not).
    let total_60000 = Settings {
        total_timeout_ms: Some("60000"),
        ..Settings::default()
    };
    let b = silent(total_60000, 700_000);
    assert_eq!(b.idle_timeout_ms, 60_000);
    assert_eq!(b.total_timeout_ms, 60_000);
    assert_eq!(b.max_retries, 4);
}
