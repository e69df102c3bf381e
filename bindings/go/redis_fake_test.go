package pacer_test

// A loopback server that speaks just enough RESP2 for the tests that need
// replies no real server gives on demand: canned answers, a reply of a
// shape the client does not know, a command never answered. Each command
// (an array of bulk strings) goes to the test's answer function, which
// returns the raw reply to write, or "" to leave it unanswered. HELLO and
// CLIENT are refused, as an old server does, so the client speaks RESP2.
// Every connection is closed, and every goroutine ended, when the test
// ends.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

type fakeRedis struct {
	l      net.Listener
	answer func(cmd []string) string

	mu    sync.Mutex
	conns []net.Conn
	seen  [][]string
	wg    sync.WaitGroup
}

// startFakeRedis listens on a loopback port until t ends.
func startFakeRedis(t *testing.T, answer func(cmd []string) string) *fakeRedis {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{l: l, answer: answer}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *fakeRedis) Addr() string { return f.l.Addr().String() }

// commands is every command received so far (HELLO and CLIENT left out).
func (f *fakeRedis) commands() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.seen...)
}

// count is how many commands received so far start with name.
func (f *fakeRedis) count(name string) int {
	n := 0
	for _, cmd := range f.commands() {
		if len(cmd) > 0 && strings.EqualFold(cmd[0], name) {
			n++
		}
	}
	return n
}

func (f *fakeRedis) accept() {
	defer f.wg.Done()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *fakeRedis) serve(c net.Conn) {
	defer f.wg.Done()
	rd := bufio.NewReader(c)
	for {
		cmd, err := readCommand(rd)
		if err != nil {
			return
		}
		var reply string
		if len(cmd) > 0 && (strings.EqualFold(cmd[0], "HELLO") || strings.EqualFold(cmd[0], "CLIENT")) {
			reply = "-ERR unknown command '" + cmd[0] + "'\r\n"
		} else {
			f.mu.Lock()
			f.seen = append(f.seen, cmd)
			f.mu.Unlock()
			reply = f.answer(cmd)
		}
		if reply == "" {
			continue // never answered
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

func (f *fakeRedis) close() {
	_ = f.l.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// readCommand reads one RESP array of bulk strings.
func readCommand(rd *bufio.Reader) ([]string, error) {
	n, err := readHeader(rd, '*')
	if err != nil {
		return nil, err
	}
	cmd := make([]string, 0, n)
	for range n {
		size, err := readHeader(rd, '$')
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		cmd = append(cmd, string(buf[:size]))
	}
	return cmd, nil
}

func readHeader(rd *bufio.Reader, kind byte) (int, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimRight(line, "\r\n")
	if len(line) < 2 || line[0] != kind {
		return 0, fmt.Errorf("fake redis: expected %q, got %q", kind, line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("fake redis: bad length in %q", line)
	}
	return n, nil
}

// RESP2 replies.
func respBulk(s string) string  { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }
func respInt(n int64) string    { return ":" + strconv.FormatInt(n, 10) + "\r\n" }
func respError(s string) string { return "-" + s + "\r\n" }
func respArray(items ...string) string {
	return "*" + strconv.Itoa(len(items)) + "\r\n" + strings.Join(items, "")
}

const respNil = "$-1\r\n"
