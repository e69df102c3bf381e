/* Many threads hammer one pacer on a shared clock; admissions never exceed
 * SPEC §6.1's bound: burst + max_debt + rate*W/60000 + 1 (no releases). */
#include <inttypes.h>
#include <pthread.h>
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

int main(void) {
  /* rate 600, burst 10, idle 3600000, 5 retries: bound 15000 ms,
   * max_debt = 15000*600/60000 = 150 tokens. */
  pacer_config c = {600, 10, 3600000, 5, PACER_RELEASE_POLICY_REFUND};
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
  printf("%d passed, %d failed\n", 5 - failed, failed);
  return failed ? 1 : 0;
}
