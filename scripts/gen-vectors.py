#!/usr/bin/env python3
"""Writes tests/vectors/*.json from the hand-derived expectations below.

Every expected number here is written from SPEC.md (§3 tables, §7 scenarios)
or derived by hand in the comment beside it; nothing calls the pacer. The
script only expands repetition ("ten admissions at wait 0") into steps.
Run it after editing an expectation; the JSON files are what tests read.
"""
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "vectors"

DEFAULTS = dict(rate_per_min=60, burst=10, idle_timeout_ms=120000, max_retries=5, release_policy="refund")


def config(**changes):
    c = dict(DEFAULTS)
    c.update(changes)
    return c


class Script:
    def __init__(self):
        self.steps = []
        self.ticket = 0

    def admit(self, wait_ms, t=0, debit=True, n=1):
        for _ in range(n):
            ticket = None
            if debit:
                self.ticket += 1
                ticket = self.ticket
            self.steps.append({"op": "reserve", "t": t, "expect": {"kind": "admitted", "wait_ms": wait_ms, "ticket": ticket}})
        return self

    def refuse(self, required_wait_ms, retry_after_s, t=0, n=1):
        for _ in range(n):
            self.steps.append({"op": "reserve", "t": t, "expect": {"kind": "refused", "required_wait_ms": required_wait_ms, "retry_after_s": retry_after_s}})
        return self

    def release(self, ticket, refunded, t=0):
        self.steps.append({"op": "release", "ticket": ticket, "t": t, "expect": {"kind": "released", "refunded": refunded}})
        return self


def scenario(name, source, cfg, pacer, script, t=0):
    return {"name": name, "source": source, "config": cfg, "t": t, "expect_pacer": pacer, "steps": script.steps}


def scenarios():
    out = []
    # Defaults: bound 4833, one token per 1000 ms. #10-13 wait 1000..4000;
    # #14 needs 5000 > 4833 and is refused, hint min(ceil(5000/1000)=5, cap 4) = 4.
    s = Script().admit(0, n=10)
    for k in range(1, 5):
        s.admit(1000 * k)
    s.refuse(5000, 4, n=16)
    out.append(scenario("defaults-30-simultaneous", "SPEC §7: #0-9 now, #10-13 wait 1000-4000, #14 first refused (5000, hint 4)",
                        config(), {"bound_ms": 4833, "enabled": True, "can_refuse": True}, s))

    # Rate 1 and 2 at the default budget: schedule 20000 ms * rate < 60000, so
    # shaping. Floor = 4833*rate units; #10 debits the floor and waits the
    # bound; #11.. find nothing above the floor and pass with no debit.
    for rate in (1, 2):
        s = Script().admit(0, n=10).admit(4833).admit(0, debit=False, n=9)
        out.append(scenario(f"rate-{rate}-20-simultaneous", f"SPEC §7: rate {rate}/min: 19 at once, exactly 1 waits the bound 4833, none refused",
                            config(rate_per_min=rate), {"bound_ms": 4833, "enabled": True, "can_refuse": False}, s))

    # Retries 0: bound = min(15000, 120000/2) = 15000, max_debt 15 tokens.
    s = Script().admit(0, n=10)
    for k in range(1, 16):
        s.admit(1000 * k)
    s.admit(0, debit=False, n=15)
    out.append(scenario("retries-0-40-simultaneous", "SPEC §7: #0-9 now, #10-24 wait 1000..15000, #25-39 at once with nothing debited",
                        config(max_retries=0), {"bound_ms": 15000, "enabled": True, "can_refuse": False}, s))

    # Idle 14001, retries 3: backoff 14000 leaves 1 ms; bound floor(1/8) = 0: disabled.
    s = Script().admit(0, debit=False, n=50).release(1, False)
    out.append(scenario("idle-14001-disabled", "SPEC §7: 50 simultaneous all at once; pacing disabled",
                        config(idle_timeout_ms=14001, max_retries=3), {"bound_ms": 0, "enabled": False, "can_refuse": False}, s))

    # Burst 1, bound 2000 (idle 30000, retries 3: (30000-14000)/8 = 2000).
    s = Script().admit(0).admit(1000).admit(2000).refuse(3000, 2, n=2)
    out.append(scenario("burst-1-bound-2000", "SPEC §7: #0 now, #1 1000, #2 2000, #3 #4 refused (3000, hint 2)",
                        config(burst=1, idle_timeout_ms=30000, max_retries=3), {"bound_ms": 2000, "enabled": True, "can_refuse": True}, s))

    # Burst 1, bound 15000 (idle 3600000, retries 5): a queued request
    # released at t=0 gives its slot back; the next waits 1000, not 2000.
    s = Script().admit(0).admit(1000).release(2, True).admit(1000).admit(2000)
    out.append(scenario("release-gives-slot-back", "SPEC §7: released queued request's slot is reused (1000, not 2000)",
                        config(burst=1, idle_timeout_ms=3600000), {"bound_ms": 15000, "enabled": True, "can_refuse": True}, s))

    # Rate 0: everything at once, no state touched, no tickets.
    s = Script().admit(0, debit=False, n=5).release(1, False)
    out.append(scenario("rate-0", "SPEC §7: rate 0 admits everything at once",
                        config(rate_per_min=0), {"bound_ms": 4833, "enabled": False, "can_refuse": False}, s))

    # Refund policy: releasing an earlier ticket refunds even with a later
    # debit outstanding; a second release of the same ticket is false.
    # burst 1, rate 60, bound 15000: tokens 1 -> 0 -> -1; release #1 -> 0;
    # the next waits 1000 (tokens 0 -> needs 1 token = 1000 ms).
    s = Script().admit(0).admit(1000).release(1, True).release(1, False).admit(1000).release(99, False)
    out.append(scenario("refund-policy", "SPEC §4: refund always, at most once per ticket; unknown ticket false",
                        config(burst=1, idle_timeout_ms=3600000), {"bound_ms": 15000, "enabled": True, "can_refuse": True}, s))

    # Strict policy, same start: #1 cannot refund while #2's debit stands
    # (and is spent by trying); #2 can. Then #3 and #4 queue; refund #4
    # then #3 (each the most recent outstanding debit); #1 stays spent. The
    # level is back to -0 tokens... : after #1's debit only, tokens 0, so the
    # next waits 1000.
    s = (Script().admit(0).admit(1000).release(1, False).release(2, True)
         .admit(1000).admit(2000).release(4, True).release(3, True).release(1, False).admit(1000))
    out.append(scenario("strict-policy", "SPEC §4: strict refunds only while every later debit was refunded",
                        config(burst=1, idle_timeout_ms=3600000, release_policy="strict"), {"bound_ms": 15000, "enabled": True, "can_refuse": True}, s))

    # Refund capped at capacity: burst 1; at t=5000 the bucket is full again,
    # so the refund is absorbed (still reported true). Then one at once, one
    # after 1000.
    s = Script().admit(0).release(1, True, t=5000).admit(0, t=5000).admit(1000, t=5000)
    out.append(scenario("refund-capped", "SPEC §4: refund capped at capacity, reported true",
                        config(burst=1, idle_timeout_ms=3600000), {"bound_ms": 15000, "enabled": True, "can_refuse": True}, s))

    # Clock regression: burst 1, bound 2000. At t=10000 take the token; a
    # reading of 5000 counts as 10000 (no refill of 5000..10000 twice): it
    # waits 1000. At 11000 the level is -1 + 1 = 0 tokens: waits 1000 again.
    s = Script().admit(0, t=10000).admit(1000, t=5000).admit(1000, t=11000)
    out.append(scenario("clock-regression", "SPEC §5: a reading behind the high-water mark refills nothing and drains nothing",
                        config(burst=1, idle_timeout_ms=30000, max_retries=3), {"bound_ms": 2000, "enabled": True, "can_refuse": True}, s))

    # u64::MAX clock: created at 0, read at the last millisecond: full (10),
    # then one token per 1000 ms as usual; no overflow, no panic.
    top = 2**64 - 1
    s = Script().admit(0, t=top, n=10).admit(1000, t=top).admit(2000, t=0)
    out.append(scenario("clock-u64-max", "SPEC §5: u64::MAX is an ordinary reading",
                        config(), {"bound_ms": 4833, "enabled": True, "can_refuse": True}, s))

    # Refill between arrivals: defaults drained to -4 tokens at t=0; at
    # t=2500 the level is -4 + 2.5 = -1.5: wait ceil(2.5 tokens) = 2500 ms.
    s = Script().admit(0, n=10)
    for k in range(1, 5):
        s.admit(1000 * k)
    s.admit(2500, t=2500)
    out.append(scenario("refill-between-arrivals", "SPEC §4: exact fractional refill",
                        config(), {"bound_ms": 4833, "enabled": True, "can_refuse": True}, s))
    return out


def notice(kind, raw="", values=(0, 0, 0)):
    return {"kind": kind, "raw": raw, "values": list(values)}


def budget_case(name, settings, rate, idle, total, retries, bound, cap_s, can_refuse, enabled, notices=()):
    full = {"rate_per_min": None, "idle_timeout_ms": None, "total_timeout_ms": None, "max_retries": None}
    full.update(settings)
    return {"name": name, "settings": full, "expect": {
        "rate_per_min": rate, "idle_timeout_ms": idle, "total_timeout_ms": total, "max_retries": retries,
        "bound_ms": bound, "hint_cap_s": cap_s, "refusal_schedule_ms": retries * cap_s * 1000,
        "can_refuse": can_refuse, "enabled": enabled, "notices": list(notices)}}


def budgets():
    B = budget_case
    return [
        # SPEC §3 worked budgets.
        B("defaults", {}, 60, 120000, 600000, 5, 4833, 4, True, True),
        B("idle 30000", {"idle_timeout_ms": "30000"}, 60, 30000, 600000, 3, 2000, 2, True, True),
        B("idle 10000", {"idle_timeout_ms": "10000"}, 60, 10000, 600000, 2, 666, 1, True, True),
        B("idle 3600000", {"idle_timeout_ms": "3600000"}, 60, 3600000, 3600000, 5, 15000, 15, True, True,
          [notice("total_raised", "", (600000, 3600000, 0))]),
        B("idle 600000 total 60000", {"idle_timeout_ms": "600000", "total_timeout_ms": "60000"}, 60, 60000, 60000, 4, 3000, 3, True, True,
          [notice("idle_lowered", "", (600000, 60000, 0))]),
        # bound 0: schedule 3*1*1000*60 >= 60000 so the formula says can-refuse,
        # but pacing is off.
        B("idle 14001", {"idle_timeout_ms": "14001"}, 60, 14001, 600000, 3, 0, 1, True, False,
          [notice("pacing_disabled", "", (3, 14001, 60))]),
        B("retries 0", {"max_retries": "0"}, 60, 120000, 600000, 0, 15000, 15, False, True),
        B("retries 99 idle 3600000", {"max_retries": "99", "idle_timeout_ms": "3600000"}, 60, 3600000, 3600000, 10, 15000, 15, True, True,
          [notice("total_raised", "", (600000, 3600000, 0)), notice("retries_clamped", "99", (10, 3600000, 0))]),
        # Can-refuse thresholds (SPEC §3).
        B("rate 1", {"rate_per_min": "1"}, 1, 120000, 600000, 5, 4833, 4, False, True, [notice("norefuse", "", (1, 5, 4833))]),
        B("rate 2", {"rate_per_min": "2"}, 2, 120000, 600000, 5, 4833, 4, False, True, [notice("norefuse", "", (2, 5, 4833))]),
        B("rate 3", {"rate_per_min": "3"}, 3, 120000, 600000, 5, 4833, 4, True, True),
        B("idle 10000 rate 29", {"rate_per_min": "29", "idle_timeout_ms": "10000"}, 29, 10000, 600000, 2, 666, 1, False, True,
          [notice("norefuse", "", (29, 2, 666))]),
        B("idle 10000 rate 30", {"rate_per_min": "30", "idle_timeout_ms": "10000"}, 30, 10000, 600000, 2, 666, 1, True, True),
        # Strict parsing (SPEC §2, §10).
        B("rate padded", {"rate_per_min": "  75\t"}, 75, 120000, 600000, 5, 4833, 4, True, True),
        B("rate blank", {"rate_per_min": "   "}, 60, 120000, 600000, 5, 4833, 4, True, True),
        B("rate 0", {"rate_per_min": "0"}, 0, 120000, 600000, 5, 4833, 4, False, False),
        B("rate 600", {"rate_per_min": "600"}, 600, 120000, 600000, 5, 4833, 4, True, True),
        B("rate 601", {"rate_per_min": "601"}, 600, 120000, 600000, 5, 4833, 4, True, True, [notice("rate_clamped", "601", (600, 0, 0))]),
        B("rate u64 max", {"rate_per_min": "18446744073709551615"}, 600, 120000, 600000, 5, 4833, 4, True, True,
          [notice("rate_clamped", "18446744073709551615", (600, 0, 0))]),
    ] + [
        B(f"rate malformed {raw!r}", {"rate_per_min": raw}, 60, 120000, 600000, 5, 4833, 4, True, True,
          [notice("rate_malformed", raw, (60, 0, 0))])
        for raw in ["1e2", "0x10", "-0", "+5", "12.5", "1,000", "Infinity", "NaN", "-1", "18446744073709551616", "６０", "disabled:3:14001"]
    ] + [
        B("idle below range", {"idle_timeout_ms": "5000"}, 60, 10000, 600000, 2, 666, 1, True, True, [notice("idle_clamped", "5000", (10000, 0, 0))]),
        B("idle malformed", {"idle_timeout_ms": "2m"}, 60, 120000, 600000, 5, 4833, 4, True, True, [notice("idle_malformed", "2m", (120000, 0, 0))]),
        B("total above range", {"total_timeout_ms": "99999999999"}, 60, 120000, 21600000, 5, 4833, 4, True, True,
          [notice("total_clamped", "99999999999", (21600000, 0, 0))]),
        B("total malformed", {"total_timeout_ms": "1e9"}, 60, 120000, 600000, 5, 4833, 4, True, True, [notice("total_malformed", "1e9", (600000, 0, 0))]),
        # total below idle, idle unset: idle lowered to the total (60000 -> retries 4, bound 3000).
        B("total 60000 only", {"total_timeout_ms": "60000"}, 60, 60000, 60000, 4, 3000, 3, True, True, [notice("idle_lowered", "", (120000, 60000, 0))]),
        B("retries malformed", {"max_retries": "-1"}, 60, 120000, 600000, 5, 4833, 4, True, True, [notice("retries_malformed", "-1", (5, 0, 0))]),
        B("retries above ceiling", {"max_retries": "6"}, 60, 120000, 600000, 5, 4833, 4, True, True, [notice("retries_clamped", "6", (5, 120000, 0))]),
        # Boundaries (each pins a comparison: equal is not "below" / "above").
        # total == idle: no pair notice; ceiling(60000) = 4, bound (60000-30000)/10.
        B("idle equals total", {"idle_timeout_ms": "60000", "total_timeout_ms": "60000"}, 60, 60000, 60000, 4, 3000, 3, True, True),
        # retries exactly at the ceiling (5 at 120000): no clamp notice.
        B("retries at the ceiling", {"max_retries": "5"}, 60, 120000, 600000, 5, 4833, 4, True, True),
        # rate 0 with a zero bound: pacing was switched off on purpose, no disabled notice.
        B("rate 0 with disabling idle", {"rate_per_min": "0", "idle_timeout_ms": "14001"}, 0, 14001, 600000, 3, 0, 1, False, False),
        # idle 10000: ceiling 2, default min(5, 2) = 2.
        B("hostile rate text with disabling idle", {"rate_per_min": "disabled:3:14001", "idle_timeout_ms": "14001"}, 60, 14001, 600000, 3, 0, 1, True, False,
          [notice("rate_malformed", "disabled:3:14001", (60, 0, 0)), notice("pacing_disabled", "", (3, 14001, 60))]),
    ]


def derived():
    return {
        "description": "SPEC §3 quantities by hand",
        "ladder_ceiling": [{"idle_timeout_ms": i, "expect": e} for i, e in
                           [(120000, 5), (30000, 3), (14001, 3), (14000, 2), (10000, 2), (3600000, 10), (60000, 4), (2001, 1), (2000, 0), (0, 0)]],
        "wait_bound_ms": [{"idle_timeout_ms": i, "max_retries": r, "expect": e} for i, r, e in
                          [(120000, 5, 4833), (30000, 3, 2000), (10000, 2, 666), (3600000, 5, 15000), (60000, 4, 3000),
                           (14001, 3, 0), (120000, 0, 15000), (3600000, 10, 15000), (0, 0, 0), (14000, 3, 0), (20000, 0, 10000)]],
        "retry_after_s": [{"required_wait_ms": q, "bound_ms": b, "expect": e} for q, b, e in
                          [(60000, 666, 1), (60000, 2000, 2), (60000, 4833, 4), (60000, 15000, 15), (3000, 15000, 3), (1200, 4833, 2),
                           (0, 4833, 1), (1, 4833, 1), (1000, 4833, 1), (1001, 4833, 2), (5000, 4833, 4), (3000, 2000, 2), (2**64 - 1, 15000, 15)]],
        "can_refuse": [{"rate_per_min": q, "max_retries": r, "bound_ms": b, "expect": e} for q, r, b, e in
                       [(3, 5, 4833, True), (2, 5, 4833, False), (1, 5, 4833, False), (30, 2, 666, True), (29, 2, 666, False),
                        (60, 0, 15000, False), (0, 5, 4833, False), (600, 1, 666, True), (4, 1, 15000, True), (3, 1, 15000, False)]],
    }


def main():
    check = "--check" in sys.argv[1:]
    files = {
        "scenarios.json": {"description": "Pacer decisions, SPEC §4-§7; the replay format of `pacer replay`", "scenarios": scenarios()},
        "budgets.json": {"description": "Settings strings to resolved budgets, SPEC §2-§3", "cases": budgets()},
        "derived.json": derived(),
    }
    stale = []
    for name, doc in files.items():
        text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        sys.exit(f"tests/vectors out of date: {', '.join(stale)}; run python3 scripts/gen-vectors.py")
    print(f"vectors: {len(files)} files {'current' if check else 'written'}")


if __name__ == "__main__":
    main()
