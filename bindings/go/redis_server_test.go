package pacer_test

// Real redis-servers for the RedisPacer tests (internal/redistest): each
// on a free loopback port, in a temporary directory, with no persistence,
// killed when its test ends (and, through the parent-death signal, if the
// test binary dies first).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/connpacer/pacer/bindings/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisServer is one redis-server process the tests control
// (internal/redistest, shared with the metrics package's tests).
type redisServer struct{ *redistest.Server }

// moduleOrSkip is the module's path from PACER_REDIS_MODULE, or skips
// the test when it is not set.
func moduleOrSkip(t *testing.T) string {
	t.Helper()
	path := os.Getenv("PACER_REDIS_MODULE")
	if path == "" {
		t.Skip("PACER_REDIS_MODULE is not set (scripts/test-go.sh builds and sets it)")
	}
	return path
}

// freePort is a loopback port nothing listens on now.
func freePort(t testing.TB) int { return redistest.FreePort(t) }

// startRedis starts a server (with the module when module is not "") and
// kills it when t ends.
func startRedis(t testing.TB, module string, extra ...string) *redisServer {
	t.Helper()
	return &redisServer{redistest.Start(t, module, extra...)}
}

// kill SIGKILLs the server and waits for it to end.
func (s *redisServer) kill() { s.Kill() }

// restart starts the server again on the same port (and directory).
func (s *redisServer) restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
}

// client is a control connection to the server, closed when t ends.
func (s *redisServer) client(t testing.TB) *redis.Client { return s.Client(t) }

// loadFunction loads pacer.lua as the function library, as docs/redis.md
// tells operators.
func (s *redisServer) loadFunction(t testing.TB) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "redis", "pacer.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.client(t).Do(context.Background(), "FUNCTION", "LOAD", "REPLACE", "#!lua name=pacer\n"+string(src)).Err(); err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
}

// TestMain starts the server the runnable examples use (REDIS_URL),
// with the module when PACER_REDIS_MODULE names it, and kills it after
// every test and example has run. Without redis-server it starts none:
// the tests that need one fail, saying so, and the others run.
func TestMain(m *testing.M) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "TestMain: no redis-server (bash scripts/redis-deps.sh installs it); RedisPacer's tests will fail")
		os.Exit(m.Run())
	}
	s, err := redistest.StartOutsideTest(os.Getenv("PACER_REDIS_MODULE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		os.Exit(1)
	}
	_ = os.Setenv("REDIS_URL", "redis://"+s.Addr())
	// go-redis logs each failed dial; the outage tests make many.
	redis.SetLogger(quietRedisLogger{})
	code := m.Run()
	s.Kill()
	_ = os.RemoveAll(s.Dir)
	os.Exit(code)
}

// quietRedisLogger drops go-redis's own log lines.
type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}
