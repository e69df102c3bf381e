"""Real redis-servers for the fleet pacer's tests: each on a free loopback
port, in a temporary folder, without persistence (``--save "" --appendonly
no``), killed when the test ends whatever happens (and at exit, should a
test runner stop early)."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: The module built by scripts/test-python.sh (cargo build -p pacer-redis).
MODULE_ENV = "PACER_REDIS_MODULE"
REDIS_SERVER = shutil.which("redis-server")

_running: set[RedisServer] = set()


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def module_path() -> str | None:
    path = os.environ.get(MODULE_ENV)
    return path if path and Path(path).is_file() else None


class _PortTaken(RuntimeError):
    """Another process listens on the port chosen for a server."""


class RedisServer:
    """One redis-server process; ``start`` again after ``kill`` comes back
    on the same port (with an empty data set and script cache)."""

    def __init__(self, *, module: str | None = None, extra: tuple[str, ...] = ()) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server not found (bash scripts/redis-deps.sh installs it)")
        self.module = module
        self.extra = extra
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="pacer-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Starts the server; a port another process took since it was
        chosen (the server exits, or another server answers there) gets a
        new free port, twice at most."""
        for attempt in range(3):
            try:
                return self._start_once()
            except _PortTaken:
                if attempt == 2:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_once(self) -> RedisServer:
        command = [
            str(REDIS_SERVER), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.folder), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--logfile", str(self.folder / "redis.log"),
        ]
        if self.module is not None:
            command += ["--loadmodule", self.module]
        command += list(self.extra)
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        _running.add(self)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import redis

        deadline = time.monotonic() + 20
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.folder / "redis.log").read_text(errors="replace") if (self.folder / "redis.log").exists() else ""
                _running.discard(self)
                if "Address already in use" in log:
                    raise _PortTaken(self.port)
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{log}")
            try:
                with redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1) as probe:
                    if probe.ping():
                        # Ours, not another test's server on a port taken
                        # between choosing and binding: it runs in our folder.
                        folder = probe.config_get("dir").get("dir", "")
                        if os.path.realpath(folder) != os.path.realpath(self.folder):
                            self.process.kill()
                            self.process.wait()
                            _running.discard(self)
                            raise _PortTaken(self.port)
                        return
            except redis.exceptions.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer PING within 20 s")
            time.sleep(0.02)

    def client(self, **kwargs: Any) -> Any:
        """A plain redis-py client for the test's own commands."""
        import redis

        return redis.Redis(port=self.port, socket_timeout=10, **kwargs)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is saved."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        self.process = None
        _running.discard(self)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def command_calls(server: RedisServer, command: str) -> int:
    """How many times ``server`` ran ``command`` (lower case, as INFO
    commandstats names it: ``eval``, ``evalsha``, ``script|load``)."""
    with server.client() as admin:
        stats = admin.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


@atexit.register
def _kill_all() -> None:
    for server in list(_running):
        server.close()
