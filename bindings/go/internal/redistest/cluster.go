package redistest

// A Redis Cluster of six real redis-servers (three primaries, each with a
// replica) for the tests: free loopback ports (the client port and the
// cluster bus port both chosen free), a temporary directory per node, no
// persistence, created with redis-cli --cluster create, and every process
// killed when the test ends.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodeTimeoutMs is the nodes' cluster-node-timeout.
const ClusterNodeTimeoutMs = 2000

// clusterDeadline bounds each wait for the cluster to agree (generous: a
// busy machine is slow, and the wait polls, so a fast one is not).
const clusterDeadline = 60 * time.Second

// Cluster is a running Redis Cluster a test controls. Its helpers fail
// the test it was started or last handed to (In).
type Cluster struct {
	Nodes []*Server // all six, in the order they were started
	t     testing.TB
	conns *conns
}

// conns are the control connections, one per node.
type conns struct {
	mu      sync.Mutex
	clients map[*Server]*redis.Client
}

// In is the cluster with helpers that fail t (a subtest of the one that
// started it).
func (c *Cluster) In(t testing.TB) *Cluster {
	return &Cluster{Nodes: c.Nodes, t: t, conns: c.conns}
}

// ClusterConfig says how the nodes start.
type ClusterConfig struct {
	// Module is loaded on every node, or on none when "".
	Module string
	// WithoutModule is the index (0..2, a node created as a primary) of a
	// node started without the module; -1 for none.
	WithoutModule int
}

// StartCluster starts six nodes, makes them a cluster of three primaries
// (Nodes[0..2] at creation) and three replicas, waits until every node
// says cluster_state:ok and agrees on the slots, and kills every node when
// t ends (the directories go with t.TempDir).
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is required (bash scripts/redis-deps.sh installs it): %v", err)
	}
	began := time.Now()
	c := &Cluster{t: t, conns: &conns{clients: map[*Server]*redis.Client{}}}
	t.Cleanup(func() {
		for _, cl := range c.conns.clients {
			_ = cl.Close()
		}
		for _, s := range c.Nodes {
			s.Kill()
		}
	})
	root := t.TempDir()
	used := map[int]bool{}
	free := func() int {
		for {
			p := FreePort(t)
			if !used[p] && !used[p+10000] && p+10000 < 65536 {
				used[p] = true
				return p
			}
		}
	}
	for i := range 6 {
		dir := filepath.Join(root, fmt.Sprintf("node%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		port, bus := free(), free()
		module := cfg.Module
		if i == cfg.WithoutModule {
			module = ""
		}
		s := &Server{Dir: dir, Port: port, Module: module, Extra: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(ClusterNodeTimeoutMs),
			"--cluster-port", strconv.Itoa(bus),
		}}
		if err := s.Run(); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterDeadline)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK()
	for i, s := range c.Nodes[:3] {
		if !c.IsPrimary(s) {
			t.Fatalf("node %d (%s) is not a primary after --cluster create", i, s.Addr())
		}
	}
	t.Logf("cluster of %d nodes up in %v", len(c.Nodes), time.Since(began).Round(10*time.Millisecond))
	return c
}

// Addrs are the nodes' host:port addresses (the seeds a client is given).
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client is a plain (non-cluster) control connection to s, closed when
// the cluster's test ends.
func (c *Cluster) Client(s *Server) *redis.Client {
	c.conns.mu.Lock()
	defer c.conns.mu.Unlock()
	cl := c.conns.clients[s]
	if cl == nil {
		cl = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		c.conns.clients[s] = cl
	}
	return cl
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr  string
	primary   bool
	primaryOf string // for a replica, its primary's id
	slots     [][2]int
	fail      bool
	flags     string
}

// nodes parses CLUSTER NODES as s sees it.
func (c *Cluster) nodes(ctx context.Context, s *Server) ([]node, error) {
	text, err := c.Client(s).ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []node
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := node{id: f[0], addr: addr, primary: strings.Contains(f[2], "master"),
			fail: strings.Contains(f[2], "fail"), flags: f[2]}
		if f[3] != "-" {
			n.primaryOf = f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, ranged := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("CLUSTER NODES slot %q", r)
			}
			b := a
			if ranged {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("CLUSTER NODES slot %q", r)
				}
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// view is a node's picture of the cluster: the owner's address of each
// range of slots, and each replica's primary's address.
func view(nodes []node) string {
	byID := map[string]string{}
	for _, n := range nodes {
		byID[n.id] = n.addr
	}
	var lines []string
	for _, n := range nodes {
		if n.fail {
			lines = append(lines, n.addr+" "+n.flags)
		}
		for _, r := range n.slots {
			lines = append(lines, fmt.Sprintf("%05d-%05d %s", r[0], r[1], n.addr))
		}
		if !n.primary {
			lines = append(lines, n.addr+" replica of "+byID[n.primaryOf])
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// WaitOK polls every node until each says cluster_state:ok, every slot is
// assigned, all have the same picture of the slots' owners and the
// replicas' primaries, and every replica's link to its primary is up
// (failing the test after a generous deadline).
func (c *Cluster) WaitOK() {
	c.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(clusterDeadline)
	var last error
	for time.Now().Before(deadline) {
		if last = c.agreed(ctx); last == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("the cluster did not settle within %v: %v", clusterDeadline, last)
}

func (c *Cluster) agreed(ctx context.Context) error {
	first := ""
	for _, s := range c.Nodes {
		info, err := c.Client(s).ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		nodes, err := c.nodes(ctx, s)
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			var state []string
			for line := range strings.SplitSeq(info, "\n") {
				if strings.HasPrefix(line, "cluster_state") || strings.HasPrefix(line, "cluster_slots_") {
					state = append(state, strings.TrimSpace(line))
				}
			}
			return fmt.Errorf("%s: not ok yet: %s; it sees\n%s", s.Addr(), strings.Join(state, " "), view(nodes))
		}
		if len(nodes) != len(c.Nodes) {
			return fmt.Errorf("%s knows %d nodes", s.Addr(), len(nodes))
		}
		for _, n := range nodes {
			if n.addr == s.Addr() && !n.primary {
				repl, err := c.Client(s).Info(ctx, "replication").Result()
				if err != nil {
					return err
				}
				if !strings.Contains(repl, "master_link_status:up") {
					return fmt.Errorf("%s: its link to its primary is not up", s.Addr())
				}
			}
		}
		v := view(nodes)
		if first == "" {
			first = v
		} else if v != first {
			return fmt.Errorf("%s sees\n%s\nwhere %s sees\n%s", s.Addr(), v, c.Nodes[0].Addr(), first)
		}
	}
	return nil
}

// server is the node at addr.
func (c *Cluster) server(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	c.t.Fatalf("no node at %s", addr)
	return nil
}

// self is s's own line of CLUSTER NODES.
func (c *Cluster) self(s *Server) node {
	c.t.Helper()
	nodes, err := c.nodes(context.Background(), s)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, n := range nodes {
		if n.addr == s.Addr() {
			return n
		}
	}
	c.t.Fatalf("%s is not in its own CLUSTER NODES", s.Addr())
	return node{}
}

// IsPrimary reports whether s says it is a primary.
func (c *Cluster) IsPrimary(s *Server) bool {
	c.t.Helper()
	return c.self(s).primary
}

// Primaries are the nodes that are primaries now, in Nodes' order.
func (c *Cluster) Primaries() []*Server {
	c.t.Helper()
	var out []*Server
	for _, s := range c.Nodes {
		if c.IsPrimary(s) {
			out = append(out, s)
		}
	}
	return out
}

// Slot is key's hash slot (CLUSTER KEYSLOT, asked of a node).
func (c *Cluster) Slot(key string) int {
	c.t.Helper()
	slot, err := c.Client(c.Nodes[0]).ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return int(slot)
}

// SlotOwner is the primary that owns slot, as a primary's CLUSTER NODES
// says (call WaitOK first after a change).
func (c *Cluster) SlotOwner(slot int) *Server {
	c.t.Helper()
	nodes, err := c.nodes(context.Background(), c.Primaries()[0])
	if err != nil {
		c.t.Fatal(err)
	}
	for _, n := range nodes {
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return c.server(n.addr)
			}
		}
	}
	c.t.Fatalf("no node owns slot %d", slot)
	return nil
}

// Owner is the primary that owns key's slot.
func (c *Cluster) Owner(key string) *Server {
	c.t.Helper()
	return c.SlotOwner(c.Slot(key))
}

// KeysIn is how many keys s holds in slot (CLUSTER COUNTKEYSINSLOT).
func (c *Cluster) KeysIn(s *Server, slot int) int64 {
	c.t.Helper()
	n, err := c.Client(s).ClusterCountKeysInSlot(context.Background(), slot).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// Info is the key's INFO as its owner answers it (a map of the flat
// name/value reply), read with PACER.INFO where the owner has the module,
// else FCALL pacer … info where it has the function library, else EVAL
// of script (redis/pacer.lua's text).
func (c *Cluster) Info(key, script string) map[string]any {
	c.t.Helper()
	ctx := context.Background()
	owner := c.Client(c.Owner(key))
	reply, err := owner.Do(ctx, "PACER.INFO", key).Result()
	if err != nil && strings.HasPrefix(err.Error(), "ERR unknown command") {
		reply, err = owner.Do(ctx, "FCALL", "pacer", 1, key, "info").Result()
		if err != nil && strings.HasPrefix(err.Error(), "ERR Function not found") {
			reply, err = owner.Do(ctx, "EVAL", script, 1, key, "info").Result()
		}
	}
	if err != nil {
		c.t.Fatalf("INFO of %s on its owner %s: %v", key, c.Owner(key).Addr(), err)
	}
	flat, ok := reply.([]any)
	if !ok || len(flat)%2 != 0 {
		c.t.Fatalf("INFO of %s: %v", key, reply)
	}
	out := map[string]any{}
	for i := 0; i < len(flat); i += 2 {
		out[fmt.Sprint(flat[i])] = flat[i+1]
	}
	return out
}

// id is s's node id.
func (c *Cluster) id(s *Server) string {
	c.t.Helper()
	return c.self(s).id
}

// BeginMove starts moving slot from its owner to dst: IMPORTING on dst,
// MIGRATING on the owner, then MIGRATE of every key the slot holds to
// dst. The slot stays the owner's: a command on one of its keys there now
// answers ASK (the key is gone from it). FinishMove ends it.
func (c *Cluster) BeginMove(slot int, dst *Server) (src *Server) {
	c.t.Helper()
	ctx := context.Background()
	src = c.SlotOwner(slot)
	if src == dst {
		c.t.Fatalf("slot %d is already %s's", slot, dst.Addr())
	}
	srcC, dstC := c.Client(src), c.Client(dst)
	if err := dstC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.id(src)).Err(); err != nil {
		c.t.Fatalf("SETSLOT IMPORTING: %v", err)
	}
	if err := srcC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.id(dst)).Err(); err != nil {
		c.t.Fatalf("SETSLOT MIGRATING: %v", err)
	}
	for {
		keys, err := srcC.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			c.t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.Port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := srcC.Do(ctx, args...).Err(); err != nil {
			c.t.Fatalf("MIGRATE: %v", err)
		}
	}
	return src
}

// FinishMove gives slot to dst on every primary (dst first, then the
// source, then the others) and waits until the cluster agrees.
func (c *Cluster) FinishMove(slot int, src, dst *Server) {
	c.t.Helper()
	ctx := context.Background()
	order := []*Server{dst, src}
	for _, p := range c.Primaries() {
		if p != dst && p != src {
			order = append(order, p)
		}
	}
	dstID := c.id(dst)
	for _, p := range order {
		if err := c.Client(p).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			c.t.Fatalf("SETSLOT NODE on %s: %v", p.Addr(), err)
		}
	}
	c.WaitOK()
	if got := c.SlotOwner(slot); got != dst {
		c.t.Fatalf("slot %d is %s's after the move, not %s's", slot, got.Addr(), dst.Addr())
	}
}

// MoveSlot moves slot (and its keys) to dst.
func (c *Cluster) MoveSlot(slot int, dst *Server) {
	c.t.Helper()
	src := c.BeginMove(slot, dst)
	c.FinishMove(slot, src, dst)
}

// ReplicaOf is primary's replica.
func (c *Cluster) ReplicaOf(primary *Server) *Server {
	c.t.Helper()
	nodes, err := c.nodes(context.Background(), primary)
	if err != nil {
		c.t.Fatal(err)
	}
	id := c.id(primary)
	for _, n := range nodes {
		if n.primaryOf == id {
			return c.server(n.addr)
		}
	}
	c.t.Fatalf("%s has no replica", primary.Addr())
	return nil
}

// Failover makes primary's replica the primary: WAIT 1 1000 on the
// primary (the replica has its writes), CLUSTER FAILOVER on the replica,
// then polls until the roles changed and the cluster agrees. It returns
// the new primary.
func (c *Cluster) Failover(primary *Server) *Server {
	c.t.Helper()
	ctx := context.Background()
	replica := c.ReplicaOf(primary)
	acked, err := c.Client(primary).Do(ctx, "WAIT", 1, 1000).Int()
	if err != nil || acked < 1 {
		c.t.Fatalf("WAIT 1 1000 on %s: %d, %v", primary.Addr(), acked, err)
	}
	if err := c.Client(replica).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		c.t.Fatalf("CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
	}
	deadline := time.Now().Add(clusterDeadline)
	for !(c.IsPrimary(replica) && !c.IsPrimary(primary)) {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s did not become the primary of %s within %v", replica.Addr(), primary.Addr(), clusterDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.WaitOK()
	return replica
}

// LoadFunction loads src (redis/pacer.lua's text) as the function library
// pacer on every primary.
func (c *Cluster) LoadFunction(src string) {
	c.t.Helper()
	for _, p := range c.Primaries() {
		if err := c.Client(p).FunctionLoadReplace(context.Background(), "#!lua name=pacer\n"+src).Err(); err != nil {
			c.t.Fatalf("FUNCTION LOAD on %s: %v", p.Addr(), err)
		}
	}
}

// DeleteFunction deletes the function library pacer from every node that
// has it.
func (c *Cluster) DeleteFunction() {
	c.t.Helper()
	for _, p := range c.Primaries() {
		err := c.Client(p).FunctionDelete(context.Background(), "pacer").Err()
		if err != nil && !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "not exist") {
			c.t.Fatalf("FUNCTION DELETE on %s: %v", p.Addr(), err)
		}
	}
}
