package pacer_test

// Real redis-servers for the RedisPacer tests: each on a free loopback
// port, in a temporary directory, with no persistence, killed when its
// test ends (and, through the parent-death signal, if the test binary
// dies first).

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is one redis-server process the tests control.
type redisServer struct {
	dir    string
	port   int
	module string   // the module's path, or "" for a server without it
	extra  []string // more arguments for redis-server
	cmd    *exec.Cmd
	done   chan struct{}
}

// Addr is the server's host:port.
func (s *redisServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

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
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

// startRedis starts a server (with the module when module is not "") and
// kills it when t ends.
func startRedis(t testing.TB, module string, extra ...string) *redisServer {
	t.Helper()
	s := &redisServer{dir: t.TempDir(), port: freePort(t), module: module, extra: extra}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

// start runs the server on s.port and waits until it answers PING.
func (s *redisServer) start() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("redis-server is required (bash scripts/redis-deps.sh installs it): %w", err)
	}
	args := []string{
		"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if s.module != "" {
		args = append(args, "--loadmodule", s.module)
	}
	args = append(args, s.extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	for range 500 {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited at start:\n%s", log)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on port %d never answered PING", s.port)
}

// kill SIGKILLs the server and waits for it to end.
func (s *redisServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// restart starts the server again on the same port (and directory).
func (s *redisServer) restart(t testing.TB) {
	t.Helper()
	s.kill()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// client is a control connection to the server, closed when t ends.
func (s *redisServer) client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

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
	s := &redisServer{port: 0, module: os.Getenv("PACER_REDIS_MODULE")}
	dir, err := os.MkdirTemp("", "pacer-go-redis-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s.dir = dir
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	if err := s.start(); err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	_ = os.Setenv("REDIS_URL", "redis://"+s.Addr())
	// go-redis logs each failed dial; the outage tests make many.
	redis.SetLogger(quietRedisLogger{})
	code := m.Run()
	s.kill()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// quietRedisLogger drops go-redis's own log lines.
type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}
