/* C tests of libpacer: vectors, bad input, text. Expectations come from
 * tests/vectors (hand-derived from the spec) or are written out here. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "pacer.h"
#include "vectors.h"

static pacer_config config_of(const vscenario *s) {
  pacer_config c;
  c.rate_per_min = s->rate;
  c.burst = s->burst;
  c.idle_timeout_ms = s->idle;
  c.max_retries = s->retries;
  c.release_policy = s->policy;
  c.adaptive_floor_per_min = 0;
  c.adaptive_ceiling_per_min = 0;
  return c;
}

static void test_versions(void) {
  CHECK(pacer_abi_version() == PACER_ABI_VERSION, "abi %u", pacer_abi_version());
  CHECK(strcmp(pacer_version(), "0.1.0") == 0, "version %s", pacer_version());
}

static void test_scenarios(void) {
  for (size_t i = 0; i < n_scenarios; i++) {
    const vscenario *s = &scenarios[i];
    pacer p;
    pacer_config c = config_of(s);
    CHECK(pacer_init(&p, &c, s->t0) == PACER_STATUS_OK, "%s init", s->name);
    pacer_info info;
    CHECK(pacer_get_info(&p, &info) == PACER_STATUS_OK, "%s info", s->name);
    CHECK(info.wait_bound_ms == s->bound, "%s bound %" PRIu64, s->name, info.wait_bound_ms);
    CHECK((info.mode != PACER_MODE_DISABLED) == s->enabled, "%s enabled", s->name);
    CHECK((info.mode == PACER_MODE_REFUSING) == s->can_refuse, "%s can_refuse", s->name);
    pacer_ticket tickets[64];
    uint64_t issued = 0;
    for (size_t k = 0; k < s->nsteps; k++) {
      const vstep *st = &s->steps[k];
      if (st->op == 1) {
        pacer_decision d;
        CHECK(pacer_reserve(&p, st->t, &d) == PACER_STATUS_OK, "%s step %zu", s->name, k);
        if (st->kind == 1) {
          CHECK(d.kind == PACER_DECISION_KIND_ADMITTED, "%s step %zu kind %u", s->name, k, d.kind);
          CHECK(d.wait_ms == st->wait_ms, "%s step %zu wait %" PRIu64 " want %" PRIu64, s->name, k, d.wait_ms, st->wait_ms);
          CHECK(d.queued == (st->wait_ms > 0), "%s step %zu queued", s->name, k);
          uint64_t got_ticket = 0;
          if (d.ticket.state == PACER_TICKET_STATE_LIVE) {
            got_ticket = ++issued;
            if (got_ticket < 64) tickets[got_ticket] = d.ticket;
          }
          CHECK(got_ticket == st->expect_ticket, "%s step %zu ticket %" PRIu64, s->name, k, got_ticket);
        } else {
          CHECK(d.kind == PACER_DECISION_KIND_REFUSED, "%s step %zu kind %u", s->name, k, d.kind);
          CHECK(d.required_wait_ms == st->required_wait_ms, "%s step %zu required %" PRIu64, s->name, k, d.required_wait_ms);
          CHECK(d.retry_after_s == st->retry_after_s, "%s step %zu hint %" PRIu64, s->name, k, d.retry_after_s);
          CHECK(d.ticket.state == PACER_TICKET_STATE_NONE, "%s step %zu refusal ticket", s->name, k);
        }
      } else {
        bool refunded = !st->refunded;
        if (st->ticket >= 1 && st->ticket <= issued && st->ticket < 64) {
          CHECK(pacer_release(&p, &tickets[st->ticket], st->t, &refunded) == PACER_STATUS_OK, "%s step %zu", s->name, k);
        } else {
          pacer_ticket none = {0, 0, PACER_TICKET_STATE_NONE, 0};
          CHECK(pacer_release(&p, &none, st->t, &refunded) == PACER_STATUS_OK, "%s step %zu", s->name, k);
        }
        CHECK(refunded == st->refunded, "%s step %zu refunded %d", s->name, k, refunded);
      }
    }
  }
}

static void test_budgets(void) {
  for (size_t i = 0; i < n_budgets; i++) {
    const vbudget *v = &budgets[i];
    pacer_budget b;
    pacer_notices notices;
    CHECK(pacer_resolve(v->rate, v->idle, v->total, v->retries, &b, &notices) == PACER_STATUS_OK, "%s", v->name);
    CHECK(b.rate_per_min == v->e_rate, "%s rate %u", v->name, b.rate_per_min);
    CHECK(b.idle_timeout_ms == v->e_idle, "%s idle %" PRIu64, v->name, b.idle_timeout_ms);
    CHECK(b.total_timeout_ms == v->e_total, "%s total", v->name);
    CHECK(b.max_retries == v->e_retries, "%s retries %u", v->name, b.max_retries);
    CHECK(b.wait_bound_ms == v->e_bound, "%s bound %" PRIu64, v->name, b.wait_bound_ms);
    CHECK(b.hint_cap_s == v->e_cap, "%s cap", v->name);
    CHECK(b.refusal_schedule_ms == v->e_schedule, "%s schedule", v->name);
    CHECK(b.can_refuse == v->e_can_refuse, "%s can_refuse", v->name);
    CHECK(b.enabled == v->e_enabled, "%s enabled", v->name);
    CHECK(notices.count == v->n_notices, "%s notices %zu", v->name, notices.count);
    for (size_t k = 0; k < notices.count && k < v->n_notices; k++) {
      const pacer_notice *n = &notices.items[k];
      CHECK(n->kind == v->notices[k].kind, "%s notice %zu kind %u", v->name, k, n->kind);
      CHECK(memcmp(n->values, v->notices[k].values, sizeof n->values) == 0, "%s notice %zu values", v->name, k);
      size_t want = strlen(v->notices[k].raw);
      CHECK(n->raw_len == want && (want == 0 || memcmp(n->raw, v->notices[k].raw, want) == 0), "%s notice %zu raw", v->name, k);
      size_t needed = 0;
      CHECK(pacer_notice_render(n, NULL, 0, &needed) == PACER_STATUS_BUFFER_TOO_SHORT && needed > 20, "%s render", v->name);
    }
  }
}

static void test_derived(void) {
  for (size_t i = 0; i < n_d_ladder_ceiling; i++)
    CHECK(pacer_ladder_ceiling(d_ladder_ceiling[i].a) == d_ladder_ceiling[i].expect, "ceiling %" PRIu64, d_ladder_ceiling[i].a);
  for (size_t i = 0; i < n_d_wait_bound_ms; i++)
    CHECK(pacer_wait_bound_ms(d_wait_bound_ms[i].a, (uint32_t)d_wait_bound_ms[i].b) == d_wait_bound_ms[i].expect, "bound %zu", i);
  for (size_t i = 0; i < n_d_retry_after_s; i++)
    CHECK(pacer_retry_after_s(d_retry_after_s[i].a, d_retry_after_s[i].b) == d_retry_after_s[i].expect, "hint %zu", i);
  for (size_t i = 0; i < n_d_can_refuse; i++)
    CHECK(pacer_can_refuse((uint32_t)d_can_refuse[i].a, (uint32_t)d_can_refuse[i].b, d_can_refuse[i].c) == (bool)d_can_refuse[i].expect, "can_refuse %zu", i);
  CHECK(pacer_hint_cap_s(4833) == 4, "cap");
  CHECK(pacer_hint_cap_s(0) == 1, "cap 0");
  CHECK(pacer_wait_bound_ms(UINT64_MAX, UINT32_MAX) == 0, "bound at extremes");
  CHECK(pacer_ladder_ceiling(UINT64_MAX) == 53, "ceiling at u64 max: 2000*(2^53-1) < 2^64 <= 2000*(2^54-1)");
}

static const char PREFIX[] = "clodex is limiting how fast it opens new OpenAI connections to reduce the chance of an upstream rate limit";

static void test_frame(void) {
  const char *expected =
      "data: {\"type\":\"error\",\"sequence_number\":0,\"error\":{\"type\":\"rate_limit_error\",\"code\":\"429\","
      "\"message\":\"clodex is limiting how fast it opens new OpenAI connections to reduce the chance of an upstream rate limit; retry after 4s\","
      "\"param\":null,\"retry_after_seconds\":4}}\n\n";
  uint8_t buf[512];
  size_t written = 0;
  CHECK(pacer_refusal_body(PREFIX, 4, buf, sizeof buf, &written) == PACER_STATUS_OK, "frame");
  CHECK(written == strlen(expected) && memcmp(buf, expected, written) == 0, "frame bytes");
  CHECK(PACER_REFUSAL_STATUS == 200, "status");
  CHECK(strcmp(pacer_refusal_content_type(), "text/event-stream; charset=utf-8") == 0, "content type");
  /* Too short: needed length reported, buffer untouched. */
  uint8_t small[16];
  memset(small, 0xAB, sizeof small);
  size_t needed = 0;
  CHECK(pacer_refusal_body(PREFIX, 4, small, sizeof small, &needed) == PACER_STATUS_BUFFER_TOO_SHORT, "short");
  CHECK(needed == strlen(expected), "needed %zu", needed);
  for (size_t i = 0; i < sizeof small; i++) CHECK(small[i] == 0xAB, "buffer touched at %zu", i);
  CHECK(pacer_refusal_body(PREFIX, 4, NULL, 0, &needed) == PACER_STATUS_BUFFER_TOO_SHORT && needed == strlen(expected), "measure");
  CHECK(pacer_refusal_body(PREFIX, 4, NULL, 10, &needed) == PACER_STATUS_NULL_PARAMETER, "null buf with length");
  CHECK(pacer_refusal_body(NULL, 4, buf, sizeof buf, &written) == PACER_STATUS_NULL_PARAMETER, "null prefix");
  CHECK(pacer_refusal_body(PREFIX, 4, buf, sizeof buf, NULL) == PACER_STATUS_NULL_PARAMETER, "null out");
  CHECK(pacer_refusal_body("\xff\xfe", 4, buf, sizeof buf, &written) == PACER_STATUS_INVALID_UTF8, "bad utf8");
}

static void test_notices(void) {
  pacer_budget b;
  pacer_notices notices;
  CHECK(pacer_resolve("1", NULL, NULL, NULL, &b, &notices) == PACER_STATUS_OK, "resolve");
  CHECK(notices.count == 1 && notices.items[0].kind == PACER_NOTICE_KIND_NO_REFUSE, "norefuse");
  char text[400];
  size_t written = 0;
  CHECK(pacer_notice_render(&notices.items[0], (uint8_t *)text, sizeof text - 1, &written) == PACER_STATUS_OK, "render");
  text[written] = 0;
  CHECK(strstr(text, "a 5-retry schedule spans only 20000ms") && strstr(text, "the 60000ms wait"), "text: %s", text);
  /* The hostile setting of the design record cannot hide the disabled notice. */
  pacer_notice_registry registry;
  CHECK(pacer_notice_registry_init(&registry) == PACER_STATUS_OK, "registry");
  CHECK(pacer_resolve("disabled:3:14001", "14001", NULL, NULL, &b, &notices) == PACER_STATUS_OK, "hostile");
  CHECK(notices.count == 2, "count %zu", notices.count);
  bool first = false;
  for (size_t i = 0; i < notices.count; i++) {
    CHECK(pacer_notice_registry_first_time(&registry, &notices.items[i], &first) == PACER_STATUS_OK && first, "first %zu", i);
  }
  CHECK(pacer_notice_registry_first_time(&registry, &notices.items[1], &first) == PACER_STATUS_OK && !first, "repeat");
  pacer_notice bad = notices.items[0];
  bad.kind = 13;
  CHECK(pacer_notice_render(&bad, (uint8_t *)text, sizeof text, &written) == PACER_STATUS_INVALID_ENUM, "kind 13");
  bad.kind = 0;
  CHECK(pacer_notice_registry_first_time(&registry, &bad, &first) == PACER_STATUS_INVALID_ENUM, "kind 0");
  bad = notices.items[0];
  bad.raw = NULL;
  CHECK(pacer_notice_render(&bad, (uint8_t *)text, sizeof text, &written) == PACER_STATUS_NULL_PARAMETER, "raw NULL with length");
  CHECK(pacer_resolve("\xc3\x28", NULL, NULL, NULL, &b, NULL) == PACER_STATUS_OK && b.rate_per_min == 60,
        "a setting that is not UTF-8 is malformed, not an error (test_resolve_any_bytes)");
  CHECK(pacer_resolve(NULL, NULL, NULL, NULL, &b, NULL) == PACER_STATUS_OK && b.wait_bound_ms == 4833, "notices optional");
}

static int key_is(const pacer_notice *n, const char *want) {
  char key[64];
  size_t written = 0;
  if (pacer_notice_key(n, (uint8_t *)key, sizeof key, &written) != PACER_STATUS_OK) return 0;
  return written == strlen(want) && memcmp(key, want, written) == 0;
}

static void test_notice_keys_and_names(void) {
  pacer_budget b;
  pacer_notices notices;
  CHECK(pacer_resolve("1", NULL, NULL, NULL, &b, &notices) == PACER_STATUS_OK && notices.count == 1, "resolve");
  CHECK(key_is(&notices.items[0], "norefuse:1:5:4833"), "norefuse key");
  CHECK(pacer_resolve("disabled:3:14001", "14001", NULL, NULL, &b, &notices) == PACER_STATUS_OK && notices.count == 2, "hostile");
  CHECK(key_is(&notices.items[0], "rate:disabled:3:14001"), "hostile text stays in its namespace");
  CHECK(key_is(&notices.items[1], "disabled:3:14001:60"), "disabled key");
  CHECK(pacer_resolve(" 9x", NULL, NULL, NULL, &b, &notices) == PACER_STATUS_OK && notices.count == 1, "untrimmed");
  CHECK(key_is(&notices.items[0], "rate: 9x"), "raw text as given");
  size_t needed = 0;
  uint8_t small[4] = {1, 2, 3, 4};
  CHECK(pacer_notice_key(&notices.items[0], small, sizeof small, &needed) == PACER_STATUS_BUFFER_TOO_SHORT && needed == 8 &&
            small[0] == 1 && small[3] == 4,
        "short buffer: needed %zu, untouched", needed);
  CHECK(pacer_notice_key(&notices.items[0], NULL, 0, &needed) == PACER_STATUS_BUFFER_TOO_SHORT && needed == 8, "measure");
  CHECK(pacer_notice_key(NULL, small, sizeof small, &needed) == PACER_STATUS_NULL_PARAMETER, "null notice");
  CHECK(pacer_notice_key(&notices.items[0], small, sizeof small, NULL) == PACER_STATUS_NULL_PARAMETER, "null out");
  pacer_notice bad = notices.items[0];
  bad.kind = 13;
  CHECK(pacer_notice_key(&bad, small, sizeof small, &needed) == PACER_STATUS_INVALID_ENUM, "kind 13");

  CHECK(strcmp(pacer_notice_kind_name(PACER_NOTICE_KIND_RATE_MALFORMED), "rate_malformed") == 0, "name 1");
  CHECK(strcmp(pacer_notice_kind_name(PACER_NOTICE_KIND_TOTAL_RAISED), "total_raised") == 0, "name 10");
  CHECK(strcmp(pacer_notice_kind_name(PACER_NOTICE_KIND_NO_REFUSE), "norefuse") == 0, "name 12");
  CHECK(pacer_notice_kind_name(0) == NULL && pacer_notice_kind_name(13) == NULL, "unknown kinds");

  pacer_config c = {1, 10, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  pacer_notice n;
  bool present = false;
  CHECK(pacer_mode_notice(&c, &n, &present) == PACER_STATUS_OK && present && n.kind == PACER_NOTICE_KIND_NO_REFUSE &&
            n.values[0] == 1 && n.values[1] == 5 && n.values[2] == 4833 && n.raw == NULL && n.raw_len == 0,
        "rate 1: norefuse");
  c.rate_per_min = 60;
  CHECK(pacer_mode_notice(&c, &n, &present) == PACER_STATUS_OK && !present, "defaults: none");
  c.idle_timeout_ms = 14001;
  c.max_retries = 3;
  CHECK(pacer_mode_notice(&c, &n, &present) == PACER_STATUS_OK && present && n.kind == PACER_NOTICE_KIND_PACING_DISABLED &&
            key_is(&n, "disabled:3:14001:60"),
        "no room to wait: disabled");
  c.max_retries = 4;
  present = true;
  CHECK(pacer_mode_notice(&c, &n, &present) == PACER_STATUS_RETRIES_EXCEED_LADDER && present, "bad config changes nothing");
  c.max_retries = 3;
  c.rate_per_min = 601;
  CHECK(pacer_mode_notice(&c, &n, &present) == PACER_STATUS_RATE_TOO_HIGH, "rate 601");
  c.rate_per_min = 60;
  c.release_policy = 7;
  CHECK(pacer_mode_notice(&c, &n, &present) == PACER_STATUS_INVALID_ENUM, "policy 7");
  c.release_policy = PACER_RELEASE_POLICY_REFUND;
  CHECK(pacer_mode_notice(NULL, &n, &present) == PACER_STATUS_NULL_PARAMETER, "null config");
  CHECK(pacer_mode_notice(&c, NULL, &present) == PACER_STATUS_NULL_PARAMETER, "null notice out");
  CHECK(pacer_mode_notice(&c, &n, NULL) == PACER_STATUS_NULL_PARAMETER, "null present out");
}

/* SPEC §11 at the defaults (rate 60, burst 10, bound 4833, hint cap 4, 5
 * retries): 14 admissions at t = 0 take the burst and waits up to 4000; the
 * 15th would wait 5000 > 4833, within the horizon 4833 + 5·4·1000. */
static void test_bookings(void) {
  pacer p;
  pacer_config c = {60, 10, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  CHECK(pacer_init(&p, &c, 0) == PACER_STATUS_OK, "init");
  pacer_decision d;
  pacer_booking b;
  memset(&b, 0xAB, sizeof b);
  for (int i = 0; i < 14; i++) {
    CHECK(pacer_reserve_or_book(&p, 0, 5, &d, &b) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_ADMITTED &&
              d.wait_ms == (uint64_t)(i < 10 ? 0 : (i - 9) * 1000),
          "admission %d", i);
  }
  CHECK(b.slot_ms == 0xABABABABABABABABull, "an admission leaves the booking untouched");
  CHECK(pacer_reserve_or_book(&p, 0, 5, &d, &b) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_BOOKED &&
            d.required_wait_ms == 5000 && d.retry_after_s == 1 && d.ticket.state == PACER_TICKET_STATE_NONE,
        "booked: kind %u required %" PRIu64 " hint %" PRIu64, d.kind, d.required_wait_ms, d.retry_after_s);
  CHECK(b.slot_ms == 5000 && b.ticket.state == PACER_TICKET_STATE_LIVE && b.ticket.seq == 15 &&
            b.ticket.debit_units == 60000,
        "booking: slot %" PRIu64 " seq %u", b.slot_ms, b.ticket.seq);
  pacer_booking untouched = b;
  /* No retries left: the horizon is the bound; 6000 > 4833 is a plain refusal. */
  CHECK(pacer_reserve_or_book(&p, 0, 0, &d, &untouched) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_REFUSED &&
            d.required_wait_ms == 6000 && d.retry_after_s == 4 && untouched.slot_ms == 5000,
        "refused beyond the horizon");
  /* Too early: 5000 − 0 > 4833, again booked with hint ceil(167/1000) = 1. */
  CHECK(pacer_redeem(&p, &b, 0, &d) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_BOOKED && d.retry_after_s == 1 &&
            d.required_wait_ms == 5000 && b.ticket.state == PACER_TICKET_STATE_LIVE,
        "not yet");
  /* At 167 the slot is exactly the bound away: admitted after 4833. */
  CHECK(pacer_redeem(&p, &b, 167, &d) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_ADMITTED &&
            d.path == PACER_ADMIT_PATH_BOOKED && d.wait_ms == 4833 && d.queued && d.ticket.state == PACER_TICKET_STATE_LIVE &&
            d.ticket.seq == 15 && b.ticket.state == PACER_TICKET_STATE_SPENT,
        "redeemed: kind %u path %u wait %" PRIu64, d.kind, d.path, d.wait_ms);
  pacer_decision before = d;
  CHECK(pacer_redeem(&p, &b, 167, &d) == PACER_STATUS_INVALID_TICKET && d.kind == before.kind && d.wait_ms == before.wait_ms &&
            d.ticket.seq == before.ticket.seq && d.ticket.state == before.ticket.state,
        "a spent booking redeems nothing");
  bool refunded = false;
  CHECK(pacer_release(&p, &d.ticket, 200, &refunded) == PACER_STATUS_OK && refunded, "the redeemed ticket releases");
  pacer_counters k;
  CHECK(pacer_get_counters(&p, &k) == PACER_STATUS_OK && k.admitted == 15 && k.refused == 3 && k.released == 1,
        "counters: admitted %" PRIu64 " refused %" PRIu64, k.admitted, k.refused);
  CHECK(pacer_reserve_or_book(NULL, 0, 5, &d, &b) == PACER_STATUS_NULL_PARAMETER, "null pacer");
  CHECK(pacer_reserve_or_book(&p, 0, 5, NULL, &b) == PACER_STATUS_NULL_PARAMETER, "null decision");
  CHECK(pacer_reserve_or_book(&p, 0, 5, &d, NULL) == PACER_STATUS_NULL_PARAMETER, "null booking");
  CHECK(pacer_redeem(&p, NULL, 0, &d) == PACER_STATUS_NULL_PARAMETER, "null booking to redeem");
  CHECK(pacer_redeem(&p, &b, 0, NULL) == PACER_STATUS_NULL_PARAMETER, "null decision to redeem");
  CHECK(strcmp(pacer_status_str(PACER_STATUS_INVALID_TICKET), "the booking holds no live ticket") == 0, "status text");
}

static void test_bad_input(void) {
  pacer p;
  pacer_config c = {60, 10, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  pacer_decision d;
  bool refunded = false;
  /* Storage never initialised: zeroed. */
  memset(&p, 0, sizeof p);
  CHECK(pacer_reserve(&p, 0, &d) == PACER_STATUS_NOT_INITIALIZED, "uninit");
  CHECK(pacer_init(NULL, &c, 0) == PACER_STATUS_NULL_PARAMETER, "null storage");
  CHECK(pacer_init(&p, NULL, 0) == PACER_STATUS_NULL_PARAMETER, "null config");
  /* Invalid configs leave the storage untouched. */
  pacer_config bad = c;
  bad.release_policy = 2;
  CHECK(pacer_init(&p, &bad, 0) == PACER_STATUS_INVALID_ENUM, "policy 2");
  bad = c;
  bad.rate_per_min = 601;
  CHECK(pacer_init(&p, &bad, 0) == PACER_STATUS_RATE_TOO_HIGH, "rate 601");
  bad = c;
  bad.burst = PACER_MAX_BURST + 1;
  CHECK(pacer_init(&p, &bad, 0) == PACER_STATUS_BURST_TOO_LARGE, "burst");
  bad = c;
  bad.max_retries = 6;
  CHECK(pacer_init(&p, &bad, 0) == PACER_STATUS_RETRIES_EXCEED_LADDER, "retries 6 at 120000");
  CHECK(pacer_reserve(&p, 0, &d) == PACER_STATUS_NOT_INITIALIZED, "still uninit after bad configs");

  CHECK(pacer_init(&p, &c, UINT64_MAX) == PACER_STATUS_OK, "init at u64 max");
  CHECK(pacer_reserve(NULL, 0, &d) == PACER_STATUS_NULL_PARAMETER, "null pacer");
  CHECK(pacer_reserve(&p, 0, NULL) == PACER_STATUS_NULL_PARAMETER, "null decision");
  pacer_info before, after;
  pacer_get_info(&p, &before);
  CHECK(before.high_water_ms == UINT64_MAX && before.tokens_units == 600000, "info");
  memset(&d, 0xAB, sizeof d);
  CHECK(pacer_reserve(&p, UINT64_MAX, &d) == PACER_STATUS_OK && d.wait_ms == 0, "u64 max reserve");
  CHECK(pacer_reserve(&p, 0, &d) == PACER_STATUS_OK && d.clock_regressed && d.wait_ms == 0, "regressed");
  pacer_ticket t = d.ticket;
  CHECK(pacer_release(&p, NULL, 0, &refunded) == PACER_STATUS_NULL_PARAMETER, "null ticket");
  CHECK(pacer_release(&p, &t, 0, NULL) == PACER_STATUS_NULL_PARAMETER, "null out");
  CHECK(t.state == PACER_TICKET_STATE_LIVE, "ticket untouched by failed release");
  pacer_ticket weird = t;
  weird.state = 7;
  pacer_get_info(&p, &before);
  CHECK(pacer_release(&p, &weird, 0, &refunded) == PACER_STATUS_INVALID_ENUM, "ticket state 7");
  pacer_get_info(&p, &after);
  CHECK(after.tokens_units == before.tokens_units, "unchanged");
  CHECK(pacer_release(&p, &t, UINT64_MAX, &refunded) == PACER_STATUS_OK && refunded, "release");
  CHECK(t.state == PACER_TICKET_STATE_SPENT, "spent");
  refunded = true;
  CHECK(pacer_release(&p, &t, UINT64_MAX, &refunded) == PACER_STATUS_OK && !refunded, "at most once");
  pacer_counters counters;
  CHECK(pacer_get_counters(&p, &counters) == PACER_STATUS_OK, "counters");
  CHECK(counters.admitted == 2 && counters.clock_regressions == 1 && counters.released == 1 && counters.refunded == 1,
        "counters %" PRIu64, counters.admitted);
  CHECK(pacer_get_counters(&p, NULL) == PACER_STATUS_NULL_PARAMETER, "null counters");
  CHECK(pacer_get_metrics(&p, NULL) == PACER_STATUS_NULL_PARAMETER, "null metrics");
  CHECK(pacer_get_metrics(NULL, &(pacer_metrics){0}) == PACER_STATUS_NULL_PARAMETER, "null pacer");
  int64_t units = 7;
  CHECK(pacer_level_at(&p, 0, NULL) == PACER_STATUS_NULL_PARAMETER, "null level");
  CHECK(pacer_level_at(NULL, 0, &units) == PACER_STATUS_NULL_PARAMETER && units == 7, "null pacer");
  CHECK(pacer_get_info(NULL, &after) == PACER_STATUS_NULL_PARAMETER, "null info");
  CHECK(pacer_notice_registry_init(NULL) == PACER_STATUS_NULL_PARAMETER, "null registry");
  CHECK(pacer_resolve(NULL, NULL, NULL, NULL, NULL, NULL) == PACER_STATUS_NULL_PARAMETER, "null budget");

  for (uint32_t s = 0; s <= 28; s++) CHECK(strcmp(pacer_status_str(s), "unknown status") != 0, "status %u named", s);
  CHECK(strcmp(pacer_status_str(29), "unknown status") == 0, "status 29 unknown");
  CHECK(strcmp(pacer_status_str(UINT32_MAX), "unknown status") == 0, "status max unknown");
}

/* Every count of pacer_metrics, hand-derived. Rate 60 (a token a second,
 * 60 units a ms), burst 2, idle 120000 ms, 5 retries (bound 4833 ms): two admissions at 0 at once, then waits of 1000 and 2000
 * ms (buckets up to 1000 and up to 2500 ms); a booking; its redemption at
 * its slot; one release refunded; an opening and a throttle. */
static void test_metrics(void) {
  pacer p;
  pacer_config c = {60, 2, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  CHECK(pacer_init(&p, &c, 0) == PACER_STATUS_OK, "init");
  pacer_decision d;
  pacer_booking bk;
  uint64_t waits[4] = {0, 0, 1000, 2000};
  pacer_ticket last;
  for (int i = 0; i < 4; i++) {
    CHECK(pacer_reserve(&p, 0, &d) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_ADMITTED &&
              d.wait_ms == waits[i],
          "reserve %d waits %" PRIu64, i, d.wait_ms);
    last = d.ticket;
  }
  int64_t units = 0;
  /* Two tokens of debt at 0, 2 · 60000 units; 500 ms later 30000 back. */
  CHECK(pacer_level_at(&p, 0, &units) == PACER_STATUS_OK && units == -120000, "level %" PRId64, units);
  CHECK(pacer_level_at(&p, 500, &units) == PACER_STATUS_OK && units == -90000, "level %" PRId64, units);
  /* Refund the last one (a debt token back: the next wait is 2000 again). */
  bool refunded = false;
  CHECK(pacer_release(&p, &last, 0, &refunded) == PACER_STATUS_OK && refunded, "release");
  /* Keep reserving at 0 until one is booked: the waits grow by 1000 ms a
   * token up to the bound, past it a booking. */
  pacer_metrics m;
  int plain = 0, booked = 0;
  while (!booked) {
    CHECK(pacer_reserve_or_book(&p, 0, 5, &d, &bk) == PACER_STATUS_OK, "reserve_or_book");
    if (d.kind == PACER_DECISION_KIND_BOOKED) booked = 1;
    else plain++;
    CHECK(plain < 100, "never booked");
  }
  /* The bound is 4833 ms: 2000, 3000 and 4000 fit, 5000 books. */
  CHECK(plain == 3, "plain %d", plain);
  pacer_decision r;
  CHECK(pacer_redeem(&p, &bk, bk.slot_ms, &r) == PACER_STATUS_OK && r.kind == PACER_DECISION_KIND_ADMITTED,
        "redeemed at its slot");
  uint32_t rate = 0;
  CHECK(pacer_observe(&p, PACER_OUTCOME_OPENED, 10, &rate) == PACER_STATUS_OK && rate == 60, "opened");
  CHECK(pacer_observe(&p, PACER_OUTCOME_THROTTLED, 10, &rate) == PACER_STATUS_OK && rate == 60, "throttled");
  CHECK(pacer_get_metrics(&p, &m) == PACER_STATUS_OK, "metrics");
  /* Admitted: 4 + the plain ones + the redemption; all but the first two
   * waited (the redemption at its slot waits 0). */
  CHECK(m.admitted == (uint64_t)(4 + plain + 1), "admitted %" PRIu64 " plain %d", m.admitted, plain);
  CHECK(m.admitted_after_wait == (uint64_t)(2 + plain), "waited %" PRIu64, m.admitted_after_wait);
  CHECK(m.refused == 1 && m.booked == 1 && m.redeemed == 1, "refused %" PRIu64 " booked %" PRIu64, m.refused,
        m.booked);
  CHECK(m.released == 1 && m.refunded == 1 && m.opened == 1 && m.throttled == 1 && m.shaped == 0 &&
            m.clock_regressions == 0,
        "released, outcomes");
  /* The plain ones after the refund wait 2000, 3000, … (one token more
   * each): the k-th waits (k + 1) · 1000 ms. */
  uint64_t total = 3000, expect[PACER_WAIT_BUCKETS] = {0, 0, 0, 0, 1, 1, 0, 0};
  for (int k = 1; k <= plain; k++) {
    uint64_t w = (uint64_t)(k + 1) * 1000;
    total += w;
    for (int i = 0; i < PACER_WAIT_BUCKETS; i++)
      if (w <= pacer_wait_bounds_ms[i] && (i == 0 || w > pacer_wait_bounds_ms[i - 1])) expect[i]++;
  }
  CHECK(m.wait_ms_total == total, "wait total %" PRIu64 " want %" PRIu64, m.wait_ms_total, total);
  for (int i = 0; i < PACER_WAIT_BUCKETS; i++)
    CHECK(m.wait_buckets[i] == expect[i], "bucket %d: %" PRIu64 " want %" PRIu64, i, m.wait_buckets[i], expect[i]);
  CHECK(pacer_wait_bounds_ms[0] == 10 && pacer_wait_bounds_ms[7] == 10000, "bounds");
}

/* A pacer in storage 8 bytes past a 16-aligned address: every call that
 * takes it answers PACER_STATUS_MISALIGNED (the 128-bit compare-and-swap
 * would fault), and nothing is written. */
static void test_misaligned(void) {
  _Alignas(16) unsigned char raw[PACER_STORAGE_SIZE + 16];
  memset(raw, 0x5A, sizeof raw);
  pacer *off = (pacer *)(void *)(raw + 8);
  pacer_config c = {60, 10, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  pacer_decision d;
  pacer_booking b;
  pacer_info info;
  pacer_counters k;
  bool refunded;
  CHECK(pacer_init(off, &c, 0) == PACER_STATUS_MISALIGNED, "init on misaligned storage");
  int untouched = 1;
  for (size_t i = 0; i < sizeof raw; i++) untouched &= raw[i] == 0x5A;
  CHECK(untouched, "misaligned init wrote nothing");
  CHECK(pacer_reserve(off, 0, &d) == PACER_STATUS_MISALIGNED, "reserve");
  CHECK(pacer_reserve_or_book(off, 0, 5, &d, &b) == PACER_STATUS_MISALIGNED, "reserve_or_book");
  CHECK(pacer_get_info(off, &info) == PACER_STATUS_MISALIGNED, "info");
  CHECK(pacer_get_counters(off, &k) == PACER_STATUS_MISALIGNED, "counters");
  pacer_metrics m;
  int64_t units;
  CHECK(pacer_get_metrics(off, &m) == PACER_STATUS_MISALIGNED, "metrics");
  CHECK(pacer_level_at(off, 0, &units) == PACER_STATUS_MISALIGNED, "level");
  /* A ticket 2 bytes off its alignment. */
  pacer p;
  CHECK(pacer_init(&p, &c, 0) == PACER_STATUS_OK, "init");
  CHECK(pacer_reserve(&p, 0, &d) == PACER_STATUS_OK, "reserve");
  _Alignas(8) unsigned char tbuf[sizeof(pacer_ticket) + 8];
  memcpy(tbuf + 2, &d.ticket, sizeof d.ticket);
  CHECK(pacer_release(&p, (pacer_ticket *)(void *)(tbuf + 2), 0, &refunded) == PACER_STATUS_MISALIGNED, "ticket");
  CHECK(pacer_release(&p, &d.ticket, 0, &refunded) == PACER_STATUS_OK && refunded, "the aligned copy still releases");
  _Alignas(8) unsigned char rbuf[PACER_NOTICE_REGISTRY_SIZE + 8];
  CHECK(pacer_notice_registry_init((pacer_notice_registry *)(void *)(rbuf + 4)) == PACER_STATUS_MISALIGNED,
        "registry");
}

/* A ticket or booking works only on the pacer that issued it; a forged
 * one (a live state with any other owner) changes nothing. */
static void test_foreign_tickets(void) {
  pacer a, b;
  pacer_config c = {60, 1, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  CHECK(pacer_init(&a, &c, 0) == PACER_STATUS_OK && pacer_init(&b, &c, 0) == PACER_STATUS_OK, "init");
  pacer_decision da, db;
  CHECK(pacer_reserve(&a, 0, &da) == PACER_STATUS_OK && da.ticket.state == PACER_TICKET_STATE_LIVE, "a admits");
  CHECK(pacer_reserve(&b, 0, &db) == PACER_STATUS_OK && db.ticket.state == PACER_TICKET_STATE_LIVE, "b admits");
  CHECK(da.ticket.owner != 0 && db.ticket.owner != 0 && da.ticket.owner != db.ticket.owner, "distinct owner tags");
  pacer_info before, after;
  pacer_get_info(&b, &before);
  bool refunded = true;
  CHECK(pacer_release(&b, &da.ticket, 10, &refunded) == PACER_STATUS_FOREIGN_TICKET && refunded,
        "a's ticket on b: status, out untouched");
  pacer_get_info(&b, &after);
  CHECK(after.tokens_units == before.tokens_units && after.high_water_ms == before.high_water_ms, "b unchanged");
  CHECK(da.ticket.state == PACER_TICKET_STATE_LIVE, "a's ticket still live");
  pacer_ticket forged = {db.ticket.seq, 60000, PACER_TICKET_STATE_LIVE, db.ticket.owner ^ 1u};
  CHECK(pacer_release(&b, &forged, 10, &refunded) == PACER_STATUS_FOREIGN_TICKET, "forged owner");
  CHECK(pacer_release(&a, &da.ticket, 10, &refunded) == PACER_STATUS_OK && refunded, "a's ticket on a");

  /* A booking from a, presented to b. */
  pacer_booking bk;
  pacer_decision d;
  CHECK(pacer_reserve(&a, 0, &d) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_ADMITTED, "a: burst token");
  CHECK(pacer_reserve_or_book(&a, 0, 5, &d, &bk) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_ADMITTED &&
            d.wait_ms == 1000,
        "a: waits 1000");
  int booked = 0;
  for (int i = 0; i < 10 && !booked; i++) {
    CHECK(pacer_reserve_or_book(&a, 0, 5, &d, &bk) == PACER_STATUS_OK, "a: reserve_or_book");
    booked = d.kind == PACER_DECISION_KIND_BOOKED;
  }
  CHECK(booked && bk.ticket.owner == da.ticket.owner, "a booked a slot");
  pacer_decision kept;
  memset(&kept, 0xCD, sizeof kept);
  CHECK(pacer_redeem(&b, &bk, bk.slot_ms, &kept) == PACER_STATUS_FOREIGN_TICKET, "a's booking on b");
  CHECK(kept.kind == 0xCDCDCDCDu && bk.ticket.state == PACER_TICKET_STATE_LIVE, "nothing written, booking kept");
  pacer_booking forged_booking = bk;
  forged_booking.ticket.owner = 0;
  CHECK(pacer_redeem(&a, &forged_booking, bk.slot_ms, &kept) == PACER_STATUS_FOREIGN_TICKET, "forged booking");
  CHECK(pacer_redeem(&a, &bk, bk.slot_ms, &d) == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_ADMITTED &&
            d.ticket.owner == da.ticket.owner,
        "redeemed on a");
}

/* Adaptive pacing (SPEC §14) at rate 60, burst 10, idle 120000, 5
 * retries, refund, created at 0. The law (core/src/adaptive.rs): searching
 * from the rate with the default ceiling (60), the rate reads 60; a
 * throttle with nothing counted sets L = B - max(1, B/16), B = min(R, L)
 * (60 -> 60 - 3 = 57); as it ends the first search within a minute of
 * the creation (0) it pauses: the origin becomes 0 + 60000 and the rate
 * reads the lowest (here the floor: 5 retries at bound 4833 can refuse
 * from 3/min) until then, L (probing: L itself until the hold and the
 * wait, 60000 + max(240000, 80*60000/57)/12 = 80000 after the origin,
 * are over) from then
 * on; a throttle within HOLD_MS of the origin changes nothing; one at the
 * hold's end (120000) sets L to what the openings counted show got
 * through when that is below the rate in force, never below the lowest.
 *
 * One opening at 1000 is counted at max(1000, 60000) (minute 1), so at
 * 120000 (minute 2) through = 1, E = 1 < R = 57, L = 1, raised to the
 * floor (10 or 40). */
#define PAUSE_END_MS 60000u
#define HOLD_MS 60000u

static pacer_config adaptive_config(uint32_t floor, uint32_t ceiling) {
  pacer_config c = {60, 10, 120000, 5, PACER_RELEASE_POLICY_REFUND, floor, ceiling};
  return c;
}

static uint32_t observed(const pacer *p, uint32_t outcome, uint64_t now) {
  uint32_t rate = 0xDEAD;
  pacer_status s = pacer_observe(p, outcome, now, &rate);
  return s == PACER_STATUS_OK ? rate : 1000 + (uint32_t)s;
}

/* Throttles at 1000 (the search ends, the pause to 60000), at 1000
 * again, an opened connection, a throttle at 119999 (within the hold after
 * the origin 60000: held), one at 120000 (the hold's end, to `second`).
 * Returns the first throttle's rate: the lowest, the floor. */
static uint32_t adaptive_episode(uint32_t floor, uint32_t second) {
  pacer p;
  pacer_config c = adaptive_config(floor, 0);
  CHECK(pacer_init(&p, &c, 0) == PACER_STATUS_OK, "init floor %u", floor);
  uint32_t rate = 0;
  CHECK(pacer_rate_in_force(&p, 0, &rate) == PACER_STATUS_OK && rate == 60, "created at the rate: %u", rate);
  uint32_t first = observed(&p, PACER_OUTCOME_THROTTLED, 1000);
  CHECK(first == floor, "first throttle %u, want the lowest %u (the pause)", first, floor);
  CHECK(observed(&p, PACER_OUTCOME_THROTTLED, 1000) == first, "the same instant again: held");
  CHECK(observed(&p, PACER_OUTCOME_OPENED, 1000) == first, "opened: counted, no change of rate");
  CHECK(pacer_rate_in_force(&p, 1000, &rate) == PACER_STATUS_OK && rate == first, "in force: %u", rate);
  CHECK(pacer_rate_in_force(&p, PAUSE_END_MS - 1, &rate) == PACER_STATUS_OK && rate == first, "paused: %u", rate);
  /* From the origin: L = 57. */
  CHECK(pacer_rate_in_force(&p, PAUSE_END_MS, &rate) == PACER_STATUS_OK && rate == 57, "after the pause: %u", rate);
  CHECK(observed(&p, PACER_OUTCOME_THROTTLED, PAUSE_END_MS + HOLD_MS - 1) == 57, "inside the hold: held");
  uint32_t got = observed(&p, PACER_OUTCOME_THROTTLED, PAUSE_END_MS + HOLD_MS);
  CHECK(got == second, "floor %u: second throttle %u, want %u (from 57)", floor, got, second);
  CHECK(pacer_rate_in_force(&p, PAUSE_END_MS + HOLD_MS, &rate) == PACER_STATUS_OK && rate == second, "in force: %u",
        rate);
  return first;
}

static void test_adaptive(void) {
  /* The one opening explains the second throttle: L = 1, raised to the
   * floor, 10 or 40. */
  CHECK(adaptive_episode(10, 10) == 10, "floor 10");
  CHECK(adaptive_episode(40, 40) == 40, "floor 40");

  /* Adaptation off: observe answers the rate and changes nothing (the
   * words' bytes are compared in ffi/tests/adaptive.rs and, through the
   * file, in tests/c/test_shm.c). */
  pacer p;
  pacer_config off = adaptive_config(0, 0);
  CHECK(pacer_init(&p, &off, 0) == PACER_STATUS_OK, "init off");
  pacer_info before, now;
  CHECK(pacer_get_info(&p, &before) == PACER_STATUS_OK, "info");
  CHECK(observed(&p, PACER_OUTCOME_THROTTLED, 1000) == 60, "off: throttle");
  CHECK(observed(&p, PACER_OUTCOME_OPENED, 1000) == 60, "off: opened");
  CHECK(observed(&p, PACER_OUTCOME_THROTTLED, 1000 + HOLD_MS) == 60, "off: throttle later");
  CHECK(pacer_rate_in_force(&p, 1000 + HOLD_MS, &(uint32_t){0}) == PACER_STATUS_OK, "off: rate");
  CHECK(pacer_get_info(&p, &now) == PACER_STATUS_OK && now.high_water_ms == before.high_water_ms &&
            now.tokens_units == before.tokens_units && now.mode == before.mode,
        "off: the state changed");

  /* Ranges, checked at init; the storage is left as it was. */
  pacer q;
  memset(&q, 0, sizeof q);
  const struct { uint32_t floor, ceiling; const char *what; } bad[] = {
      {61, 0, "floor above the rate"}, {10, 59, "ceiling below the rate"}, {10, 601, "ceiling above 600"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pacer_config c = adaptive_config(bad[i].floor, bad[i].ceiling);
    CHECK(pacer_init(&q, &c, 0) == PACER_STATUS_ADAPTIVE_RANGE, "%s", bad[i].what);
  }
  uint32_t rate = 0;
  CHECK(pacer_rate_in_force(&q, 0, &rate) == PACER_STATUS_NOT_INITIALIZED, "still uninitialised");
  CHECK(observed(&q, PACER_OUTCOME_THROTTLED, 0) == 1000 + PACER_STATUS_NOT_INITIALIZED, "observe uninitialised");
  const uint32_t good[][2] = {{60, 0}, {1, 60}, {1, 600}, {0, 601}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    pacer_config c = adaptive_config(good[i][0], good[i][1]);
    CHECK(pacer_init(&q, &c, 0) == PACER_STATUS_OK, "floor %u ceiling %u", good[i][0], good[i][1]);
  }
  CHECK(PACER_STATUS_ADAPTIVE_RANGE == 28, "status number");
  CHECK(strstr(pacer_status_str(PACER_STATUS_ADAPTIVE_RANGE), "floor") != NULL, "status text");

  /* Bad arguments: nothing changed, nothing written. */
  pacer a;
  pacer_config c = adaptive_config(10, 0);
  CHECK(pacer_init(&a, &c, 0) == PACER_STATUS_OK, "init");
  rate = 7;
  CHECK(pacer_observe(&a, 0, 1000, &rate) == PACER_STATUS_INVALID_ENUM && rate == 7, "outcome 0");
  CHECK(pacer_observe(&a, 3, 1000, &rate) == PACER_STATUS_INVALID_ENUM && rate == 7, "outcome 3");
  CHECK(pacer_observe(NULL, PACER_OUTCOME_THROTTLED, 1000, &rate) == PACER_STATUS_NULL_PARAMETER, "NULL pacer");
  CHECK(pacer_observe(&a, PACER_OUTCOME_THROTTLED, 1000, NULL) == PACER_STATUS_NULL_PARAMETER, "NULL out");
  CHECK(pacer_rate_in_force(NULL, 1000, &rate) == PACER_STATUS_NULL_PARAMETER, "NULL pacer");
  CHECK(pacer_rate_in_force(&a, 1000, NULL) == PACER_STATUS_NULL_PARAMETER, "NULL out");
  CHECK(rate == 7, "a failed call wrote its out-parameter");
  /* Nothing changed: the first throttle still ends the search at 60,
   * answers the lowest (10) in the pause, and L = 60 - 3 = 57 from 60000. */
  CHECK(observed(&a, PACER_OUTCOME_THROTTLED, 1000) == 10, "after the failed calls");
  CHECK(pacer_rate_in_force(&a, PAUSE_END_MS, &rate) == PACER_STATUS_OK && rate == 57, "after the pause: %u", rate);
  _Alignas(16) unsigned char raw[PACER_STORAGE_SIZE + 16];
  memcpy(raw + 8, &a, sizeof a);
  CHECK(pacer_observe((const pacer *)(const void *)(raw + 8), PACER_OUTCOME_THROTTLED, 1000, &rate) ==
            PACER_STATUS_MISALIGNED,
        "misaligned");
}

/* A notice registry that pacer_notice_registry_init never saw. */
static void test_registry_guards(void) {
  pacer_notice_registry r;
  pacer_notice n = {PACER_NOTICE_KIND_RATE_MALFORMED, 0, {60, 0, 0}, "x", 1};
  bool first = false;
  memset(&r, 0, sizeof r);
  CHECK(pacer_notice_registry_first_time(&r, &n, &first) == PACER_STATUS_NOT_INITIALIZED, "zeroed registry");
  memset(&r, 0xFF, sizeof r);
  CHECK(pacer_notice_registry_first_time(&r, &n, &first) == PACER_STATUS_NOT_INITIALIZED, "garbage registry");
  CHECK(pacer_notice_registry_init(&r) == PACER_STATUS_OK, "init");
  /* PACER_NOTICE_REGISTRY_KEYS keys are remembered; past that a new key
   * reports first every time (shown again, never lost). */
  char text[PACER_NOTICE_REGISTRY_KEYS + 1][16];
  for (int i = 0; i <= PACER_NOTICE_REGISTRY_KEYS; i++) {
    snprintf(text[i], sizeof text[i], "k%d", i);
    pacer_notice ni = {PACER_NOTICE_KIND_RATE_MALFORMED, 0, {60, 0, 0}, text[i], strlen(text[i])};
    CHECK(pacer_notice_registry_first_time(&r, &ni, &first) == PACER_STATUS_OK && first, "key %d first", i);
  }
  pacer_notice again = {PACER_NOTICE_KIND_RATE_MALFORMED, 0, {60, 0, 0}, text[0], strlen(text[0])};
  CHECK(pacer_notice_registry_first_time(&r, &again, &first) == PACER_STATUS_OK && !first, "a remembered key");
  pacer_notice past = {PACER_NOTICE_KIND_RATE_MALFORMED, 0, {60, 0, 0}, text[PACER_NOTICE_REGISTRY_KEYS],
                       strlen(text[PACER_NOTICE_REGISTRY_KEYS])};
  CHECK(pacer_notice_registry_first_time(&r, &past, &first) == PACER_STATUS_OK && first, "the key past the limit again");
}

/* Settings text that is not UTF-8 (what getenv can return) is a malformed
 * setting: the default and a notice, never a failure. */
static void test_resolve_any_bytes(void) {
  const char *rate = "\xff" "12";
  const char *idle = "\xc3\x28";
  pacer_budget b;
  pacer_notices ns;
  CHECK(pacer_resolve(rate, idle, NULL, NULL, &b, &ns) == PACER_STATUS_OK, "resolves");
  CHECK(b.rate_per_min == 60 && b.idle_timeout_ms == 120000 && b.max_retries == 5 && b.wait_bound_ms == 4833,
        "defaults: rate %u idle %" PRIu64, b.rate_per_min, b.idle_timeout_ms);
  CHECK(ns.count == 2, "two notices, got %zu", ns.count);
  CHECK(ns.items[0].kind == PACER_NOTICE_KIND_RATE_MALFORMED && ns.items[0].raw == rate && ns.items[0].raw_len == 3 &&
            ns.items[0].values[0] == 60,
        "rate notice points to the caller's bytes");
  CHECK(ns.items[1].kind == PACER_NOTICE_KIND_IDLE_MALFORMED && ns.items[1].raw == idle && ns.items[1].raw_len == 2,
        "idle notice");
  char buf[256];
  size_t n = 0;
  CHECK(pacer_notice_render(&ns.items[0], (uint8_t *)buf, sizeof buf, &n) == PACER_STATUS_OK, "renders");
  const char *want = "ignoring new-connection rate \"\xef\xbf\xbd" "12\": not a whole number of connections per "
                     "minute; using 60/minute";
  CHECK(n == strlen(want) && memcmp(buf, want, n) == 0, "text: %.*s", (int)n, buf);
  CHECK(pacer_notice_key(&ns.items[0], (uint8_t *)buf, sizeof buf, &n) == PACER_STATUS_OK && n == 10 &&
            memcmp(buf, "rate:\xef\xbf\xbd" "12", 10) == 0,
        "key: %.*s", (int)n, buf);
}

int main(void) {
  test_versions();
  test_scenarios();
  test_budgets();
  test_derived();
  test_frame();
  test_notices();
  test_notice_keys_and_names();
  test_bookings();
  test_bad_input();
  test_misaligned();
  test_metrics();
  test_foreign_tickets();
  test_adaptive();
  test_registry_guards();
  test_resolve_any_bytes();
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}
