// Package redistest runs real redis-servers for the tests of this module's
// packages: each on a free loopback port, in a temporary directory, with no
// persistence, killed when its test ends (and, through the parent-death
// signal, if the test binary dies first). Internal: not part of the API.
package redistest

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

// Server is one redis-server process a test controls.
type Server struct {
	Dir    string
	Port   int
	Module string   // the module's path, or "" for a server without it
	Extra  []string // more arguments for redis-server
	cmd    *exec.Cmd
	done   chan struct{}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// FreePort is a loopback port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

// Start starts a server (with the module when module is not "") and kills
// it when t ends.
func Start(t testing.TB, module string, extra ...string) *Server {
	t.Helper()
	s := &Server{Dir: t.TempDir(), Port: FreePort(t), Module: module, Extra: extra}
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartOutsideTest starts a server in a new temporary directory on a free
// port, for a TestMain; stop it with Kill, then remove Dir.
func StartOutsideTest(module string) (*Server, error) {
	dir, err := os.MkdirTemp("", "pacer-go-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Dir: dir, Port: port, Module: module}
	if err := s.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Run starts the server on s.Port and waits until it answers PING (how
// long that takes is not what any test measures).
func (s *Server) Run() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("redis-server is required (bash scripts/redis-deps.sh installs it): %w", err)
	}
	args := []string{
		"--port", fmt.Sprint(s.Port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.Dir, "redis.log"),
	}
	if s.Module != "" {
		args = append(args, "--loadmodule", s.Module)
	}
	args = append(args, s.Extra...)
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
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server exited at start:\n%s", log)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on port %d never answered PING", s.Port)
}

// Kill SIGKILLs the server and waits for it to end.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Client is a control connection to the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
