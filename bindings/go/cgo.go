package pacer

// Every call into the C library lives in this file. Go memory handed to C
// is either plain data with no Go pointers (kept alive with
// runtime.KeepAlive until the call returns) or not handed over at all: the
// calls go through small C wrappers that return their results by value, or,
// for Reserve, write them to a Go stack variable C does not keep.

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -l:libpacer.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "pacer.h"

// The hot call, pacer_reserve, is called directly and writes its decision
// through a pointer to a Go stack variable: noescape keeps that variable
// on the stack (C does not keep the pointer) and nocallback lets the
// runtime skip its callback bookkeeping (C never calls back into Go).
#cgo noescape pacer_reserve
#cgo nocallback pacer_reserve

typedef struct {
	uint32_t status;
	pacer_decision decision;
} pacer_go_reserve_result;

typedef struct {
	uint32_t status;
	bool refunded;
} pacer_go_release_result;

// A ticket rebuilt live from its numbers and the issuing pacer's owner tag
// (ABI 2: without the tag the library refuses it as foreign).
static pacer_ticket pacer_go_ticket(uint32_t seq, uint32_t debit_units, uint32_t owner) {
	pacer_ticket ticket;
	ticket.seq = seq;
	ticket.debit_units = debit_units;
	ticket.state = PACER_TICKET_STATE_LIVE;
	ticket.owner = owner;
	return ticket;
}

static pacer_go_release_result pacer_go_release(const pacer *storage, uint32_t seq,
		uint32_t debit_units, uint32_t owner, uint64_t now_ms) {
	pacer_go_release_result r;
	pacer_ticket ticket = pacer_go_ticket(seq, debit_units, owner);
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_release(storage, &ticket, now_ms, &r.refunded);
	return r;
}

typedef struct {
	uint32_t status;
	pacer_decision decision;
	pacer_booking booking;
} pacer_go_book_result;

// A booking rebuilt live from its numbers: the Go side keeps the spent
// flag (Ticket.spent) and presents only bookings it has not spent.
static pacer_booking pacer_go_booking(uint32_t seq, uint32_t debit_units, uint32_t owner, uint64_t slot_ms) {
	pacer_booking booking;
	memset(&booking, 0, sizeof booking);
	booking.ticket = pacer_go_ticket(seq, debit_units, owner);
	booking.slot_ms = slot_ms;
	return booking;
}

static pacer_go_book_result pacer_go_reserve_or_book(const pacer *storage, uint64_t now_ms,
		uint32_t retries_left) {
	pacer_go_book_result r;
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_reserve_or_book(storage, now_ms, retries_left, &r.decision, &r.booking);
	return r;
}

static pacer_go_reserve_result pacer_go_redeem(const pacer *storage, uint32_t seq,
		uint32_t debit_units, uint32_t owner, uint64_t slot_ms, uint64_t now_ms) {
	pacer_go_reserve_result r;
	pacer_booking booking = pacer_go_booking(seq, debit_units, owner, slot_ms);
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_redeem(storage, &booking, now_ms, &r.decision);
	return r;
}

// The booking calls and release of a shared pacer, through its handle:
// the library reads the shared clock (pacer_clock_monotonic_ms) itself.
static pacer_go_book_result pacer_go_shared_reserve_or_book(const pacer_shared *handle,
		uint32_t retries_left) {
	pacer_go_book_result r;
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_shared_reserve_or_book(handle, retries_left, &r.decision, &r.booking);
	return r;
}

static pacer_go_reserve_result pacer_go_shared_redeem(const pacer_shared *handle, uint32_t seq,
		uint32_t debit_units, uint32_t owner, uint64_t slot_ms) {
	pacer_go_reserve_result r;
	pacer_booking booking = pacer_go_booking(seq, debit_units, owner, slot_ms);
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_shared_redeem(handle, &booking, &r.decision);
	return r;
}

static pacer_go_release_result pacer_go_shared_release(const pacer_shared *handle, uint32_t seq,
		uint32_t debit_units, uint32_t owner) {
	pacer_go_release_result r;
	pacer_ticket ticket = pacer_go_ticket(seq, debit_units, owner);
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_shared_release(handle, &ticket, &r.refunded);
	return r;
}

// The configuration calls take their pacer_config by value, built in Go
// (cConfig.c): a Go value starts zeroed, so no field is ever left holding
// whatever was on the C stack.
static uint32_t pacer_go_mode_notice(pacer_config c, pacer_notice *out_notice, bool *out_present) {
	return (uint32_t)pacer_mode_notice(&c, out_notice, out_present);
}

static pacer *pacer_go_alloc(void) {
	void *p = aligned_alloc(PACER_STORAGE_ALIGN, PACER_STORAGE_SIZE);
	if (p != NULL) {
		memset(p, 0, PACER_STORAGE_SIZE);
	}
	return (pacer *)p;
}

static uint32_t pacer_go_init(pacer *storage, pacer_config c, uint64_t now_ms) {
	return (uint32_t)pacer_init(storage, &c, now_ms);
}

typedef struct {
	uint32_t status;
	uint32_t rate;
} pacer_go_rate_result;

// Adaptive pacing (SPEC §14): the rate in force after an observation, or
// now; on a shared pacer through its handle, at the shared clock.
static pacer_go_rate_result pacer_go_observe(const pacer *storage, uint32_t outcome, uint64_t now_ms) {
	pacer_go_rate_result r;
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_observe(storage, outcome, now_ms, &r.rate);
	return r;
}

static pacer_go_rate_result pacer_go_rate_in_force(const pacer *storage, uint64_t now_ms) {
	pacer_go_rate_result r;
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_rate_in_force(storage, now_ms, &r.rate);
	return r;
}

static pacer_go_rate_result pacer_go_shared_observe(const pacer_shared *handle, uint32_t outcome) {
	pacer_go_rate_result r;
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_shared_observe(handle, outcome, &r.rate);
	return r;
}

static pacer_go_rate_result pacer_go_shared_rate_in_force(const pacer_shared *handle) {
	pacer_go_rate_result r;
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_shared_rate_in_force(handle, &r.rate);
	return r;
}

static uint32_t pacer_go_header_abi_version(void) { return PACER_ABI_VERSION; }

typedef struct {
	uint32_t status;
	int64_t units;
} pacer_go_level_result;

// The tokens at now_ms, in units (pacer_level_at reads only).
static pacer_go_level_result pacer_go_level_at(const pacer *storage, uint64_t now_ms) {
	pacer_go_level_result r;
	memset(&r, 0, sizeof r);
	r.status = (uint32_t)pacer_level_at(storage, now_ms, &r.units);
	return r;
}

// The wait histogram's bound i, ms: the library's pacer_wait_bounds_ms,
// read through a function so Go never takes the address of C data.
static uint64_t pacer_go_wait_bound_ms(int i) { return pacer_wait_bounds_ms[i]; }

typedef struct {
	uint32_t status;
	int err;
	const pacer *storage;
} pacer_go_shared_result;

static pacer_shared *pacer_go_shared_alloc(void) {
	void *p = aligned_alloc(PACER_SHARED_STORAGE_ALIGN, PACER_SHARED_STORAGE_SIZE);
	if (p != NULL) {
		memset(p, 0, PACER_SHARED_STORAGE_SIZE);
	}
	return (pacer_shared *)p;
}

static pacer_go_shared_result pacer_go_shared_open(pacer_shared *handle, const char *path, pacer_config c) {
	pacer_go_shared_result r;
	memset(&r, 0, sizeof r);
	errno = 0;
	r.status = (uint32_t)pacer_shared_open(handle, path, &c);
	r.err = errno;
	if (r.status == PACER_STATUS_OK) {
		r.status = (uint32_t)pacer_shared_pacer(handle, &r.storage);
	}
	return r;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// Limits from include/pacer.h (checked against it below).
const (
	// MaxRatePerMinute is the highest accepted rate (new connections per minute).
	MaxRatePerMinute = 600
	// MaxBurst is the largest accepted burst.
	MaxBurst = 1000000
	// RefusalStatus is the HTTP status of a refusal (SPEC §9: the error
	// travels inside the event stream).
	RefusalStatus = 200
	// UnitsPerToken is how many units one connection's token is (tickets
	// and Info report debits and tokens in units).
	UnitsPerToken = 60000
	// maxNotices is the most notices one resolution produces.
	maxNotices = 6
	// WaitBuckets is how many buckets the wait histogram has
	// (Counters.WaitBuckets, WaitBoundsMs).
	WaitBuckets = 8
)

// waitBoundsMs is the library's pacer_wait_bounds_ms, read once.
var waitBoundsMs = func() (out [WaitBuckets]uint64) {
	for i := range out {
		out[i] = uint64(C.pacer_go_wait_bound_ms(C.int(i)))
	}
	return out
}()

// WaitBoundsMs is the wait histogram's upper bounds, ms, ascending (the
// library's pacer_wait_bounds_ms: 10, 50, 100, 500, 1000, 2500, 5000,
// 10000). Counters.WaitBuckets[i] counts the admissions whose wait was
// above the bound before WaitBoundsMs()[i] (0 for i = 0) and at most
// WaitBoundsMs()[i]. It returns a copy.
func WaitBoundsMs() [WaitBuckets]uint64 { return waitBoundsMs }

// Compile-time equality with the header: indexing a one-element array
// with anything but 0 does not compile.
var (
	_ = [1]struct{}{}[C.PACER_MAX_RATE_PER_MIN-MaxRatePerMinute]
	_ = [1]struct{}{}[C.PACER_MAX_BURST-MaxBurst]
	_ = [1]struct{}{}[C.PACER_REFUSAL_STATUS-RefusalStatus]
	_ = [1]struct{}{}[C.PACER_MAX_NOTICES-maxNotices]
	_ = [1]struct{}{}[C.PACER_WAIT_BUCKETS-WaitBuckets]
	_ = [1]struct{}{}[C.PACER_STATUS_OK-StatusOK]
	_ = [1]struct{}{}[C.PACER_STATUS_NULL_PARAMETER-StatusNullParameter]
	_ = [1]struct{}{}[C.PACER_STATUS_PANIC-StatusPanic]
	_ = [1]struct{}{}[C.PACER_STATUS_INVALID_ENUM-StatusInvalidEnum]
	_ = [1]struct{}{}[C.PACER_STATUS_BUFFER_TOO_SHORT-StatusBufferTooShort]
	_ = [1]struct{}{}[C.PACER_STATUS_INVALID_UTF8-StatusInvalidUTF8]
	_ = [1]struct{}{}[C.PACER_STATUS_NOT_INITIALIZED-StatusNotInitialized]
	_ = [1]struct{}{}[C.PACER_STATUS_RATE_TOO_HIGH-StatusRateTooHigh]
	_ = [1]struct{}{}[C.PACER_STATUS_BURST_TOO_LARGE-StatusBurstTooLarge]
	_ = [1]struct{}{}[C.PACER_STATUS_RETRIES_EXCEED_LADDER-StatusRetriesExceedLadder]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_UNSUPPORTED-StatusSharedUnsupported]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_OS-StatusSharedOS]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_INVALID_NAME-StatusSharedInvalidName]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_SYMLINK-StatusSharedSymlink]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_NOT_REGULAR-StatusSharedNotRegular]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_WRONG_OWNER-StatusSharedWrongOwner]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_PERMISSIONS-StatusSharedPermissions]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_TRUNCATED-StatusSharedTruncated]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_FOREIGN-StatusSharedForeign]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_LAYOUT_VERSION-StatusSharedLayoutVersion]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_ABI_VERSION-StatusSharedABIVersion]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_INCOMPLETE-StatusSharedIncomplete]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_CONFIG_MISMATCH-StatusSharedConfigMismatch]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_NOT_OPEN-StatusSharedNotOpen]
	_ = [1]struct{}{}[C.PACER_STATUS_SHARED_NOT_FOUND-StatusSharedNotFound]
	_ = [1]struct{}{}[C.PACER_STATUS_INVALID_TICKET-StatusInvalidTicket]
	_ = [1]struct{}{}[C.PACER_STATUS_MISALIGNED-StatusMisaligned]
	_ = [1]struct{}{}[C.PACER_STATUS_FOREIGN_TICKET-StatusForeignTicket]
	_ = [1]struct{}{}[C.PACER_STATUS_ADAPTIVE_RANGE-StatusAdaptiveRange]
	_ = [1]struct{}{}[C.PACER_OUTCOME_OPENED-OutcomeOpened]
	_ = [1]struct{}{}[C.PACER_OUTCOME_THROTTLED-OutcomeThrottled]
	_ = [1]struct{}{}[C.PACER_RELEASE_POLICY_REFUND-ReleaseRefund]
	_ = [1]struct{}{}[C.PACER_RELEASE_POLICY_STRICT-ReleaseStrict]
	_ = [1]struct{}{}[C.PACER_MODE_DISABLED-ModeDisabled]
	_ = [1]struct{}{}[C.PACER_MODE_REFUSING-ModeRefusing]
	_ = [1]struct{}{}[C.PACER_MODE_SHAPING_LOW_RATE-ModeShapingLowRate]
	_ = [1]struct{}{}[C.PACER_MODE_SHAPING_NO_RETRY-ModeShapingNoRetry]
	_ = [1]struct{}{}[C.PACER_ADMIT_PATH_NONE-PathNone]
	_ = [1]struct{}{}[C.PACER_ADMIT_PATH_DISABLED-PathDisabled]
	_ = [1]struct{}{}[C.PACER_ADMIT_PATH_PACED-PathPaced]
	_ = [1]struct{}{}[C.PACER_ADMIT_PATH_SHAPED-PathShaped]
	_ = [1]struct{}{}[C.PACER_ADMIT_PATH_OVERFLOW-PathOverflow]
	_ = [1]struct{}{}[C.PACER_ADMIT_PATH_BOOKED-PathBooked]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_RATE_MALFORMED-NoticeRateMalformed]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_RATE_CLAMPED-NoticeRateClamped]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_IDLE_MALFORMED-NoticeIdleMalformed]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_IDLE_CLAMPED-NoticeIdleClamped]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_TOTAL_MALFORMED-NoticeTotalMalformed]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_TOTAL_CLAMPED-NoticeTotalClamped]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_RETRIES_MALFORMED-NoticeRetriesMalformed]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_RETRIES_CLAMPED-NoticeRetriesClamped]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_IDLE_LOWERED-NoticeIdleLowered]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_TOTAL_RAISED-NoticeTotalRaised]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_PACING_DISABLED-NoticePacingDisabled]
	_ = [1]struct{}{}[C.PACER_NOTICE_KIND_NO_REFUSE-NoticeNoRefuse]
)

// HeaderABIVersion is PACER_ABI_VERSION from the pacer.h this package was
// compiled against.
func HeaderABIVersion() uint32 { return uint32(C.pacer_go_header_abi_version()) }

// LibraryABIVersion is what the linked library reports (pacer_abi_version).
// New and Resolve refuse to work when it differs from HeaderABIVersion.
func LibraryABIVersion() uint32 { return uint32(C.pacer_abi_version()) }

// LibraryVersion is the linked library's version, e.g. "0.1.0".
func LibraryVersion() string { return C.GoString(C.pacer_version()) }

func checkABI() error {
	if LibraryABIVersion() != HeaderABIVersion() {
		return ErrABIMismatch
	}
	return nil
}

func statusText(code uint32) string { return C.GoString(C.pacer_status_str(C.uint32_t(code))) }

// storage is one C-allocated struct pacer (PACER_STORAGE_SIZE bytes,
// PACER_STORAGE_ALIGN-aligned), never in Go memory; or, for a shared pacer,
// the pacer mapped by the C-allocated handle `shared`.
type storage struct {
	ptr    *C.pacer
	shared *C.pacer_shared
}

func allocStorage() (*storage, error) {
	p := C.pacer_go_alloc()
	if p == nil {
		return nil, ErrOutOfMemory
	}
	return &storage{ptr: p}, nil
}

// free releases the storage: from a failed New or OpenShared, or from the
// cleanup of the Pacer that holds it, so never while a call can use it.
func (s *storage) free() {
	if s.shared != nil {
		// Unmaps this process's view; the file and the bucket stay.
		C.pacer_shared_close(s.shared)
		C.free(unsafe.Pointer(s.shared))
		s.shared = nil
		s.ptr = nil
		return
	}
	if s.ptr != nil {
		C.free(unsafe.Pointer(s.ptr))
		s.ptr = nil
	}
}

// openSharedStorage opens (or creates) the shared pacer at path.
func openSharedStorage(path string, c cConfig) (*storage, error) {
	h := C.pacer_go_shared_alloc()
	if h == nil {
		return nil, ErrOutOfMemory
	}
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	r := C.pacer_go_shared_open(h, p, c.c())
	if err := statusErr("pacer_shared_open", uint32(r.status)); err != nil {
		C.free(unsafe.Pointer(h))
		if Status(r.status) == StatusSharedOS && r.err != 0 {
			return nil, fmt.Errorf("%w: %w", err, syscall.Errno(r.err))
		}
		return nil, err
	}
	// The storage pointer is the mapping's, not Go memory; it stays valid
	// until pacer_shared_close.
	return &storage{ptr: (*C.pacer)(unsafe.Pointer(r.storage)), shared: h}, nil
}

// unlinkShared removes the shared pacer's file name.
func unlinkShared(path string) error {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	code, errno := C.pacer_shared_unlink(p)
	err := statusErr("pacer_shared_unlink", uint32(code))
	if err != nil && Status(code) == StatusSharedOS && errno != nil {
		return fmt.Errorf("%w: %w", err, errno)
	}
	return err
}

// SharedClockMs is the machine-wide clock (CLOCK_MONOTONIC in whole
// milliseconds, pacer_clock_monotonic_ms) every process sharing a pacer
// reads. A SharedPacer always uses it.
func SharedClockMs() uint64 { return uint64(C.pacer_clock_monotonic_ms()) }

func (s *storage) aligned() bool {
	return uintptr(unsafe.Pointer(s.ptr))%C.PACER_STORAGE_ALIGN == 0
}

// cConfig is a pacer_config in Go types.
type cConfig struct {
	rate, burst     uint32
	idle            uint64
	retries, policy uint32
	// adaptive pacing (SPEC §14): floor 0 is off; ceiling 0 is the rate
	floor, ceiling uint32
}

// c is the pacer_config: every field set, the rest of a Go value zero.
func (c cConfig) c() C.pacer_config {
	var out C.pacer_config
	out.rate_per_min = C.uint32_t(c.rate)
	out.burst = C.uint32_t(c.burst)
	out.idle_timeout_ms = C.uint64_t(c.idle)
	out.max_retries = C.uint32_t(c.retries)
	out.release_policy = C.uint32_t(c.policy)
	out.adaptive_floor_per_min = C.uint32_t(c.floor)
	out.adaptive_ceiling_per_min = C.uint32_t(c.ceiling)
	return out
}

func (s *storage) init(c cConfig, nowMs uint64) error {
	code := uint32(C.pacer_go_init(s.ptr, c.c(), C.uint64_t(nowMs)))
	return statusErr("pacer_init", code)
}

// observe runs pacer_observe at nowMs (on a shared pacer,
// pacer_shared_observe at the shared clock, nowMs unused): the rate in
// force after it.
func (s *storage) observe(outcome Outcome, nowMs uint64) (int, error) {
	if s.shared != nil {
		return rateOf("pacer_shared_observe", C.pacer_go_shared_observe(s.shared, C.uint32_t(outcome)))
	}
	return rateOf("pacer_observe", C.pacer_go_observe(s.ptr, C.uint32_t(outcome), C.uint64_t(nowMs)))
}

// rateInForce runs pacer_rate_in_force at nowMs (on a shared pacer,
// pacer_shared_rate_in_force at the shared clock, nowMs unused).
func (s *storage) rateInForce(nowMs uint64) (int, error) {
	if s.shared != nil {
		return rateOf("pacer_shared_rate_in_force", C.pacer_go_shared_rate_in_force(s.shared))
	}
	return rateOf("pacer_rate_in_force", C.pacer_go_rate_in_force(s.ptr, C.uint64_t(nowMs)))
}

// rateOf is the rate a C call op answered, or its error.
func rateOf(op string, r C.pacer_go_rate_result) (int, error) {
	if err := statusErr(op, uint32(r.status)); err != nil {
		return 0, err
	}
	return int(r.rate), nil
}

// reserve runs pacer_reserve and writes its decision to *out, an
// admission's Ticket being owner's (newTicket). *out is written field by
// field, not built and copied: the hot path then moves no whole Decision
// between frames, whose wide copies of just-written fields stall.
func (s *storage) reserve(nowMs uint64, owner *Pacer, out *Decision) error {
	var d C.pacer_decision // zeroed; pacer_reserve writes all of it on success
	if code := uint32(C.pacer_reserve(s.ptr, C.uint64_t(nowMs), &d)); code != uint32(StatusOK) {
		return statusErr("pacer_reserve", code)
	}
	out.Admitted = uint32(d.kind) == C.PACER_DECISION_KIND_ADMITTED
	out.Path = Path(d.path)
	out.WaitMs = uint64(d.wait_ms)
	out.Queued = bool(d.queued)
	out.RequiredWaitMs = uint64(d.required_wait_ms)
	out.RetryAfterSeconds = uint64(d.retry_after_s)
	out.ClockRegressed = bool(d.clock_regressed)
	if uint32(d.ticket.state) == C.PACER_TICKET_STATE_LIVE {
		out.Ticket = owner.newTicket(uint32(d.ticket.seq), uint32(d.ticket.debit_units), uint32(d.ticket.owner))
	}
	return nil
}

// decisionFromC converts a pacer_decision, its live ticket as one of
// owner's; a booked one (kind PACER_DECISION_KIND_BOOKED) is not admitted,
// like a refusal.
func decisionFromC(d *C.pacer_decision, owner *Pacer) Decision {
	out := Decision{
		Admitted:          uint32(d.kind) == C.PACER_DECISION_KIND_ADMITTED,
		Path:              Path(d.path),
		WaitMs:            uint64(d.wait_ms),
		Queued:            bool(d.queued),
		RequiredWaitMs:    uint64(d.required_wait_ms),
		RetryAfterSeconds: uint64(d.retry_after_s),
		ClockRegressed:    bool(d.clock_regressed),
	}
	if uint32(d.ticket.state) == C.PACER_TICKET_STATE_LIVE {
		out.Ticket = owner.newTicket(uint32(d.ticket.seq), uint32(d.ticket.debit_units), uint32(d.ticket.owner))
	}
	return out
}

// reserveOrBook runs pacer_reserve_or_book at nowMs, or, on a shared
// pacer, pacer_shared_reserve_or_book at the shared clock (nowMs unused).
// A booked answer returns the booking's ticket and slot (nil otherwise);
// the decision is then not admitted and carries the hint.
func (s *storage) reserveOrBook(nowMs uint64, retriesLeft uint32, owner *Pacer) (Decision, *Booking, error) {
	var r C.pacer_go_book_result
	op := "pacer_reserve_or_book"
	if s.shared != nil {
		op = "pacer_shared_reserve_or_book"
		r = C.pacer_go_shared_reserve_or_book(s.shared, C.uint32_t(retriesLeft))
	} else {
		r = C.pacer_go_reserve_or_book(s.ptr, C.uint64_t(nowMs), C.uint32_t(retriesLeft))
	}
	if err := statusErr(op, uint32(r.status)); err != nil {
		return Decision{}, nil, err
	}
	d := decisionFromC(&r.decision, owner)
	if uint32(r.decision.kind) != C.PACER_DECISION_KIND_BOOKED ||
		uint32(r.booking.ticket.state) != C.PACER_TICKET_STATE_LIVE {
		return d, nil, nil
	}
	t := owner.newTicket(uint32(r.booking.ticket.seq), uint32(r.booking.ticket.debit_units),
		uint32(r.booking.ticket.owner))
	slot := uint64(r.booking.slot_ms)
	return d, &Booking{SlotMs: slot, Ticket: t, slot: slot, ticket: t}, nil
}

// redeem runs pacer_redeem at nowMs (on a shared pacer, pacer_shared_redeem
// at the shared clock, nowMs unused) on a live booking with this ticket
// (seq, debit, the library's owner tag) and slot. Admitted: the decision's
// Ticket is the booking's, as a new Go value of owner's.
func (s *storage) redeem(seq, debitUnits, tag uint32, slotMs, nowMs uint64, owner *Pacer) (Decision, error) {
	var r C.pacer_go_reserve_result
	op := "pacer_redeem"
	if s.shared != nil {
		op = "pacer_shared_redeem"
		r = C.pacer_go_shared_redeem(s.shared, C.uint32_t(seq), C.uint32_t(debitUnits), C.uint32_t(tag),
			C.uint64_t(slotMs))
	} else {
		r = C.pacer_go_redeem(s.ptr, C.uint32_t(seq), C.uint32_t(debitUnits), C.uint32_t(tag), C.uint64_t(slotMs),
			C.uint64_t(nowMs))
	}
	if err := statusErr(op, uint32(r.status)); err != nil {
		return Decision{}, err
	}
	return decisionFromC(&r.decision, owner), nil
}

// release runs pacer_release at nowMs (on a shared pacer,
// pacer_shared_release at the shared clock, nowMs unused) on the live
// ticket (seq, debit, the library's owner tag).
func (s *storage) release(seq, debitUnits, tag uint32, nowMs uint64) (bool, error) {
	var r C.pacer_go_release_result
	op := "pacer_release"
	if s.shared != nil {
		op = "pacer_shared_release"
		r = C.pacer_go_shared_release(s.shared, C.uint32_t(seq), C.uint32_t(debitUnits), C.uint32_t(tag))
	} else {
		r = C.pacer_go_release(s.ptr, C.uint32_t(seq), C.uint32_t(debitUnits), C.uint32_t(tag), C.uint64_t(nowMs))
	}
	if err := statusErr(op, uint32(r.status)); err != nil {
		return false, err
	}
	return bool(r.refunded), nil
}

// counters reads every count through pacer_get_metrics: for a shared
// pacer, the bucket's (every process that opened it counts there).
func (s *storage) counters() (Counters, error) {
	var m C.pacer_metrics
	code := uint32(C.pacer_get_metrics(s.ptr, &m))
	runtime.KeepAlive(&m)
	if err := statusErr("pacer_get_metrics", code); err != nil {
		return Counters{}, err
	}
	out := Counters{
		Admitted:          uint64(m.admitted),
		AdmittedAfterWait: uint64(m.admitted_after_wait),
		Refused:           uint64(m.refused),
		Booked:            uint64(m.booked),
		Redeemed:          uint64(m.redeemed),
		Shaped:            uint64(m.shaped),
		Released:          uint64(m.released),
		Refunded:          uint64(m.refunded),
		ClockRegressions:  uint64(m.clock_regressions),
		Opened:            uint64(m.opened),
		Throttled:         uint64(m.throttled),
		WaitMsTotal:       uint64(m.wait_ms_total),
	}
	for i := range out.WaitBuckets {
		out.WaitBuckets[i] = uint64(m.wait_buckets[i])
	}
	return out, nil
}

// levelAt runs pacer_level_at: the tokens at nowMs, in units.
func (s *storage) levelAt(nowMs uint64) (int64, error) {
	r := C.pacer_go_level_at(s.ptr, C.uint64_t(nowMs))
	if err := statusErr("pacer_level_at", uint32(r.status)); err != nil {
		return 0, err
	}
	return int64(r.units), nil
}

func (s *storage) info() (Info, error) {
	var i C.pacer_info
	code := uint32(C.pacer_get_info(s.ptr, &i))
	runtime.KeepAlive(&i)
	if err := statusErr("pacer_get_info", code); err != nil {
		return Info{}, err
	}
	return Info{
		Mode:          Mode(i.mode),
		ReleasePolicy: ReleasePolicy(i.release_policy),
		WaitBoundMs:   uint64(i.wait_bound_ms),
		CapacityUnits: int64(i.capacity_units),
		MaxDebtUnits:  int64(i.max_debt_units),
		HighWaterMs:   uint64(i.high_water_ms),
		TokensUnits:   int64(i.tokens_units),
	}, nil
}

// ---------------------------------------------------------------- SPEC §3

// LadderCeiling is the largest retry count r whose backoff ladder
// 2000·(2^r − 1) ms is shorter than idleTimeoutMs (SPEC §3).
func LadderCeiling(idleTimeoutMs uint64) uint32 {
	return uint32(C.pacer_ladder_ceiling(C.uint64_t(idleTimeoutMs)))
}

// WaitBoundMs is min(15000, floor(max(0, idle − backoff(r)) / (2(r+1)))) (SPEC §3).
func WaitBoundMs(idleTimeoutMs uint64, maxRetries uint32) uint64 {
	return uint64(C.pacer_wait_bound_ms(C.uint64_t(idleTimeoutMs), C.uint32_t(maxRetries)))
}

// HintCapSeconds is max(1, floor(bound/1000)) (SPEC §3).
func HintCapSeconds(waitBoundMs uint64) uint64 {
	return uint64(C.pacer_hint_cap_s(C.uint64_t(waitBoundMs)))
}

// RetryAfterSeconds is min(max(1, ceil(required/1000)), hint cap) (SPEC §3).
func RetryAfterSeconds(requiredWaitMs, waitBoundMs uint64) uint64 {
	return uint64(C.pacer_retry_after_s(C.uint64_t(requiredWaitMs), C.uint64_t(waitBoundMs)))
}

// CanRefuse reports whether refusals can outlast the wait for one slot:
// r > 0 && rate > 0 && r·cap_s·1000·rate >= 60000 (SPEC §3).
func CanRefuse(ratePerMinute, maxRetries uint32, waitBoundMs uint64) bool {
	return bool(C.pacer_can_refuse(C.uint32_t(ratePerMinute), C.uint32_t(maxRetries), C.uint64_t(waitBoundMs)))
}

// ---------------------------------------------------------------- settings

// cStrings holds C copies of Go strings until free is called.
type cStrings []*C.char

// add returns a C copy of s, or nil for an unset setting.
func (cs *cStrings) add(s *string) *C.char {
	if s == nil {
		return nil
	}
	p := C.CString(*s)
	*cs = append(*cs, p)
	return p
}

func (cs cStrings) free() {
	for _, p := range cs {
		C.free(unsafe.Pointer(p))
	}
}

// resolve runs pacer_resolve over the four settings (nil = unset).
func resolve(s Settings) (Budget, error) {
	var strs cStrings
	defer strs.free()
	rate := strs.add(s.RatePerMinute)
	idle := strs.add(s.IdleTimeoutMs)
	total := strs.add(s.TotalTimeoutMs)
	retries := strs.add(s.MaxRetries)
	var b C.pacer_budget
	var n C.pacer_notices
	code := uint32(C.pacer_resolve(rate, idle, total, retries, &b, &n))
	runtime.KeepAlive(&b)
	runtime.KeepAlive(&n)
	if err := statusErr("pacer_resolve", code); err != nil {
		return Budget{}, err
	}
	out := Budget{
		RatePerMinute:     uint32(b.rate_per_min),
		MaxRetries:        uint32(b.max_retries),
		IdleTimeoutMs:     uint64(b.idle_timeout_ms),
		TotalTimeoutMs:    uint64(b.total_timeout_ms),
		WaitBoundMs:       uint64(b.wait_bound_ms),
		HintCapSeconds:    uint64(b.hint_cap_s),
		RefusalScheduleMs: uint64(b.refusal_schedule_ms),
		CanRefuse:         bool(b.can_refuse),
		Enabled:           bool(b.enabled),
	}
	count := int(n.count)
	if count > maxNotices {
		count = maxNotices
	}
	for i := 0; i < count; i++ {
		item := &n.items[i]
		// raw points into one of strs, still allocated here.
		raw := ""
		if item.raw != nil && item.raw_len > 0 {
			raw = C.GoStringN(item.raw, C.int(item.raw_len))
		}
		notice, err := noticeFromC(item, raw)
		if err != nil {
			return Budget{}, err
		}
		out.Notices = append(out.Notices, notice)
	}
	return out, nil
}

// noticeFromC builds a Notice from a pacer_notice (raw: its text, already
// copied out): the English text from pacer_notice_render and the dedupe key
// from pacer_notice_key. n is rebuilt in Go memory with its own copy of raw.
func noticeFromC(item *C.pacer_notice, raw string) (Notice, error) {
	var n C.pacer_notice
	n.kind = item.kind
	n.values = item.values
	if raw != "" {
		rawC := C.CString(raw)
		defer C.free(unsafe.Pointer(rawC))
		n.raw = rawC
		n.raw_len = C.size_t(len(raw))
	}
	text, err := renderInto("pacer_notice_render", func(buf *C.uint8_t, size C.size_t, written *C.size_t) uint32 {
		return uint32(C.pacer_notice_render(&n, buf, size, written))
	})
	if err != nil {
		return Notice{}, err
	}
	key, err := renderInto("pacer_notice_key", func(buf *C.uint8_t, size C.size_t, written *C.size_t) uint32 {
		return uint32(C.pacer_notice_key(&n, buf, size, written))
	})
	runtime.KeepAlive(&n)
	if err != nil {
		return Notice{}, err
	}
	values := [3]uint64{uint64(n.values[0]), uint64(n.values[1]), uint64(n.values[2])}
	return Notice{Kind: NoticeKind(n.kind), Key: string(key), Text: string(text), Raw: raw, Values: values}, nil
}

// modeNotice is the notice a configuration calls for (SPEC §2), from
// pacer_mode_notice: pacing disabled by a zero bound, or a refusal
// schedule too short to refuse.
func modeNotice(c cConfig) (Notice, bool, error) {
	var n C.pacer_notice
	var present C.bool
	code := C.pacer_go_mode_notice(c.c(), &n, &present)
	runtime.KeepAlive(&n)
	runtime.KeepAlive(&present)
	if err := statusErr("pacer_mode_notice", uint32(code)); err != nil || !bool(present) {
		return Notice{}, false, err
	}
	notice, err := noticeFromC(&n, "")
	return notice, err == nil, err
}

// noticeKindName is the kind's name from pacer_notice_kind_name, or
// "unknown".
func noticeKindName(kind NoticeKind) string {
	name := C.pacer_notice_kind_name(C.uint32_t(kind))
	if name == nil {
		return "unknown"
	}
	return C.GoString(name)
}

// renderInto runs a C renderer that follows the BUFFER_TOO_SHORT
// convention: measure with an empty buffer, then render into one of the
// needed length.
func renderInto(op string, render func(buf *C.uint8_t, size C.size_t, written *C.size_t) uint32) ([]byte, error) {
	var needed C.size_t
	code := render(nil, 0, &needed)
	runtime.KeepAlive(&needed)
	switch code {
	case uint32(C.PACER_STATUS_OK):
		return []byte{}, nil
	case uint32(C.PACER_STATUS_BUFFER_TOO_SHORT):
	default:
		return nil, statusErr(op, code)
	}
	buf := make([]byte, int(needed))
	var written C.size_t
	code = render((*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &written)
	runtime.KeepAlive(buf)
	runtime.KeepAlive(&written)
	if err := statusErr(op, code); err != nil {
		return nil, err
	}
	return buf[:int(written)], nil
}

// refusalBody renders the SPEC §9 body via pacer_refusal_body.
func refusalBody(prefix string, retryAfterSeconds uint64) ([]byte, error) {
	p := C.CString(prefix)
	defer C.free(unsafe.Pointer(p))
	return renderInto("pacer_refusal_body", func(buf *C.uint8_t, size C.size_t, written *C.size_t) uint32 {
		return uint32(C.pacer_refusal_body(p, C.uint64_t(retryAfterSeconds), buf, size, written))
	})
}

// RefusalContentType is the refusal's content-type header value.
func RefusalContentType() string { return C.GoString(C.pacer_refusal_content_type()) }
