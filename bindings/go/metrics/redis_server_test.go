package metrics_test

// A real redis-server for the RedisPacer source's tests: on a free
// loopback port, in a temporary directory, with no persistence and no
// module (the RedisPacer finds no module and no function library, and
// loads its script), killed when its test ends (and, through the
// parent-death signal, if the test binary dies first). Started by
// internal/redistest, as the package pacer's tests are.

import (
	"testing"

	"github.com/connpacer/pacer/bindings/go/internal/redistest"
)

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int { return redistest.FreePort(t) }

// startRedis starts a server and returns its host:port; it is killed when
// t ends.
func startRedis(t *testing.T) string {
	t.Helper()
	return redistest.Start(t, "").Addr()
}
