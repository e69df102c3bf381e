/* Many threads hammer one pacer on a shared clock; admissions never exceed
 * SPEC §6.1's bound: burst + max_debt + rate*W/60000 + 1 (no releases).
 * Then two threads race to release (or redeem) the same ticket (booking)
 * struct, many times over: exactly one of them may use it each time. Then
 * threads report throttles to one adaptive pacer at once: one decrease. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#include "pacer.h"

#define THREADS 8
#define CALLS 200000

static pacer shared_pacer;
static _Atomic uint64_t clock_ticks;
static _Atomic uint64_t admitted_debits;
static _Atomic uint64_t refusals;
static _Atomic uint64_t errors;

static void *worker(void *arg) {
  (void)arg;
  for (int i = 0; i < CALLS; i++) {
    /* The clock advances 1 ms every 64 calls across all threads. */
    uint64_t now = atomic_fetch_add(&clock_ticks, 1) / 64;
    pacer_decision d;
    if (pacer_reserve(&shared_pacer, now, &d) != PACER_STATUS_OK) {
      atomic_fetch_add(&errors, 1);
      continue;
    }
    if (d.kind == PACER_DECISION_KIND_ADMITTED && d.ticket.state == PACER_TICKET_STATE_LIVE)
      atomic_fetch_add(&admitted_debits, 1);
    else if (d.kind == PACER_DECISION_KIND_REFUSED)
      atomic_fetch_add(&refusals, 1);
  }
  return NULL;
}

#define RACES 20000

static pacer race_pacer;
static pacer_ticket race_ticket;
static pacer_booking race_booking;
static _Atomic int race_round = -1;
static _Atomic int race_done;
static _Atomic uint64_t race_used[2];
static _Atomic uint64_t race_errors;
static int race_redeem;

static void *racer(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int round = 0; round < RACES; round++) {
    while (atomic_load(&race_round) != round) sched_yield();
    if (race_redeem) {
      pacer_decision d;
      pacer_status st = pacer_redeem(&race_pacer, &race_booking, 1000000, &d);
      if (st == PACER_STATUS_OK && d.kind == PACER_DECISION_KIND_ADMITTED)
        atomic_fetch_add(&race_used[me], 1);
      else if (st != PACER_STATUS_INVALID_TICKET)
        atomic_fetch_add(&race_errors, 1);
    } else {
      bool refunded = false;
      if (pacer_release(&race_pacer, &race_ticket, 0, &refunded) != PACER_STATUS_OK)
        atomic_fetch_add(&race_errors, 1);
      else if (refunded)
        atomic_fetch_add(&race_used[me], 1);
    }
    atomic_fetch_add(&race_done, 1);
  }
  return NULL;
}

/* Returns how many rounds let both threads use the one struct. */
static uint64_t race(int redeem) {
  race_redeem = redeem;
  pacer_config c = {60, 1, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  atomic_store(&race_used[0], 0);
  atomic_store(&race_used[1], 0);
  atomic_store(&race_round, -1);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, racer, (void *)(intptr_t)i);
  for (int round = 0; round < RACES; round++) {
    pacer_decision d;
    pacer_init(&race_pacer, &c, 0);
    pacer_reserve(&race_pacer, 0, &d); /* the one burst token */
    if (redeem) {
      /* Waits 1000 … 4000 are admitted; 5000 > the 4833 bound books. */
      for (int i = 0; i < 5; i++) pacer_reserve_or_book(&race_pacer, 0, 5, &d, &race_booking);
      if (d.kind != PACER_DECISION_KIND_BOOKED || race_booking.slot_ms != 5000) atomic_fetch_add(&race_errors, 1);
    } else {
      race_ticket = d.ticket;
    }
    atomic_store(&race_done, 0);
    atomic_store(&race_round, round);
    while (atomic_load(&race_done) != 2) sched_yield();
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  uint64_t used = atomic_load(&race_used[0]) + atomic_load(&race_used[1]);
  return used - RACES; /* each round must use it exactly once */
}

/* Adaptive pacing (SPEC §14): rate 60, floor 10, created at 0. Threads
 * report throttles (and some opened connections) at clock readings in
 * 1000 .. 1000 + 58998, all before 60000: whichever throttle comes first
 * ends the search (nothing counted: L = 60 - max(1, 60/16) = 57, the rate
 * one throttle on a fresh pacer sets, `one_decrease`) and pauses, the
 * origin max(now, 0 + 60000) = 60000; every later throttle is within the
 * hold after it and changes nothing; every answer, read at the caller's
 * clock before the origin, is the lowest rate (the floor, 10). */
#define OBSERVE_CALLS 20000
static pacer adaptive_pacer;
static _Atomic uint64_t observe_ticks;
static _Atomic uint64_t wrong_rates;
static uint32_t one_decrease;

static void *observer(void *arg) {
  (void)arg;
  for (int i = 0; i < OBSERVE_CALLS; i++) {
    uint64_t tick = atomic_fetch_add(&observe_ticks, 1);
    uint64_t now = 1000 + tick % 58999;
    uint32_t outcome = tick % 5 == 4 ? PACER_OUTCOME_OPENED : PACER_OUTCOME_THROTTLED;
    uint32_t rate = 0;
    pacer_status st = pacer_observe(&adaptive_pacer, outcome, now, &rate);
    /* Before the first throttle an opened connection reads the search,
     * 60; after it, in the pause, every answer is the lowest, 10. */
    bool ok = outcome == PACER_OUTCOME_THROTTLED ? rate == 10 : rate == 10 || rate == 60;
    if (st != PACER_STATUS_OK || !ok) atomic_fetch_add(&wrong_rates, 1);
  }
  return NULL;
}

static int observe_race(void) {
  pacer_config c = {60, 10, 120000, 5, PACER_RELEASE_POLICY_REFUND, 10, 0};
  pacer probe;
  if (pacer_init(&probe, &c, 0) != PACER_STATUS_OK) return 1;
  uint32_t answer = 0;
  if (pacer_observe(&probe, PACER_OUTCOME_THROTTLED, 1000, &answer) != PACER_STATUS_OK || answer != 10) return 1;
  if (pacer_rate_in_force(&probe, 60000, &one_decrease) != PACER_STATUS_OK || one_decrease != 57) return 1;
  if (pacer_init(&adaptive_pacer, &c, 0) != PACER_STATUS_OK) return 1;
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, observer, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  uint32_t rate = 0;
  /* Before the origin (60000) the lowest; from it the one decrease. */
  int failed = pacer_rate_in_force(&adaptive_pacer, 0, &rate) != PACER_STATUS_OK || rate != 10;
  failed |= pacer_rate_in_force(&adaptive_pacer, 60000, &rate) != PACER_STATUS_OK || rate != one_decrease;
  printf("observe: %d x %d concurrent observations: %" PRIu64 " wrong answers, rate in force %u (one decrease: %u)\n",
         THREADS, OBSERVE_CALLS, atomic_load(&wrong_rates), rate, one_decrease);
  return failed || atomic_load(&wrong_rates) != 0;
}

int main(void) {
  /* rate 600, burst 10, idle 3600000, 5 retries: bound 15000 ms,
   * max_debt = 15000*600/60000 = 150 tokens. */
  pacer_config c = {600, 10, 3600000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  if (pacer_init(&shared_pacer, &c, 0) != PACER_STATUS_OK) return 2;
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  uint64_t window_ms = (uint64_t)THREADS * CALLS / 64;
  uint64_t bound = 10 + 150 + 600 * window_ms / 60000 + 1;
  uint64_t admitted = atomic_load(&admitted_debits), refused = atomic_load(&refusals);
  pacer_counters counters;
  pacer_get_counters(&shared_pacer, &counters);
  int failed = 0;
  if (admitted > bound) { fprintf(stderr, "FAIL admitted %" PRIu64 " > bound %" PRIu64 "\n", admitted, bound); failed++; }
  if (admitted + 1 < bound - 160 - 1) { fprintf(stderr, "FAIL admitted %" PRIu64 " far below the rate\n", admitted); failed++; }
  if (counters.admitted + counters.refused != (uint64_t)THREADS * CALLS) { fprintf(stderr, "FAIL counters\n"); failed++; }
  if (counters.admitted != admitted || counters.refused != refused) { fprintf(stderr, "FAIL counter mismatch\n"); failed++; }
  if (atomic_load(&errors)) { fprintf(stderr, "FAIL errors\n"); failed++; }
  printf("threads: %d x %d calls over %" PRIu64 " ms: admitted %" PRIu64 " (bound %" PRIu64 "), refused %" PRIu64 "\n",
         THREADS, CALLS, window_ms, admitted, bound, refused);
  uint64_t double_releases = race(0);
  uint64_t double_redeems = race(1);
  if (double_releases) { fprintf(stderr, "FAIL %" PRIu64 " of %d tickets refunded twice\n", double_releases, RACES); failed++; }
  if (double_redeems) { fprintf(stderr, "FAIL %" PRIu64 " of %d bookings redeemed twice\n", double_redeems, RACES); failed++; }
  if (atomic_load(&race_errors)) { fprintf(stderr, "FAIL race errors\n"); failed++; }
  printf("races: %d releases and %d redemptions of one struct by two threads; used twice: %" PRIu64 ", %" PRIu64 "\n",
         RACES, RACES, double_releases, double_redeems);
  if (observe_race()) { fprintf(stderr, "FAIL concurrent observations\n"); failed++; }
  printf("%d passed, %d failed\n", 9 - failed, failed);
  return failed ? 1 : 0;
}
