"""A real Redis Cluster for the fleet pacer's tests: six redis-servers (three
primaries, three replicas) on free loopback ports, each with a free cluster
bus port of its own (``--cluster-port``), joined by ``redis-cli --cluster
create``; every process is killed and every folder removed when the
cluster closes, whatever happens (``redis_server.RedisServer`` does it for
each node, and at exit should a test runner stop early).

The helpers ask the servers, never the code under test: which primary owns
a key's slot (``CLUSTER KEYSLOT`` and each primary's own ``CLUSTER NODES``
line), a bucket's counts on that primary, a slot moved to another primary
while keys exist, and a primary failed over to its replica."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

from redis_server import RedisServer, free_port

REDIS_CLI = shutil.which("redis-cli")
#: How long the cluster may take to agree (a generous deadline: the machine
#: may be busy; polled, never slept).
CONVERGE_S = 60.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _poll(what: str, check: Callable[[], bool], deadline_s: float = CONVERGE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"redis cluster: {what} not within {deadline_s:.0f} s")
        time.sleep(0.05)


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


class RedisCluster:
    """Six nodes, the first three made primaries by ``redis-cli``; each node
    loads ``module`` unless its index is in ``without_module``."""

    def __init__(self, *, module: str | None = None, without_module: Iterable[int] = (),
                 node_timeout_ms: int = 1500) -> None:
        if REDIS_CLI is None:
            raise RuntimeError("redis-cli not found (bash scripts/redis-deps.sh installs it)")
        skip = set(without_module)
        ports = _free_ports(12)
        self.nodes = [
            RedisServer(module=None if i in skip else module, extra=(
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms), "--cluster-port", str(ports[6 + i])))
            for i in range(6)
        ]
        # RedisServer picked a free port of its own; the bus ports were
        # picked apart from every one of them.
        for node, bus in zip(self.nodes, ports[6:]):
            assert node.port != bus
        self._clients: dict[int, Any] = {}

    # ------------------------------------------------------------ life

    def start(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run([str(REDIS_CLI), "--cluster", "create", *addresses, "--cluster-replicas", "1",
                            "--cluster-yes"], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=CONVERGE_S)
            self.wait_ok()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for node in self.nodes:
            node.close()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return [node.process.pid for node in self.nodes if node.process is not None]

    @property
    def seeds(self) -> list[str]:
        return [f"127.0.0.1:{node.port}" for node in self.nodes]

    # ------------------------------------------------------------ asking the nodes

    def admin(self, node: RedisServer) -> Any:
        """A plain client of one node, for the test's own commands."""
        client = self._clients.get(node.port)
        if client is None:
            client = self._clients[node.port] = node.client()
        return client

    def role(self, node: RedisServer) -> str:
        return _text(self.admin(node).execute_command("ROLE")[0])

    @property
    def live(self) -> list[RedisServer]:
        """The nodes not killed (``kill_primary``)."""
        return [node for node in self.nodes if node.process is not None]

    def primaries(self) -> list[RedisServer]:
        return [node for node in self.live if self.role(node) == "master"]

    def _own_line(self, node: RedisServer) -> list[str]:
        """The node's own line of its ``CLUSTER NODES``."""
        for line in _text(self.admin(node).execute_command("CLUSTER", "NODES")).splitlines():
            fields = line.split()
            if "myself" in fields[2].split(","):
                return fields
        raise RuntimeError("redis cluster: a node without its own line in CLUSTER NODES")

    def node_id(self, node: RedisServer) -> str:
        return self._own_line(node)[0]

    def slots_of(self, node: RedisServer) -> set[int]:
        """The slots a primary says it serves (its own line; slots it is
        importing or migrating are not among them)."""
        slots: set[int] = set()
        for field in self._own_line(node)[8:]:
            if field.startswith("["):
                continue
            first, _, last = field.partition("-")
            slots.update(range(int(first), int(last or first) + 1))
        return slots

    def keyslot(self, key: str | bytes) -> int:
        return int(self.admin(self.nodes[0]).execute_command("CLUSTER", "KEYSLOT", key))

    def owner(self, key: str | bytes) -> RedisServer:
        """The primary that says it serves the key's slot."""
        slot = self.keyslot(key)
        owners = [node for node in self.primaries() if slot in self.slots_of(node)]
        if len(owners) != 1:
            raise RuntimeError(f"redis cluster: slot {slot} is served by {len(owners)} primaries")
        return owners[0]

    def _agreed(self) -> bool:
        """Every node says cluster_state:ok, the primaries' own slots cover
        all 16384 once, and every node's view of who serves each slot is
        theirs."""
        try:
            for node in self.live:
                info = _text(self.admin(node).execute_command("CLUSTER", "INFO"))
                if "cluster_state:ok" not in info:
                    return False
            owned: dict[int, str] = {}
            for node in self.primaries():
                ident = self.node_id(node)
                for slot in self.slots_of(node):
                    if slot in owned:
                        return False
                    owned[slot] = ident
            if len(owned) != 16384:
                return False
            for node in self.live:
                for line in _text(self.admin(node).execute_command("CLUSTER", "NODES")).splitlines():
                    fields = line.split()
                    if "fail" in fields[2].split(","):
                        continue
                    for field in fields[8:]:
                        if field.startswith("["):
                            continue
                        first, _, last = field.partition("-")
                        if owned.get(int(first)) != fields[0] or owned.get(int(last or first)) != fields[0]:
                            return False
            return True
        except Exception:  # noqa: BLE001 - a node still starting, a connection reset: asked again
            return False

    def wait_ok(self) -> None:
        _poll("every node cluster_state:ok and agreeing on the slots", self._agreed)

    # ------------------------------------------------------------ keys and buckets

    def keys_per_primary(self, prefix: str, per_primary: int) -> dict[int, list[str]]:
        """Keys ``prefix:N``, ``per_primary`` of them on each primary (by
        the primary's port)."""
        owners = {node.port: node for node in self.primaries()}
        slots = {port: self.slots_of(node) for port, node in owners.items()}
        chosen: dict[int, list[str]] = {port: [] for port in owners}
        n = 0
        while any(len(keys) < per_primary for keys in chosen.values()):
            key = f"{prefix}:{n}"
            n += 1
            slot = self.keyslot(key)
            port = next(port for port, owned in slots.items() if slot in owned)
            if len(chosen[port]) < per_primary:
                chosen[port].append(key)
        return chosen

    def info(self, key: str | bytes, script: bytes | None = None) -> dict[str, Any]:
        """The bucket's counts, read on the primary that owns the key:
        ``PACER.INFO`` where that primary has the module, else ``FCALL_RO
        pacer_ro`` where the library is loaded, else the script (``EVAL``
        of ``script``)."""
        node = self.owner(key)
        admin = self.admin(node)
        if self.has_module(node):
            reply = admin.execute_command("PACER.INFO", key)
        elif admin.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "pacer"):
            reply = admin.execute_command("FCALL_RO", "pacer_ro", 1, key, "info")
        else:
            assert script is not None, "no module and no function on the owner: give the script"
            reply = admin.execute_command("EVAL", script, 1, key, "info")
        return {_text(reply[i]): (reply[i + 1] if isinstance(reply[i + 1], int) else _text(reply[i + 1]))
                for i in range(0, len(reply), 2)}

    def has_module(self, node: RedisServer) -> bool:
        """Whether ``MODULE LIST`` on the node names pacer (redis-py answers
        it as a list of dicts)."""
        modules = self.admin(node).execute_command("MODULE", "LIST")
        return any(_text(entry.get(b"name", entry.get("name", b""))) == "pacer" for entry in modules)

    def load_function(self, library: bytes) -> None:
        """``FUNCTION LOAD REPLACE`` on every primary (the replicas receive it)."""
        for node in self.primaries():
            self.admin(node).execute_command("FUNCTION", "LOAD", "REPLACE", library)

    # ------------------------------------------------------------ changing the cluster

    def move_slot(self, slot: int, target: RedisServer, *, finish: bool = True) -> RedisServer:
        """Moves ``slot``, with its keys, from the primary serving it to
        ``target`` (another primary): IMPORTING on the target, MIGRATING on
        the source, ``MIGRATE`` of every key, then (``finish``) the slot
        given to the target on every primary. Returns the source. Without
        ``finish`` the slot stays MIGRATING/IMPORTING, its keys already on
        the target: a command for one of them is answered ``ASK``."""
        source = next(node for node in self.primaries() if slot in self.slots_of(node))
        assert source is not target
        src, dst = self.admin(source), self.admin(target)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        if finish:
            self.finish_move(slot, target, source)
        return source

    def finish_move(self, slot: int, target: RedisServer, source: RedisServer) -> None:
        """``CLUSTER SETSLOT slot NODE target`` on the target, the source and
        every other primary; then waits for the cluster to agree."""
        ident = self.node_id(target)
        others = [node for node in self.primaries() if node not in (target, source)]
        for node in (target, source, *others):
            self.admin(node).execute_command("CLUSTER", "SETSLOT", slot, "NODE", ident)
        _poll(f"slot {slot} on its new primary everywhere", lambda: self._agreed() and slot in self.slots_of(target))

    def replica_of(self, primary: RedisServer) -> RedisServer:
        ident = self.node_id(primary)
        for node in self.live:
            fields = self._own_line(node)
            if "slave" in fields[2].split(",") and fields[3] == ident:
                return node
        raise RuntimeError("redis cluster: the primary has no replica")

    def failover(self, primary: RedisServer) -> RedisServer:
        """Promotes the primary's replica (``WAIT 1`` on the primary first,
        so the replica has every write, then ``CLUSTER FAILOVER`` on the
        replica) and waits until the roles changed and the cluster agrees.
        Returns the new primary."""
        replica = self.replica_of(primary)
        # Until the replica acknowledged every write (a replica still
        # syncing after an earlier change acknowledges none yet).
        _poll("the replica acknowledging the primary's writes",
              lambda: self.admin(primary).execute_command("WAIT", 1, 1000) == 1)
        deadline = time.monotonic() + CONVERGE_S
        while True:
            # A manual failover the primaries refuse to vote for (too soon
            # after another of the same shard) is given up after 5 s by the
            # replica: asked again until the deadline.
            self.admin(replica).execute_command("CLUSTER", "FAILOVER")
            try:
                _poll("the replica promoted", lambda: self.role(replica) == "master", 6.0)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
        _poll("the old primary a replica, the cluster agreeing",
              lambda: self.role(primary) == "slave" and self._agreed())
        return replica

    def kill_primary(self, primary: RedisServer) -> RedisServer:
        """SIGKILLs a primary once its replica acknowledged every write
        (``WAIT 1``): the cluster fails it over on its own, after
        ``cluster-node-timeout`` and an election. Returns the replica
        (``wait_promoted``)."""
        replica = self.replica_of(primary)
        _poll("the replica acknowledging the primary's writes",
              lambda: self.admin(primary).execute_command("WAIT", 1, 1000) == 1)
        client = self._clients.pop(primary.port, None)
        if client is not None:
            client.close()
        primary.kill()
        return replica

    def wait_promoted(self, replica: RedisServer) -> None:
        _poll("the replica of a killed primary promoted, the cluster agreeing",
              lambda: self.role(replica) == "master" and self._agreed())
