package pacer

import (
	"context"
	"strings"
)

// The pacer_status codes of shared pacers (include/pacer.h).
const (
	StatusSharedUnsupported    Status = 10 // 128-bit atomics not lock-free here, or layout
	StatusSharedOS             Status = 11 // a system call failed (the error wraps its syscall.Errno)
	StatusSharedInvalidName    Status = 12 // empty, ".", "..", or too long
	StatusSharedSymlink        Status = 13 // the path is a symbolic link
	StatusSharedNotRegular     Status = 14 // the path is not a regular file
	StatusSharedWrongOwner     Status = 15 // the file belongs to another user
	StatusSharedPermissions    Status = 16 // the file is accessible to group or others
	StatusSharedTruncated      Status = 17 // the file's size is not the layout's
	StatusSharedForeign        Status = 18 // not a shared pacer (bad magic)
	StatusSharedLayoutVersion  Status = 19 // another file layout
	StatusSharedABIVersion     Status = 20 // made by another ABI version
	StatusSharedIncomplete     Status = 21 // never completely initialised
	StatusSharedConfigMismatch Status = 22 // the file holds a different Config
	StatusSharedNotOpen        Status = 23 // the handle is not open
	StatusSharedNotFound       Status = 24 // no such file
)

// SharedPacer is a pacer whose bucket lives in a shared-memory file, so
// every process on the machine that opens the same name paces against one
// bucket. Its calls take no clock: they all read SharedClockMs, the clock
// every process shares. Otherwise it behaves as Pacer (and is safe for
// concurrent use), bookings included (AdmitKey, Forget, ReserveOrBook,
// Redeem): the line of booked slots is the bucket's, machine-wide, while
// keys, tickets and bookings are this handle's.
type SharedPacer struct {
	p *Pacer
}

// OpenShared opens the shared pacer pathOrName, creating it (mode 0600,
// full) if it does not exist. A name without '/' lives in /dev/shm;
// anything with a '/' is a path. cfg must equal the Config of the
// processes already sharing it (else StatusSharedConfigMismatch), and
// cfg.Clock must be nil: a shared pacer always reads SharedClockMs. An
// existing file is checked first (owner, mode 0600, no symlink, layout,
// versions, size): see the Status values above; errors.Is works on them.
func OpenShared(pathOrName string, cfg Config) (*SharedPacer, error) {
	if err := checkABI(); err != nil {
		return nil, err
	}
	if cfg.Clock != nil {
		return nil, configError("Clock", "a function",
			"must be nil for a shared pacer: every process sharing it reads SharedClockMs")
	}
	if pathOrName == "" || strings.IndexByte(pathOrName, 0) >= 0 {
		return nil, inputError("pathOrName", pathOrName, "must be a non-empty name or path without NUL bytes")
	}
	cc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	p := newPacer(cfg, SharedClockMs)
	mem, err := openSharedStorage(pathOrName, cc)
	if err != nil {
		return nil, err
	}
	if err := p.attach(mem, cc); err != nil {
		return nil, err
	}
	return &SharedPacer{p: p}, nil
}

// UnlinkShared removes the shared pacer's name. Processes that have it open
// keep their bucket; the next OpenShared creates a new, full one.
// StatusSharedNotFound if there is no such file.
func UnlinkShared(pathOrName string) error {
	if pathOrName == "" || strings.IndexByte(pathOrName, 0) >= 0 {
		return inputError("pathOrName", pathOrName, "must be a non-empty name or path without NUL bytes")
	}
	return unlinkShared(pathOrName)
}

// Reserve decides now (at SharedClockMs) without waiting; see Pacer.Reserve.
func (s *SharedPacer) Reserve() (Decision, error) {
	if s == nil {
		return Decision{}, ErrClosed
	}
	return s.p.Reserve(SharedClockMs())
}

// Release refunds an admission that will not open its connection; see
// Pacer.Release (it works after Close too). A ticket releases only through
// the SharedPacer that issued it.
func (s *SharedPacer) Release(t *Ticket) (bool, error) {
	if s == nil {
		return false, ErrClosed
	}
	return s.p.Release(t, SharedClockMs())
}

// Admit waits for permission to open one new connection; see Pacer.Admit.
func (s *SharedPacer) Admit(ctx context.Context) (Admission, error) {
	if s == nil {
		return Admission{}, ErrClosed
	}
	return s.p.Admit(ctx)
}

// ReserveOrBook is Reserve, except that a refusal whose wait fits the
// horizon of the request's retriesLeft retries books a place in the
// bucket's machine-wide line (pacer_shared_reserve_or_book, at the shared
// clock); see Pacer.ReserveOrBook. Booking.SlotMs is on SharedClockMs.
// Redeem the booking through this SharedPacer, or release its ticket
// (Release) if the request ends without redeeming it.
func (s *SharedPacer) ReserveOrBook(retriesLeft uint32) (BookingDecision, error) {
	if s == nil {
		return BookingDecision{}, ErrClosed
	}
	return s.p.ReserveOrBook(SharedClockMs(), retriesLeft)
}

// Redeem presents a booking on the request's retry (pacer_shared_redeem, at
// the shared clock); see Pacer.Redeem. A booking made through another
// SharedPacer (even on the same bucket) or another pacer returns
// ErrInvalidInput and changes nothing, as a ticket releases only through
// the handle that issued it.
func (s *SharedPacer) Redeem(b *Booking) (Decision, error) {
	if s == nil {
		return Decision{}, ErrClosed
	}
	return s.p.Redeem(b, SharedClockMs())
}

// AdmitKey is Admit for a request that may come back, keyed by its
// identity; see Pacer.AdmitKey. Its first refusal within the horizon books
// a place in the bucket's machine-wide line, so the slots of every process
// sharing the bucket stay in one FIFO order; the key's retry redeems it.
// Keys are this SharedPacer's: another handle or process does not see
// them.
func (s *SharedPacer) AdmitKey(ctx context.Context, key string) (Admission, error) {
	if s == nil {
		return Admission{}, ErrClosed
	}
	return s.p.AdmitKey(ctx, key)
}

// Forget gives back what the keyed request holds when it ends without
// being admitted: its booking goes back to the machine-wide bucket
// (pacer_shared_release) and the key is forgotten; see Pacer.Forget. It
// works after Close too.
func (s *SharedPacer) Forget(key string) (bool, error) {
	if s == nil {
		return false, ErrClosed
	}
	return s.p.Forget(key)
}

// PendingKeys is how many keys this SharedPacer's AdmitKey refused that
// were neither admitted since nor forgotten.
func (s *SharedPacer) PendingKeys() int {
	if s == nil {
		return 0
	}
	return s.p.PendingKeys()
}

// Observe reports what the upstream answered to a new connection, at the
// shared clock (pacer_shared_observe); see Pacer.Observe. The rate in force
// is the bucket's, machine-wide: a throttle reported through one handle,
// in any process, slows every process on the bucket.
func (s *SharedPacer) Observe(outcome Outcome) (int, error) {
	if s == nil {
		return 0, ErrClosed
	}
	return s.p.Observe(outcome, SharedClockMs())
}

// RateInForce is the bucket's rate in force at the shared clock
// (pacer_shared_rate_in_force); see Pacer.RateInForce.
func (s *SharedPacer) RateInForce() (int, error) {
	if s == nil {
		return 0, ErrClosed
	}
	return s.p.RateInForce(SharedClockMs())
}

// Counters reads the bucket's counts: every call through any handle on
// the same bucket, in this process or another, counts in its file
// (docs/metrics.md, "Whose counts"), and every handle reads the same
// counts. A fresh handle on a bucket already used reads what was counted
// before it opened.
func (s *SharedPacer) Counters() (Counters, error) {
	if s == nil {
		return Counters{}, ErrClosed
	}
	return s.p.Counters()
}

// Level is the bucket's tokens at the shared clock, in units; see
// Pacer.LevelAt.
func (s *SharedPacer) Level() (int64, error) {
	if s == nil {
		return 0, ErrClosed
	}
	return s.p.LevelAt(SharedClockMs())
}

// Info reads the parameters and the machine-wide state; see Pacer.Info.
func (s *SharedPacer) Info() (Info, error) {
	if s == nil {
		return Info{}, ErrClosed
	}
	return s.p.Info()
}

// Config is the configuration the pacer was opened with.
func (s *SharedPacer) Config() Config { return s.p.Config() }

// Mode is how the pacer treats overflow.
func (s *SharedPacer) Mode() Mode { return s.p.Mode() }

// WaitBoundMs is the longest wait an admission is given, ms.
func (s *SharedPacer) WaitBoundMs() uint64 { return s.p.WaitBoundMs() }

// Close closes this handle (the file and the bucket stay) as Pacer.Close
// does: calls that would admit or read return ErrClosed, a waiting Admit or
// AdmitKey wakes and gives its slot back to the bucket (ErrClosed), and
// Release of a ticket or Forget of a key booked before Close still
// refunds. Close is idempotent. The view is unmapped once the SharedPacer
// is unreachable, as a Pacer's storage is freed.
func (s *SharedPacer) Close() error {
	if s == nil {
		return nil
	}
	return s.p.Close()
}
