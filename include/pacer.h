/*
 * pacer: admission pacing for new upstream connections.
 *
 * Conventions (every function):
 * - Functions that can fail return a pacer_status; PACER_STATUS_OK is 0.
 *   pacer_status_str() names any status, known or not.
 * - NULL pointer arguments return PACER_STATUS_NULL_PARAMETER (except where
 *   a parameter is documented as optional).
 * - Enumerated values passed in are uint32_t; an unknown value returns
 *   PACER_STATUS_INVALID_ENUM.
 * - Outputs are trailing out-parameters, written only on success. The one
 *   exception: PACER_STATUS_BUFFER_TOO_SHORT writes the needed length to
 *   *out_written and leaves the buffer untouched.
 * - A failing call changes nothing. No panic crosses this boundary: an
 *   internal fault returns PACER_STATUS_PANIC.
 * - A pointer argument misaligned for its type returns
 *   PACER_STATUS_MISALIGNED.
 * - Strings passed in are NUL-terminated UTF-8 (PACER_STATUS_INVALID_UTF8
 *   otherwise), except settings text given to pacer_resolve: any bytes, and
 *   text that is not UTF-8 is a malformed setting (default and a notice).
 * - No function allocates memory that the caller must free; a pacer lives
 *   in caller-provided storage (struct pacer), so there is nothing to free.
 */


#ifndef PACER_H
#define PACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if defined(_MSC_VER)
#define PACER_ALIGNED(n) __declspec(align(n))
#else
#define PACER_ALIGNED(n) __attribute__((aligned(n)))
#endif


/**
 * HTTP status of a refusal (the error travels inside the event stream).
 */
#define PACER_REFUSAL_STATUS 200

/**
 * Bytes of storage a pacer needs (struct pacer).
 */
#define PACER_STORAGE_SIZE 256

/**
 * Alignment the storage needs.
 */
#define PACER_STORAGE_ALIGN 16

/**
 * Largest accepted burst.
 */
#define PACER_MAX_BURST 1000000

/**
 * Highest accepted rate (new connections per minute).
 */
#define PACER_MAX_RATE_PER_MIN 600

/**
 * Number of buckets of the wait histogram (pacer_metrics.wait_buckets).
 */
#define PACER_WAIT_BUCKETS 8

/**
 * Most notices one resolution produces.
 */
#define PACER_MAX_NOTICES 6

/**
 * Bytes of storage a notice registry needs.
 */
#define PACER_NOTICE_REGISTRY_SIZE 2048

/**
 * Alignment the registry storage needs.
 */
#define PACER_NOTICE_REGISTRY_ALIGN 8

/**
 * How many distinct keys a registry remembers. Past that, a notice whose
 * key is not remembered reports first = true every time (it is shown
 * again rather than lost).
 */
#define PACER_NOTICE_REGISTRY_KEYS 32

/**
 * Bytes of storage a shared-pacer handle needs (struct pacer_shared).
 */
#define PACER_SHARED_STORAGE_SIZE 64

/**
 * Alignment the handle storage needs.
 */
#define PACER_SHARED_STORAGE_ALIGN 16

/**
 * The file layout this library reads and writes.
 */
#define PACER_SHARED_LAYOUT_VERSION 4

/**
 * The page boundary in the file where the shared words start: the state
 * word at this offset (where layout 2 had it), the adaptive control word
 * 16 bytes after it (the header records both). A multiple of every page
 * size the library supports, up to 64 KiB.
 */
#define PACER_SHARED_SPLIT_OFFSET 65536

/**
 * The file's exact size (the boundary + 256).
 */
#define PACER_SHARED_FILE_SIZE 65792

/**
 * Bytes of the header at the start of the file.
 */
#define PACER_SHARED_HEADER_SIZE 128

/**
 * The ABI version this header describes. A library whose
 * pacer_abi_version() differs is not compatible with it.
 */
#define PACER_ABI_VERSION 3

/**
 * Result of a call. Numbers are explicit and never reused.
 */
enum pacer_status
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Success.
   */
  PACER_STATUS_OK = 0,
  /**
   * A required pointer argument was NULL.
   */
  PACER_STATUS_NULL_PARAMETER = 1,
  /**
   * An internal fault was caught at the boundary; nothing was changed.
   */
  PACER_STATUS_PANIC = 2,
  /**
   * An enumerated value passed in (as uint32_t) is not a known value.
   */
  PACER_STATUS_INVALID_ENUM = 3,
  /**
   * The output buffer is too short; *out_written holds the needed length.
   */
  PACER_STATUS_BUFFER_TOO_SHORT = 4,
  /**
   * A string argument is not valid UTF-8.
   */
  PACER_STATUS_INVALID_UTF8 = 5,
  /**
   * The storage was not initialised (pacer_init, or
   * pacer_notice_registry_init for a registry).
   */
  PACER_STATUS_NOT_INITIALIZED = 6,
  /**
   * Config: rate_per_min above 600.
   */
  PACER_STATUS_RATE_TOO_HIGH = 7,
  /**
   * Config: burst above PACER_MAX_BURST.
   */
  PACER_STATUS_BURST_TOO_LARGE = 8,
  /**
   * Config: max_retries above the ladder ceiling of idle_timeout_ms.
   */
  PACER_STATUS_RETRIES_EXCEED_LADDER = 9,
  /**
   * Shared pacer: this build or target cannot share a pacer between
   * processes (128-bit atomics are not lock-free, or the page size or
   * the pacer's layout does not fit the file layout).
   */
  PACER_STATUS_SHARED_UNSUPPORTED = 10,
  /**
   * Shared pacer: a system call failed; errno holds its error.
   */
  PACER_STATUS_SHARED_OS = 11,
  /**
   * Shared pacer: the name is empty, ".", "..", or too long.
   */
  PACER_STATUS_SHARED_INVALID_NAME = 12,
  /**
   * Shared pacer: the path is a symbolic link.
   */
  PACER_STATUS_SHARED_SYMLINK = 13,
  /**
   * Shared pacer: the path is not a regular file.
   */
  PACER_STATUS_SHARED_NOT_REGULAR = 14,
  /**
   * Shared pacer: the file belongs to another user.
   */
  PACER_STATUS_SHARED_WRONG_OWNER = 15,
  /**
   * Shared pacer: the file is accessible to its group or to others.
   */
  PACER_STATUS_SHARED_PERMISSIONS = 16,
  /**
   * Shared pacer: the file's size is not the layout's (truncated?).
   */
  PACER_STATUS_SHARED_TRUNCATED = 17,
  /**
   * Shared pacer: the file is not a shared pacer (bad magic number).
   */
  PACER_STATUS_SHARED_FOREIGN = 18,
  /**
   * Shared pacer: the file has another layout version.
   */
  PACER_STATUS_SHARED_LAYOUT_VERSION = 19,
  /**
   * Shared pacer: the file was made by a library of another ABI version.
   */
  PACER_STATUS_SHARED_ABI_VERSION = 20,
  /**
   * Shared pacer: the file was never completely initialised.
   */
  PACER_STATUS_SHARED_INCOMPLETE = 21,
  /**
   * Shared pacer: the file holds a different configuration.
   */
  PACER_STATUS_SHARED_CONFIG_MISMATCH = 22,
  /**
   * Shared pacer: the handle is not open (never opened, or closed).
   */
  PACER_STATUS_SHARED_NOT_OPEN = 23,
  /**
   * Shared pacer: no such file.
   */
  PACER_STATUS_SHARED_NOT_FOUND = 24,
  /**
   * A booking presented to pacer_redeem holds no live ticket (already
   * redeemed, released, or never booked).
   */
  PACER_STATUS_INVALID_TICKET = 25,
  /**
   * A pointer argument is not aligned for its type (struct pacer and
   * struct pacer_shared need 16 bytes, a ticket 4, a booking 8).
   */
  PACER_STATUS_MISALIGNED = 26,
  /**
   * The ticket or booking was issued by another pacer (or forged): its
   * owner is not this pacer's. Nothing was changed.
   */
  PACER_STATUS_FOREIGN_TICKET = 27,
  /**
   * Config: adaptive pacing is on (adaptive_floor_per_min > 0) with a
   * floor above rate_per_min, or a ceiling (when not 0) below
   * rate_per_min or above 600.
   */
  PACER_STATUS_ADAPTIVE_RANGE = 28,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_status pacer_status;
#else
typedef uint32_t pacer_status;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Release policies (values of pacer_config.release_policy).
 */
enum pacer_release_policy
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Always refund, capped at capacity (the default).
   */
  PACER_RELEASE_POLICY_REFUND = 0,
  /**
   * Refund only while every later debit has itself been refunded.
   */
  PACER_RELEASE_POLICY_STRICT = 1,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_release_policy pacer_release_policy;
#else
typedef uint32_t pacer_release_policy;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Values of pacer_decision.kind.
 */
enum pacer_decision_kind
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Open the connection after wait_ms.
   */
  PACER_DECISION_KIND_ADMITTED = 1,
  /**
   * Do not open; answer with a retryable rate limit (retry_after_s).
   */
  PACER_DECISION_KIND_REFUSED = 2,
  /**
   * Do not open yet; answer with a retryable rate limit (retry_after_s)
   * and keep the booking pacer_reserve_or_book wrote for the retry.
   */
  PACER_DECISION_KIND_BOOKED = 3,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_decision_kind pacer_decision_kind;
#else
typedef uint32_t pacer_decision_kind;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Values of pacer_decision.path (which rule admitted).
 */
enum pacer_admit_path
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Not admitted (a refusal).
   */
  PACER_ADMIT_PATH_NONE = 0,
  /**
   * Pacing is off.
   */
  PACER_ADMIT_PATH_DISABLED = 1,
  /**
   * A whole token, now or after a wait within the bound.
   */
  PACER_ADMIT_PATH_PACED = 2,
  /**
   * Shaped overflow: debited down to the floor, waits the bound.
   */
  PACER_ADMIT_PATH_SHAPED = 3,
  /**
   * Overflow past the floor in a shaping mode: at once, nothing debited.
   */
  PACER_ADMIT_PATH_OVERFLOW = 4,
  /**
   * A redeemed booking (SPEC §11); reserved for the booking calls.
   */
  PACER_ADMIT_PATH_BOOKED = 5,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_admit_path pacer_admit_path;
#else
typedef uint32_t pacer_admit_path;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Values of pacer_info.mode.
 */
enum pacer_mode
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Rate 0 or no room to wait: everything admitted at once.
   */
  PACER_MODE_DISABLED = 0,
  /**
   * Overflow refused with a hint.
   */
  PACER_MODE_REFUSING = 1,
  /**
   * Retries cannot outlast a slot wait at this rate: overflow shaped.
   */
  PACER_MODE_SHAPING_LOW_RATE = 2,
  /**
   * No retries: overflow shaped.
   */
  PACER_MODE_SHAPING_NO_RETRY = 3,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_mode pacer_mode;
#else
typedef uint32_t pacer_mode;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Values of pacer_ticket.state.
 */
enum pacer_ticket_state
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * No ticket (nothing was debited); releasing it reports false.
   */
  PACER_TICKET_STATE_NONE = 0,
  /**
   * Releasable once.
   */
  PACER_TICKET_STATE_LIVE = 1,
  /**
   * Already released; releasing again reports false.
   */
  PACER_TICKET_STATE_SPENT = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_ticket_state pacer_ticket_state;
#else
typedef uint32_t pacer_ticket_state;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Values of pacer_notice.kind (numbers shared with the Rust core).
 */
enum pacer_notice_kind
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Rate text malformed. values: [rate used].
   */
  PACER_NOTICE_KIND_RATE_MALFORMED = 1,
  /**
   * Rate above 600. values: [rate used].
   */
  PACER_NOTICE_KIND_RATE_CLAMPED = 2,
  /**
   * Idle timeout text malformed. values: [idle used].
   */
  PACER_NOTICE_KIND_IDLE_MALFORMED = 3,
  /**
   * Idle timeout out of range. values: [idle used].
   */
  PACER_NOTICE_KIND_IDLE_CLAMPED = 4,
  /**
   * Total timeout text malformed. values: [total used].
   */
  PACER_NOTICE_KIND_TOTAL_MALFORMED = 5,
  /**
   * Total timeout out of range. values: [total used].
   */
  PACER_NOTICE_KIND_TOTAL_CLAMPED = 6,
  /**
   * Retry count malformed. values: [retries used].
   */
  PACER_NOTICE_KIND_RETRIES_MALFORMED = 7,
  /**
   * Retry count above the ladder ceiling. values: [retries used, idle].
   */
  PACER_NOTICE_KIND_RETRIES_CLAMPED = 8,
  /**
   * Idle lowered to the total. values: [idle before, total].
   */
  PACER_NOTICE_KIND_IDLE_LOWERED = 9,
  /**
   * Total raised to the idle. values: [total before, idle].
   */
  PACER_NOTICE_KIND_TOTAL_RAISED = 10,
  /**
   * Pacing switched itself off. values: [retries, idle, rate].
   */
  PACER_NOTICE_KIND_PACING_DISABLED = 11,
  /**
   * Pacing cannot refuse; overflow is shaped. values: [rate, retries, bound].
   */
  PACER_NOTICE_KIND_NO_REFUSE = 12,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_notice_kind pacer_notice_kind;
#else
typedef uint32_t pacer_notice_kind;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * What the upstream answered to a new connection (the `outcome` argument
 * of pacer_observe and pacer_shared_observe).
 */
enum pacer_outcome
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * The upstream opened it: counted in its minute of the clock, so a
   * later throttle knows about how many got through (and, past the hold
   * after a throttle, a count above the limit learned starts a search
   * for a higher rate).
   */
  PACER_OUTCOME_OPENED = 1,
  /**
   * The upstream throttled it (its own rate limit, not the pacer's):
   * ends a search, or lowers the rate in force to what the counts show
   * got through (at most once a minute; a throttle within the hold
   * changes nothing).
   */
  PACER_OUTCOME_THROTTLED = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum pacer_outcome pacer_outcome;
#else
typedef uint32_t pacer_outcome;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Storage for one pacer. Allocate it anywhere (static, stack, heap,
 * shared memory), zeroed or not, then call pacer_init. Never copy it while
 * other threads use it. It holds no resources: there is nothing to free.
 */
typedef struct PACER_ALIGNED(16) pacer {
  uint8_t opaque[PACER_STORAGE_SIZE];
} pacer;

/**
 * A pacer's parameters.
 */
typedef struct pacer_config {
  /**
   * New connections per minute, 0..=600 (0 = pacing off).
   */
  uint32_t rate_per_min;
  /**
   * Connections admitted with no wait after idle; 0 means 1.
   */
  uint32_t burst;
  /**
   * The request's no-data deadline in ms; sizes the wait bound.
   */
  uint64_t idle_timeout_ms;
  /**
   * The client's retry count (at most the ladder ceiling of the deadline).
   */
  uint32_t max_retries;
  /**
   * A pacer_release_policy value.
   */
  uint32_t release_policy;
  /**
   * Adaptive pacing (SPEC §14): the lowest rate the outcomes reported
   * with pacer_observe may lower the rate in force to, 1..=rate_per_min
   * (raised to the lowest rate that can refuse, SPEC §3, never above
   * the ceiling); 0 turns adaptation off (the rate in force stays
   * rate_per_min).
   */
  uint32_t adaptive_floor_per_min;
  /**
   * The highest rate the rate in force may climb back to,
   * rate_per_min..=600; 0 means rate_per_min. Ignored when adaptation is
   * off.
   */
  uint32_t adaptive_ceiling_per_min;
} pacer_config;

/**
 * The right to refund one admission. pacer_release marks it spent with
 * an atomic compare-and-swap of `state`, so of several threads releasing
 * (or redeeming) the same ticket struct exactly one succeeds. It works
 * only on the pacer whose `owner` tag it carries. A copy of a live ticket
 * is a second handle on the same debit that the pacer cannot tell apart:
 * keep one.
 */
typedef struct pacer_ticket {
  /**
   * Position in the pacer's release stack.
   */
  uint32_t seq;
  /**
   * Debit to refund, in units (60000 = one token).
   */
  uint32_t debit_units;
  /**
   * A pacer_ticket_state value (changed only by the library).
   */
  uint32_t state;
  /**
   * The issuing pacer's tag; another pacer refuses the ticket with
   * PACER_STATUS_FOREIGN_TICKET. Keep it as written.
   */
  uint32_t owner;
} pacer_ticket;

/**
 * The answer to pacer_reserve.
 */
typedef struct pacer_decision {
  /**
   * A pacer_decision_kind value.
   */
  uint32_t kind;
  /**
   * A pacer_admit_path value (PACER_ADMIT_PATH_NONE for a refusal).
   */
  uint32_t path;
  /**
   * Admitted: wait this long before opening, ms.
   */
  uint64_t wait_ms;
  /**
   * Refused: the wait the rate would need, ms (diagnostics).
   */
  uint64_t required_wait_ms;
  /**
   * Refused: the hint the client is asked to honour, seconds.
   */
  uint64_t retry_after_s;
  /**
   * Admitted with wait_ms > 0.
   */
  bool queued;
  /**
   * now_ms was behind the latest reading and was treated as it.
   */
  bool clock_regressed;
  /**
   * The refund right (state PACER_TICKET_STATE_NONE if nothing debited).
   */
  struct pacer_ticket ticket;
} pacer_decision;

/**
 * A place in line (SPEC §11), written by pacer_reserve_or_book. Keep it
 * under the request's own identity; present it with pacer_redeem on the
 * request's retry; release its ticket with pacer_release if the request
 * ends without redeeming it.
 */
typedef struct pacer_booking {
  /**
   * The refund right for the booked token. pacer_redeem moves it into
   * the admission (this copy is then marked spent, atomically: of two
   * threads redeeming one booking struct, one is admitted).
   */
  struct pacer_ticket ticket;
  /**
   * When the connection may open, ms on the pacer's clock.
   */
  uint64_t slot_ms;
} pacer_booking;

/**
 * Decision counters.
 */
typedef struct pacer_counters {
  /**
   * Admissions by any path.
   */
  uint64_t admitted;
  /**
   * Admissions with a wait.
   */
  uint64_t admitted_after_wait;
  /**
   * Refusals.
   */
  uint64_t refused;
  /**
   * Admissions by the shaping rule.
   */
  uint64_t shaped;
  /**
   * Release calls on a live ticket.
   */
  uint64_t released;
  /**
   * Releases refunded.
   */
  uint64_t refunded;
  /**
   * Calls whose clock was behind the latest reading.
   */
  uint64_t clock_regressions;
} pacer_counters;

/**
 * Every count a pacer keeps (docs/metrics.md): pacer_counters' counts and
 * bookings, upstream answers and the waits given. A shared pacer's are
 * the bucket's: every process's calls are counted in its file. Each count
 * wraps at 2^64.
 */
typedef struct pacer_metrics {
  /**
   * Admissions by any path.
   */
  uint64_t admitted;
  /**
   * Admissions with a wait.
   */
  uint64_t admitted_after_wait;
  /**
   * Refusals (bookings and a redemption's "not yet" included).
   */
  uint64_t refused;
  /**
   * Admissions by the shaping rule.
   */
  uint64_t shaped;
  /**
   * Release calls on a live ticket.
   */
  uint64_t released;
  /**
   * Releases refunded.
   */
  uint64_t refunded;
  /**
   * Calls whose clock was behind the latest reading.
   */
  uint64_t clock_regressions;
  /**
   * Refusals that booked a place in line.
   */
  uint64_t booked;
  /**
   * Upstream answers reported opened (pacer_observe).
   */
  uint64_t opened;
  /**
   * Upstream answers reported throttled (pacer_observe).
   */
  uint64_t throttled;
  /**
   * The admissions' waits summed, ms.
   */
  uint64_t wait_ms_total;
  /**
   * Admissions of a booking presented on its retry (pacer_redeem).
   */
  uint64_t redeemed;
  /**
   * Admissions that waited more than the bound before
   * pacer_wait_bounds_ms[i] (0 for i = 0) and at most
   * pacer_wait_bounds_ms[i]; immediate admissions are in no bucket, nor
   * waits above the last bound.
   */
  uint64_t wait_buckets[PACER_WAIT_BUCKETS];
} pacer_metrics;

/**
 * A pacer's derived parameters and current state. The mode and the debt
 * floor are those of the configured rate; an adaptive pacer decides at
 * its rate in force (pacer_rate_in_force), which moves with the clock.
 */
typedef struct pacer_info {
  /**
   * A pacer_mode value.
   */
  uint32_t mode;
  /**
   * A pacer_release_policy value.
   */
  uint32_t release_policy;
  /**
   * Longest wait granted, ms.
   */
  uint64_t wait_bound_ms;
  /**
   * Capacity (burst) in units.
   */
  int64_t capacity_units;
  /**
   * Debt floor in units.
   */
  int64_t max_debt_units;
  /**
   * Latest clock reading that changed the state, ms.
   */
  uint64_t high_water_ms;
  /**
   * Tokens at high_water_ms, in units (may be negative).
   */
  int64_t tokens_units;
} pacer_info;

/**
 * A resolved budget and its derived quantities.
 */
typedef struct pacer_budget {
  /**
   * New connections per minute (0 = off).
   */
  uint32_t rate_per_min;
  /**
   * Client retry count.
   */
  uint32_t max_retries;
  /**
   * No-data deadline per request, ms.
   */
  uint64_t idle_timeout_ms;
  /**
   * Total deadline per request, ms.
   */
  uint64_t total_timeout_ms;
  /**
   * Longest wait a paced request is granted, ms.
   */
  uint64_t wait_bound_ms;
  /**
   * Largest retry-after hint, s.
   */
  uint64_t hint_cap_s;
  /**
   * How long refusals keep a request retrying, ms.
   */
  uint64_t refusal_schedule_ms;
  /**
   * Refusals can outlast the wait for a slot.
   */
  bool can_refuse;
  /**
   * Pacing is on.
   */
  bool enabled;
} pacer_budget;

/**
 * One notice. `raw` points into the settings string the caller passed to
 * pacer_resolve (valid as long as that string is); `raw_len` bytes, not
 * NUL-terminated; NULL with length 0 when the notice has no text.
 */
typedef struct pacer_notice {
  /**
   * A pacer_notice_kind value.
   */
  uint32_t kind;
  /**
   * Zero.
   */
  uint32_t reserved;
  /**
   * The numbers, per kind.
   */
  uint64_t values[3];
  /**
   * The offending setting text, or NULL.
   */
  const char *raw;
  /**
   * Length of `raw` in bytes.
   */
  size_t raw_len;
} pacer_notice;

/**
 * The notices of one resolution, in order.
 */
typedef struct pacer_notices {
  /**
   * How many of `items` are set.
   */
  size_t count;
  /**
   * The notices.
   */
  struct pacer_notice items[PACER_MAX_NOTICES];
} pacer_notices;

/**
 * Remembers which notices were shown, so each shows once per key (up to
 * PACER_NOTICE_REGISTRY_KEYS keys). Caller storage; initialise with
 * pacer_notice_registry_init. Not thread-safe: serialise calls on one
 * registry.
 */
typedef struct PACER_ALIGNED(8) pacer_notice_registry {
  uint8_t opaque[PACER_NOTICE_REGISTRY_SIZE];
} pacer_notice_registry;

/**
 * A handle on a shared pacer: caller-owned storage that pacer_shared_open
 * fills (the mapping's address and length) and pacer_shared_close
 * releases. Never copy an open handle; close it once.
 */
typedef struct PACER_ALIGNED(16) pacer_shared {
  uint8_t opaque[PACER_SHARED_STORAGE_SIZE];
} pacer_shared;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * The wait histogram's upper bounds, ms: 10, 50, 100, 500, 1000, 2500,
 * 5000, 10000.
 * (Lowercase, as every exported symbol of the library starts with
 * `pacer_`.)
 */
extern const uint64_t pacer_wait_bounds_ms[PACER_WAIT_BUCKETS];

/**
 * Largest retry count whose backoff ladder fits inside `idle_timeout_ms`.
 */
uint32_t pacer_ladder_ceiling(uint64_t idle_timeout_ms);

/**
 * The wait bound, ms: min(15000, floor(max(0, idle − backoff(r)) / (2(r+1)))).
 */
uint64_t pacer_wait_bound_ms(uint64_t idle_timeout_ms, uint32_t max_retries);

/**
 * The hint cap, s: max(1, floor(bound/1000)).
 */
uint64_t pacer_hint_cap_s(uint64_t wait_bound_ms);

/**
 * The retry-after hint, s: min(max(1, ceil(required/1000)), hint cap).
 */
uint64_t pacer_retry_after_s(uint64_t required_wait_ms, uint64_t wait_bound_ms);

/**
 * Whether refusals can outlast the wait for one slot at this rate.
 */
bool pacer_can_refuse(uint32_t rate_per_min, uint32_t max_retries, uint64_t wait_bound_ms);

/**
 * The refusal's content-type header value (static, NUL-terminated).
 */
const char *pacer_refusal_content_type(void);

/**
 * Writes the refusal body (one SSE error event, UTF-8, not NUL-terminated)
 * for `message_prefix` (the proxy's text, JSON-escaped here) and
 * `retry_after_s`; send it with status 200, the content type above and a
 * `retry-after: <retry_after_s>` header. Short buffer: as pacer_notice_render.
 */
pacer_status pacer_refusal_body(const char *message_prefix,
                                uint64_t retry_after_s,
                                uint8_t *buf,
                                size_t len,
                                size_t *out_written);

/**
 * Initialises `storage` as a pacer with `config`, full (burst tokens
 * available) at `now_ms`. An invalid config returns its status and leaves
 * the storage as it was. Do not call it while other threads use `storage`.
 */
pacer_status pacer_init(struct pacer *storage, const struct pacer_config *config, uint64_t now_ms);

/**
 * Asks to open one new connection at `now_ms` (the caller's monotonic
 * clock, ms). Thread-safe and lock-free.
 */
pacer_status pacer_reserve(const struct pacer *storage,
                           uint64_t now_ms,
                           struct pacer_decision *out_decision);

/**
 * pacer_reserve, except that a refusal whose wait fits the horizon of the
 * request's `retries_left` retries books a place in line (SPEC §11): kind
 * PACER_DECISION_KIND_BOOKED, one token debited, *out_booking written.
 * Otherwise *out_booking is left untouched. Thread-safe and lock-free.
 */
pacer_status pacer_reserve_or_book(const struct pacer *storage,
                                   uint64_t now_ms,
                                   uint32_t retries_left,
                                   struct pacer_decision *out_decision,
                                   struct pacer_booking *out_booking);

/**
 * Presents a booking on the request's retry at `now_ms`; changes nothing
 * in the pacer. Admitted (path PACER_ADMIT_PATH_BOOKED) after
 * `max(0, slot − now)` when `slot − now ≤ bound`: the decision carries the
 * booking's ticket and the booking's copy is marked spent (atomically: of
 * concurrent redemptions of one booking struct, one is admitted). Otherwise
 * PACER_DECISION_KIND_BOOKED again with the next hint, booking unchanged.
 * A booking whose ticket is not live returns PACER_STATUS_INVALID_TICKET;
 * one issued by another pacer, PACER_STATUS_FOREIGN_TICKET.
 */
pacer_status pacer_redeem(const struct pacer *storage,
                          struct pacer_booking *booking,
                          uint64_t now_ms,
                          struct pacer_decision *out_decision);

/**
 * Releases an admission that will not open its connection. A live ticket
 * is marked spent (atomically: of concurrent releases of one ticket
 * struct, one refunds) and *out_refunded says whether the policy refunded
 * it (true even when the capacity cap absorbed the refund). A ticket with
 * nothing to refund, or already spent, reports false and changes nothing;
 * one issued by another pacer returns PACER_STATUS_FOREIGN_TICKET.
 */
pacer_status pacer_release(const struct pacer *storage,
                           struct pacer_ticket *ticket,
                           uint64_t now_ms,
                           bool *out_refunded);

/**
 * Reads the decision counters (each read independently).
 */
pacer_status pacer_get_counters(const struct pacer *storage, struct pacer_counters *out_counters);

/**
 * Reads every count the pacer keeps (each read independently): for a
 * shared pacer, the bucket's, counted by every process that opened it.
 */
pacer_status pacer_get_metrics(const struct pacer *storage, struct pacer_metrics *out_metrics);

/**
 * Reads the pacer's derived parameters and current state.
 */
pacer_status pacer_get_info(const struct pacer *storage, struct pacer_info *out_info);

/**
 * Reports what the upstream answered to a new connection at `now_ms`
 * (SPEC §14; `outcome` a pacer_outcome value): PACER_OUTCOME_OPENED is
 * counted in its minute (past the hold, a count above the limit learned
 * starts a search again); PACER_OUTCOME_THROTTLED ends a search at what
 * the counts show got through, or lowers the probe's limit to it (by 1/16
 * when the counts do not explain the throttle), at most once a minute,
 * never below the lowest rate; a throttle within the hold changes
 * nothing.
 * *out_rate_per_min is the rate in force after it. With adaptation off it
 * changes nothing and reports rate_per_min. Thread-safe and lock-free.
 */
pacer_status pacer_observe(const struct pacer *storage,
                           uint32_t outcome,
                           uint64_t now_ms,
                           uint32_t *out_rate_per_min);

/**
 * The tokens at `now_ms`, in units (60000 a token; negative: the debt
 * waiting admissions hold): the state refilled at the rate in force,
 * capped at the burst; a clock behind the latest reading reads that
 * reading. Reads only.
 */
pacer_status pacer_level_at(const struct pacer *storage, uint64_t now_ms, int64_t *out_units);

/**
 * The rate in force at `now_ms`, new connections per minute (SPEC §14):
 * rate_per_min unless adaptation is on. Reads only.
 */
pacer_status pacer_rate_in_force(const struct pacer *storage,
                                 uint64_t now_ms,
                                 uint32_t *out_rate_per_min);

/**
 * Resolves the four settings strings (each NULL = unset) into a budget.
 * Bad values never fail, whatever their bytes (not UTF-8 included): they
 * are defaulted or clamped and reported in `out_notices` (optional: NULL
 * to ignore notices). A notice's `raw` points to the caller's string.
 */
pacer_status pacer_resolve(const char *rate_per_min,
                           const char *idle_timeout_ms,
                           const char *total_timeout_ms,
                           const char *max_retries,
                           struct pacer_budget *out_budget,
                           struct pacer_notices *out_notices);

/**
 * Writes a notice's English text (UTF-8, not NUL-terminated) into
 * `buf[0..len]` and its length to *out_written. If it does not fit:
 * PACER_STATUS_BUFFER_TOO_SHORT, *out_written = the needed length, buf
 * untouched. `buf` may be NULL when `len` is 0 (to measure).
 */
pacer_status pacer_notice_render(const struct pacer_notice *notice,
                                 uint8_t *buf,
                                 size_t len,
                                 size_t *out_written);

/**
 * Writes a notice's dedupe key as text (UTF-8, not NUL-terminated):
 * `<namespace>:<raw>` for the setting-text kinds (`rate: 9x`),
 * `<namespace>:<a>:<b>:<c>` for the others (`disabled:3:14001:60`). Equal
 * keys are the same notice for pacer_notice_registry_first_time; a binding
 * that deduplicates in its own map uses this text. Buffer rules as
 * pacer_notice_render.
 */
pacer_status pacer_notice_key(const struct pacer_notice *notice,
                              uint8_t *buf,
                              size_t len,
                              size_t *out_written);

/**
 * A static, NUL-terminated name of a notice kind, as in tests/vectors
 * (`rate_malformed`, …, `norefuse`); NULL for an unknown kind. Never free it.
 */
const char *pacer_notice_kind_name(uint32_t kind);

/**
 * The notice a pacer built from `config` calls for, the one pacer_resolve
 * ends with when it resolves these numbers from settings text:
 * `pacing_disabled` (a positive rate with no room to wait) or `norefuse`
 * (pacing on with retries, but refusals cannot outlast the wait for a
 * slot). *out_present = false when the mode needs none (out_notice is then
 * left untouched). An invalid config returns the status pacer_init would.
 */
pacer_status pacer_mode_notice(const struct pacer_config *config,
                               struct pacer_notice *out_notice,
                               bool *out_present);

/**
 * Empties `registry`.
 */
pacer_status pacer_notice_registry_init(struct pacer_notice_registry *registry);

/**
 * *out_first = true the first time a notice's key is seen by `registry`
 * (show it), false afterwards. Keys are namespaced by kind. A registry
 * that pacer_notice_registry_init never initialised returns
 * PACER_STATUS_NOT_INITIALIZED.
 */
pacer_status pacer_notice_registry_first_time(struct pacer_notice_registry *registry,
                                              const struct pacer_notice *notice,
                                              bool *out_first);

/**
 * Opens the shared pacer `path_or_name` with `config`, creating it (0600,
 * full: burst tokens at the current pacer_clock_monotonic_ms()) if it
 * does not exist. A name without '/' lives in /dev/shm; anything with a
 * '/' is a path. An existing file is checked before use: a symlink, not a
 * regular file, another owner, group/other permissions, a foreign file, a
 * different layout or ABI version, a wrong size, an incomplete file or a
 * different configuration each return their status and change nothing.
 * On success *handle is open; close it with pacer_shared_close (opening
 * into a handle that is still open loses its mapping until exit).
 */
pacer_status pacer_shared_open(struct pacer_shared *handle,
                               const char *path_or_name,
                               const struct pacer_config *config);

/**
 * The pacer of an open handle, for pacer_reserve, pacer_release,
 * pacer_observe, pacer_rate_in_force, pacer_get_info, pacer_get_counters
 * and pacer_get_metrics (the state, the rate in force and the counters
 * are the bucket's: every process's calls count in its file). Pass it the
 * shared clock, pacer_clock_monotonic_ms(), and nothing else.
 */
pacer_status pacer_shared_pacer(const struct pacer_shared *handle, const struct pacer **out_pacer);

/**
 * pacer_reserve on the shared pacer at pacer_clock_monotonic_ms().
 */
pacer_status pacer_shared_reserve(const struct pacer_shared *handle,
                                  struct pacer_decision *out_decision);

/**
 * pacer_release on the shared pacer at pacer_clock_monotonic_ms().
 */
pacer_status pacer_shared_release(const struct pacer_shared *handle,
                                  struct pacer_ticket *ticket,
                                  bool *out_refunded);

/**
 * pacer_reserve_or_book on the shared pacer at pacer_clock_monotonic_ms():
 * a refusal within the horizon of `retries_left` retries books a place in
 * the machine-wide line (SPEC §11). The booking's ticket carries the
 * bucket's owner tag, so it redeems and releases through any handle on
 * this bucket, in any process, and nowhere else.
 */
pacer_status pacer_shared_reserve_or_book(const struct pacer_shared *handle,
                                          uint32_t retries_left,
                                          struct pacer_decision *out_decision,
                                          struct pacer_booking *out_booking);

/**
 * pacer_redeem on the shared pacer at pacer_clock_monotonic_ms(). A
 * booking from another bucket or pacer returns
 * PACER_STATUS_FOREIGN_TICKET.
 */
pacer_status pacer_shared_redeem(const struct pacer_shared *handle,
                                 struct pacer_booking *booking,
                                 struct pacer_decision *out_decision);

/**
 * pacer_observe on the shared pacer at pacer_clock_monotonic_ms(): the
 * rate in force is the machine's, so a throttle reported by one process
 * slows every process on the bucket. *out_rate_per_min is the rate in
 * force after it.
 */
pacer_status pacer_shared_observe(const struct pacer_shared *handle,
                                  uint32_t outcome,
                                  uint32_t *out_rate_per_min);

/**
 * pacer_rate_in_force on the shared pacer at pacer_clock_monotonic_ms().
 */
pacer_status pacer_shared_rate_in_force(const struct pacer_shared *handle,
                                        uint32_t *out_rate_per_min);

/**
 * Unmaps the shared pacer and marks the handle closed. The file stays
 * (see pacer_shared_unlink). The pacer pointer from pacer_shared_pacer is
 * invalid afterwards.
 */
pacer_status pacer_shared_close(struct pacer_shared *handle);

/**
 * Removes the shared pacer's name (a name without '/' lives in /dev/shm).
 * Processes that have it open keep their bucket; the next open creates a
 * new, full one. PACER_STATUS_SHARED_NOT_FOUND if there is no such file.
 */
pacer_status pacer_shared_unlink(const char *path_or_name);

/**
 * The machine-wide clock every process sharing a pacer must use:
 * CLOCK_MONOTONIC in whole milliseconds (0 if the clock cannot be read).
 */
uint64_t pacer_clock_monotonic_ms(void);

/**
 * A static, NUL-terminated English description of `status` (any number:
 * unknown ones get "unknown status"). Never NULL; never free it.
 */
const char *pacer_status_str(uint32_t status);

/**
 * The library version, e.g. "0.1.0" (static, NUL-terminated).
 */
const char *pacer_version(void);

/**
 * The ABI version of the loaded library (compare with PACER_ABI_VERSION).
 */
uint32_t pacer_abi_version(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* PACER_H */

#ifndef PACER_H_LAYOUT_CHECKED
#define PACER_H_LAYOUT_CHECKED
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus)
_Static_assert(sizeof(struct pacer) == PACER_STORAGE_SIZE, "struct pacer size");
_Static_assert(_Alignof(struct pacer) == PACER_STORAGE_ALIGN, "struct pacer alignment");
#elif defined(__cplusplus) && __cplusplus >= 201103L
static_assert(sizeof(struct pacer) == PACER_STORAGE_SIZE, "struct pacer size");
static_assert(alignof(struct pacer) == PACER_STORAGE_ALIGN, "struct pacer alignment");
#endif
#endif
