"""A real Redis Cluster for the fleet tests: 3 primaries and 3 replicas of
Debian's redis-server on free loopback ports (each node's client port and
cluster-bus port chosen free), in a temporary directory, no persistence,
the module loaded on every node (or none) and redis/pacer.lua loaded as the
function library `pacer` on every primary (replicas receive it). Created
with `redis-cli --cluster create … --cluster-replicas 1`; ready when every
node says `cluster_state:ok` and all agree on who owns every slot. Every
process is stopped, and the directory removed, on exit.

    with FleetCluster(module_path) as cluster:
        cluster.seeds                 # "redis://127.0.0.1:P1,redis://…"
        cluster.owner("some:key")     # the port of the primary that owns it
        cluster.cli(port, "PING")
        cluster.move_slot_of("some:key", to_port)
        cluster.fail_over(primary_port)
        cluster.kill(primary_port)        # SIGKILL; its replica takes over
        cluster.pause(port) / cluster.resume(port)   # SIGSTOP / SIGCONT
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from server import SCRIPT

# Generous: a deadline for the cluster to settle, not a pace it must keep.
SETTLE_S = 60


def free_ports(n):
    """n distinct free loopback ports (held open together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def key_slot(key):
    """CLUSTER KEYSLOT by the cluster spec: CRC16 (XMODEM) of the key, or of
    its hash tag, mod 16384 (checked against the server in the tests)."""
    data = key.encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % 16384


class FleetCluster:
    def __init__(self, module, nodes=6, replicas=1, function=True, module_args=(), node_timeout_ms=1000):
        self.module = None if module is None else os.path.abspath(module)
        self.module_args = list(module_args)  # e.g. test-clock
        self.count = nodes
        self.replicas = replicas
        self.function = function
        self.node_timeout_ms = node_timeout_ms  # a primary silent this long is failed over
        self.ports = []
        self.procs = {}
        self.scratch = None

    @property
    def seeds(self):
        """Every node's URL, comma-separated (the CLI's --cluster form)."""
        return ",".join(f"redis://127.0.0.1:{p}" for p in self.ports)

    def cli(self, port, *args, stdin=None, check=True):
        out = subprocess.run(["redis-cli", "-p", str(port), *args], input=stdin, check=check,
                             capture_output=True, text=True, timeout=30)
        return out.stdout

    def __enter__(self):
        self.scratch = tempfile.mkdtemp(prefix="pacer-cluster-")
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        ports = free_ports(2 * self.count)
        self.ports = ports[:self.count]
        for port, bus in zip(self.ports, ports[self.count:]):
            here = os.path.join(self.scratch, str(port))
            os.mkdir(here)
            self.procs[port] = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", here, "--logfile", os.path.join(here, "redis.log"),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-port", str(bus), "--cluster-node-timeout", str(self.node_timeout_ms),
                 *([] if self.module is None else ["--loadmodule", self.module, *self.module_args])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._until(lambda: all(self._answers(p) for p in self.ports), "the nodes to start")
        subprocess.run(["redis-cli", "--cluster", "create",
                        *[f"127.0.0.1:{p}" for p in self.ports],
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       check=True, capture_output=True, text=True, timeout=60)
        self.settle()
        if self.function:
            with open(SCRIPT) as f:
                library = "#!lua name=pacer\n" + f.read()
            for port in self.primaries():
                loaded = self.cli(port, "-x", "FUNCTION", "LOAD", stdin=library).strip()
                if loaded != "pacer":
                    raise RuntimeError(f"FUNCTION LOAD on {port} gave {loaded!r}")

    def _answers(self, port):
        if self.procs[port].poll() is not None:
            raise RuntimeError(f"redis-server on {port} exited: {self._log(port)}")
        try:
            return self.cli(port, "PING", check=False).strip() == "PONG"
        except subprocess.SubprocessError:
            return False

    def _log(self, port):
        try:
            with open(os.path.join(self.scratch, str(port), "redis.log")) as f:
                return f.read()[-600:]
        except OSError:
            return "(no log)"

    def _until(self, ready, what):
        deadline = time.monotonic() + SETTLE_S
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"gave up waiting for {what} after {SETTLE_S} s")
            time.sleep(0.05)

    def nodes(self, port):
        """CLUSTER NODES as seen by `port`: {port: (id, flags, primary id, slots)}."""
        seen = {}
        for line in self.cli(port, "CLUSTER", "NODES").splitlines():
            parts = line.split()
            if len(parts) < 8:
                continue
            address = parts[1].split("@")[0]
            node_port = int(address.rsplit(":", 1)[1])
            flags = set(parts[2].split(","))
            flags.discard("myself")
            slots = []
            for item in parts[8:]:
                if item.startswith("["):
                    continue  # a slot being migrated or imported
                low, _, high = item.partition("-")
                slots.append((int(low), int(high or low)))
            seen[node_port] = (parts[0], flags, parts[3], slots)
        return seen

    def primaries(self):
        """The ports of the primaries, as the first running node sees them."""
        return sorted(p for p, (_, flags, _, _) in self.nodes(self.live()[0]).items()
                      if "master" in flags and "fail" not in flags)

    def live(self):
        """The ports of the nodes still running."""
        return [p for p in self.ports if self.procs[p].poll() is None]

    def _agreed(self):
        """Every running node says the cluster is ok and sees the same
        primaries and slots; none is still suspected or in a handshake (a
        killed node is marked failed by all, and owns nothing)."""
        views = []
        live = self.live()
        for port in live:
            info = self.cli(port, "CLUSTER", "INFO", check=False)
            if "cluster_state:ok" not in info:
                return False
            seen = self.nodes(port)
            view = {p: (flags, sorted(slots)) for p, (_, flags, _, slots) in seen.items()}
            if any("fail?" in flags or "handshake" in flags or ("fail" in flags) == (p in live)
                   for p, (_, flags, _, _) in seen.items()):
                return False
            views.append(view)
        covered = sum(high - low + 1 for _, slots in views[0].values() for low, high in slots)
        return covered == 16384 and all(v == views[0] for v in views)

    def settle(self):
        """Until every node says the cluster is ok and all agree on the slots."""
        self._until(self._agreed, "the cluster to agree")

    def owner(self, key):
        """The port of the primary that owns `key`'s slot."""
        slot = key_slot(key)
        for port, (_, flags, _, slots) in self.nodes(self.live()[0]).items():
            if "master" in flags and any(low <= slot <= high for low, high in slots):
                return port
        raise RuntimeError(f"no primary owns slot {slot}")

    def replica_of(self, primary):
        seen = self.nodes(primary)
        primary_id = seen[primary][0]
        for port, (_, flags, of, _) in seen.items():
            if "slave" in flags and of == primary_id:
                return port
        raise RuntimeError(f"{primary} has no replica")

    def move_slot_of(self, key, to_port):
        """Moves `key`'s slot, with every key in it, from its owner to the
        primary `to_port` the way `redis-cli --cluster reshard` does: the
        target IMPORTING, the source MIGRATING, MIGRATE of the slot's keys,
        then the slot's new owner announced to every primary. Between the
        first and last steps a client asking the source for a key already
        moved is answered ASK; after them, MOVED."""
        slot = str(key_slot(key))
        source = self.owner(key)
        ids = {p: v[0] for p, v in self.nodes(self.live()[0]).items()}
        self.cli(to_port, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
        self.cli(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to_port])
        while True:
            keys = self.cli(source, "CLUSTER", "GETKEYSINSLOT", slot, "100").split()
            if not keys:
                break
            moved = self.cli(source, "MIGRATE", "127.0.0.1", str(to_port), "", "0", "5000",
                             "KEYS", *keys).strip()
            if moved not in ("OK", "NOKEY"):
                raise RuntimeError(f"MIGRATE answered {moved!r}")
        for port in [to_port, source] + [p for p in self.primaries() if p not in (to_port, source)]:
            self.cli(port, "CLUSTER", "SETSLOT", slot, "NODE", ids[to_port])
        self.settle()

    def fail_over(self, primary):
        """A manual failover of `primary` to its replica (`CLUSTER FAILOVER`
        on the replica, after `WAIT` so it has every write): no write is
        lost. Returns the new primary's port."""
        replica = self.replica_of(primary)
        self.cli(primary, "WAIT", "1", "5000")
        answer = self.cli(replica, "CLUSTER", "FAILOVER").strip()
        if answer != "OK":
            raise RuntimeError(f"CLUSTER FAILOVER answered {answer!r}")
        self._until(lambda: "role:master" in self.cli(replica, "INFO", "replication"),
                    f"{replica} to take over from {primary}")
        self.settle()
        return replica

    def kill(self, primary):
        """kill -9 of `primary`: the writes its replica had not received
        are lost. Returns the replica's port, once it has taken over and
        every other node agrees (the node timeout, then an election)."""
        replica = self.replica_of(primary)
        self.procs[primary].kill()
        self.procs[primary].wait()
        self._until(lambda: "role:master" in self.cli(replica, "INFO", "replication", check=False),
                    f"{replica} to take over from the killed {primary}")
        self.settle()
        return replica

    def pause(self, port):
        """SIGSTOP: the node holds its connections and answers nothing."""
        self.procs[port].send_signal(signal.SIGSTOP)

    def resume(self, port):
        self.procs[port].send_signal(signal.SIGCONT)

    def __exit__(self, *exc):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = {}
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        return False
