package pacer

import (
	"errors"
	"fmt"
)

// Errors are values usable with errors.Is and errors.As:
//
//   - ErrInvalidConfig: New rejected a Config; errors.As gives the *FieldError
//     that names the field.
//   - ErrRefused: Admit was refused; errors.As gives the *RefusedError with the
//     hint for the client.
//   - ErrClosed: the Pacer was closed (before the call, or while Admit or
//     AdmitKey waited: the slot was refunded then).
//   - ErrBookingSpent: Redeem was given a booking already redeemed or
//     released; it also matches StatusInvalidTicket.
//   - a Status (StatusNullParameter, StatusRateTooHigh, …): a C call failed;
//     errors.As gives the *CallError naming the call.
var (
	ErrInvalidConfig = errors.New("pacer: invalid config")
	ErrRefused       = errors.New("pacer: refused")
	ErrClosed        = errors.New("pacer: closed")
	ErrABIMismatch   = errors.New("pacer: linked library's ABI version differs from pacer.h's")
	ErrOutOfMemory   = errors.New("pacer: out of memory for the pacer's storage")
	ErrInvalidInput  = errors.New("pacer: invalid input")
)

// FieldError says which Config field (or argument) was rejected and why.
// It matches ErrInvalidConfig (a Config field) or ErrInvalidInput (an
// argument) with errors.Is.
type FieldError struct {
	Field  string // e.g. "RatePerMinute"
	Value  any    // the rejected value
	Reason string // e.g. "must be between 0 and 600"
	input  bool
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("pacer: %s %s, got %v", e.Field, e.Reason, e.Value)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) (or ErrInvalidInput) true.
func (e *FieldError) Unwrap() error {
	if e.input {
		return ErrInvalidInput
	}
	return ErrInvalidConfig
}

func configError(field string, value any, reason string) error {
	return &FieldError{Field: field, Value: value, Reason: reason}
}

func inputError(field string, value any, reason string) error {
	return &FieldError{Field: field, Value: value, Reason: reason, input: true}
}

// ErrBookingSpent is Redeem's error for a booking whose ticket was already
// redeemed or released. errors.Is(err, StatusInvalidTicket) is true for
// it too: it is the library's PACER_STATUS_INVALID_TICKET.
var ErrBookingSpent error = &bookingSpentError{}

type bookingSpentError struct{}

func (*bookingSpentError) Error() string { return "pacer: booking already redeemed or released" }

// Is makes errors.Is(ErrBookingSpent, StatusInvalidTicket) true.
func (*bookingSpentError) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == StatusInvalidTicket
}

// RefusedError is Admit's answer when the pacer refuses (SPEC §4 step 5):
// answer the client with Response and let it retry after RetryAfterSeconds.
type RefusedError struct {
	// RequiredWaitMs is the wait the rate would need, ms (diagnostics).
	RequiredWaitMs uint64
	// RetryAfterSeconds is the hint the client is asked to honour.
	RetryAfterSeconds uint64
	// Booked: the request holds a place in line (AdmitKey, SPEC §11); its
	// retry with the same key redeems it. Answer the client the same way.
	Booked bool
	// Fallback is the failure policy that refused while Redis failed
	// (RedisPacer); "" when the bucket refused.
	Fallback FailurePolicy
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("pacer: refused (needs %dms, retry after %ds)", e.RequiredWaitMs, e.RetryAfterSeconds)
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Response is the refusal as an HTTP answer with messagePrefix ("" for
// DefaultMessagePrefix).
func (e *RefusedError) Response(messagePrefix string) (*Refusal, error) {
	return RefusalResponse(e.RetryAfterSeconds, messagePrefix)
}

// Status is a pacer_status code. Every non-OK Status is an error value,
// so errors.Is(err, pacer.StatusNotInitialized) works.
type Status uint32

// The pacer_status codes (include/pacer.h); numbers are never reused.
const (
	StatusOK                  Status = 0
	StatusNullParameter       Status = 1
	StatusPanic               Status = 2
	StatusInvalidEnum         Status = 3
	StatusBufferTooShort      Status = 4
	StatusInvalidUTF8         Status = 5
	StatusNotInitialized      Status = 6
	StatusRateTooHigh         Status = 7
	StatusBurstTooLarge       Status = 8
	StatusRetriesExceedLadder Status = 9
	// StatusInvalidTicket: a booking presented to pacer_redeem holds no
	// live ticket (already redeemed, released, or never booked).
	StatusInvalidTicket Status = 25
	// StatusMisaligned: a pointer argument was not aligned for its type.
	StatusMisaligned Status = 26
	// StatusForeignTicket: a ticket or booking was issued by another
	// pacer (its owner tag is not this pacer's); nothing changed.
	StatusForeignTicket Status = 27
	// StatusAdaptiveRange: adaptive pacing is on with a floor above the
	// rate, or a ceiling (not 0) below the rate or above 600.
	StatusAdaptiveRange Status = 28
)

// String is the library's description (pacer_status_str); unknown codes
// read "unknown status".
func (s Status) String() string { return statusText(uint32(s)) }

func (s Status) Error() string { return "pacer: " + s.String() }

// CallError is a failed C call: which one, and its Status.
type CallError struct {
	Op     string // e.g. "pacer_reserve"
	Status Status
}

func (e *CallError) Error() string {
	return fmt.Sprintf("pacer: %s: %s (status %d)", e.Op, e.Status.String(), uint32(e.Status))
}

// Unwrap makes errors.Is(err, e.Status) true.
func (e *CallError) Unwrap() error { return e.Status }

// statusErr is nil for PACER_STATUS_OK, else a *CallError.
func statusErr(op string, code uint32) error {
	if code == uint32(StatusOK) {
		return nil
	}
	return &CallError{Op: op, Status: Status(code)}
}
