"""A redis-server for the fleet check and the clients' benchmark: a free
loopback port, a temporary directory, no persistence, the module loaded and
redis/pacer.lua loaded as the function library `pacer` (docs/redis.md), so
a client may take any door. Stopped, and its directory removed, on exit.

    with FleetServer(module_path) as server:
        server.url, server.port, server.cli("PING")
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "redis", "pacer.lua")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FleetServer:
    def __init__(self, module, extra=()):
        # The server runs in its own directory; None: no module (the
        # function and the script only).
        self.module = None if module is None else os.path.abspath(module)
        self.extra = list(extra)  # more redis-server arguments
        self.port = None
        self.proc = None
        self.scratch = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/"

    def cli(self, *args, stdin=None):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *args], input=stdin, check=True,
                             capture_output=True, text=True, timeout=10)
        return out.stdout

    def __enter__(self):
        self.scratch = tempfile.mkdtemp(prefix="pacer-fleet-")
        try:
            self._start()
            with open(SCRIPT) as f:
                library = "#!lua name=pacer\n" + f.read()
            loaded = self.cli("-x", "FUNCTION", "LOAD", stdin=library).strip()
            if loaded != "pacer":
                raise RuntimeError(f"FUNCTION LOAD gave {loaded!r}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        # A port taken between choosing and binding gets another try.
        for _ in range(3):
            self.port = free_port()
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.scratch,
                 "--logfile", os.path.join(self.scratch, "redis.log"),
                 *([] if self.module is None else ["--loadmodule", self.module]), *self.extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for _ in range(100):
                if self.proc.poll() is not None:
                    break
                try:
                    if self.cli("PING").strip() == "PONG":
                        return
                except (subprocess.SubprocessError, OSError):
                    pass
                time.sleep(0.05)
            self._stop()
        raise RuntimeError("redis-server did not start")

    def _stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __exit__(self, *exc):
        self._stop()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        return False
