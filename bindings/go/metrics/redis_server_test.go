package metrics_test

// A real redis-server for the RedisPacer source's tests: on a free
// loopback port, in a temporary directory, with no persistence and no
// module (the RedisPacer finds no module and no function library, and
// loads its script), killed when its test ends (and, through the
// parent-death signal, if the test binary dies first). As the package
// pacer's tests do (../redis_server_test.go).

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

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

// startRedis starts a server and returns its host:port; it is killed when
// t ends.
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is required (bash scripts/redis-deps.sh installs it): %v", err)
	}
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	// Polls until the server answers (how long it takes to start is not
	// what is tested: no result depends on it).
	for range 500 {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server exited at start:\n%s", log)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return addr
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("redis-server on %s never answered PING", addr)
	return ""
}
