package pacer_test

// Loopback servers for the tests: a fake Redis speaking just enough RESP2
// to give replies no real server gives on demand, and a proxy in front of
// a real server that can hold its replies. Every connection is closed, and
// every goroutine ended, when the test ends.

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

// loopback accepts connections on a loopback port and serves each in a
// goroutine of its own until the test ends.
type loopback struct {
	l     net.Listener
	done  chan struct{} // closed when the test ends
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func listenLoopback(t *testing.T) *loopback {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &loopback{l: l, done: make(chan struct{})}
	t.Cleanup(lb.close)
	return lb
}

// accept starts serving the connections that come.
func (lb *loopback) accept(serve func(net.Conn)) {
	lb.spawn(func() {
		for {
			c, err := lb.l.Accept()
			if err != nil || !lb.track(c) {
				return
			}
			lb.spawn(func() { serve(c) })
		}
	})
}

func (lb *loopback) Addr() string { return lb.l.Addr().String() }

// spawn runs f in a goroutine the end of the test waits for.
func (lb *loopback) spawn(f func()) {
	lb.wg.Go(f)
}

// track keeps c to close at the end; false (c closed) once ended.
func (lb *loopback) track(c net.Conn) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	select {
	case <-lb.done:
		_ = c.Close()
		return false
	default:
	}
	lb.conns = append(lb.conns, c)
	return true
}

func (lb *loopback) close() {
	lb.mu.Lock()
	close(lb.done)
	for _, c := range lb.conns {
		_ = c.Close()
	}
	lb.mu.Unlock()
	_ = lb.l.Close()
	lb.wg.Wait()
}

// fakeRedis gives each command (an array of bulk strings) to the test's
// answer function, which returns the raw reply to write, or "" to leave
// it unanswered; a nil answer leaves every command unanswered (a server
// that accepts and never replies). HELLO and CLIENT are refused, as an
// old server does, so the client speaks RESP2.
type fakeRedis struct {
	*loopback
	answer func(cmd []string) string

	mu   sync.Mutex
	seen [][]string
}

func startFakeRedis(t *testing.T, answer func(cmd []string) string) *fakeRedis {
	t.Helper()
	f := &fakeRedis{loopback: listenLoopback(t), answer: answer}
	f.accept(f.serve)
	return f
}

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

func (f *fakeRedis) serve(c net.Conn) {
	rd := bufio.NewReader(c)
	for {
		cmd, err := readCommand(rd)
		if err != nil {
			return
		}
		var reply string
		switch {
		case f.answer == nil:
		case len(cmd) > 0 && (strings.EqualFold(cmd[0], "HELLO") || strings.EqualFold(cmd[0], "CLIENT")):
			reply = "-ERR unknown command '" + cmd[0] + "'\r\n"
		default:
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

// holdProxy passes bytes between its clients and a real server, and can
// hold the server's replies: after hold, a request that passes is
// announced on sent and every reply waits until letGo (or the end of the
// test).
type holdProxy struct {
	*loopback
	upstream string
	sent     chan struct{}

	mu      sync.Mutex
	holding bool
	gate    chan struct{} // closed by letGo
}

func startHoldProxy(t *testing.T, upstream string) *holdProxy {
	t.Helper()
	p := &holdProxy{loopback: listenLoopback(t), upstream: upstream, sent: make(chan struct{}, 1)}
	p.accept(p.serve)
	return p
}

// hold makes the replies from now on wait for letGo.
func (p *holdProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding, p.gate = true, make(chan struct{})
}

// letGo passes the held replies and stops holding.
func (p *holdProxy) letGo() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holding {
		p.holding = false
		close(p.gate)
	}
}

// gateNow is the gate a reply waits for now, or nil.
func (p *holdProxy) gateNow() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.holding {
		return nil
	}
	return p.gate
}

func (p *holdProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.upstream)
	if err != nil || !p.track(server) {
		_ = client.Close()
		return
	}
	p.spawn(func() { p.pipe(server, client, false) })
	p.pipe(client, server, true)
}

// pipe copies from src to dst until either ends; replies (server to
// client) wait at the gate while the proxy holds.
func (p *holdProxy) pipe(dst, src net.Conn, replies bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			gate := p.gateNow()
			if gate != nil && replies {
				select {
				case <-gate:
				case <-p.done:
					return
				}
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
			if gate != nil && !replies {
				select {
				case p.sent <- struct{}{}:
				default:
				}
			}
		}
		if err != nil {
			return
		}
	}
}
