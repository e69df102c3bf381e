#!/usr/bin/env python3
"""Puts real redis-servers in the states of tests/fleet/replies.json and
checks that every engine answers there with a text the table holds, with
the class the table gives it (docs/fleet-clients.md, "Which replies are
failures"):

    python3 tests/fleet/capture_replies.py --module target/debug/libpacer_redis.so

A live reply that the table lacks fails the check and is printed as a case
to add. A script error's SHA and line number change with redis/pacer.lua,
so they are compared as `<sha>` and `<line>`.
"""

import argparse
import json
import os
import re
import socket
import sys
import time

from server import SCRIPT, FleetServer, free_port

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replies.json")
CONFIG = ["60", "10", "120000", "5", "refund"]


class Error(str):
    """An error reply's text."""


def command(port, *args, timeout=5.0):
    """Sends one command in RESP and reads one reply (nested arrays read,
    an error reply returned as Error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        out = b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() if isinstance(x, str) else x for x in args))
        s.sendall(out)
        stream = s.makefile("rb")
        return read(stream)


def setup(port, *args):
    """A command that puts the server in a state: retried while the server
    still answers BUSY (a killed script ends at its next hook, which a
    loaded machine can delay), any other error raised."""
    for _ in range(500):
        reply = command(port, *args)
        if not (isinstance(reply, Error) and reply.startswith("BUSY")):
            break
        time.sleep(0.01)
    if isinstance(reply, Error):
        raise RuntimeError(f"{' '.join(args[:2])}: {reply}")
    return reply


def read(stream):
    line = stream.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:].decode()
    if kind == b"-":
        return Error(rest)
    if kind in (b"+", b":"):
        return rest
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else stream.read(n + 2)[:-2].decode()
    if kind == b"*":
        return [read(stream) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected reply line {line!r}")


def normal(text):
    return re.sub(r"script: [0-9a-f]{40}, on @user_script:\d+\.", "script: <sha>, on @user_script:<line>.", text)


def calls(port, key):
    """The reserve of each engine on `key` (the script loaded first)."""
    sha = command(port, "SCRIPT", "LOAD", open(SCRIPT).read())
    return {
        "module": lambda: command(port, "PACER.RESERVE", key, *CONFIG),
        "function": lambda: command(port, "FCALL", "pacer", "1", key, "reserve", *CONFIG),
        "script": lambda: command(port, "EVALSHA", sha, "1", key, "reserve", *CONFIG),
    }


def capture(module):
    """(state, engine, reply) for every state this machine can produce."""
    seen = []

    def each(state, port, key, engines=("module", "function", "script")):
        engine_calls = calls(port, key)
        for engine in engines:
            seen.append((state, engine, engine_calls[engine]()))

    with FleetServer(module) as server:
        port = server.port
        setup(port, "SET", "str", "1")
        setup(port, "RPUSH", "lst", "1")
        each("a string key of another use", port, "str")
        each("a list at the key", port, "lst")
        sha = command(port, "SCRIPT", "LOAD", open(SCRIPT).read())
        setup(port, "SCRIPT", "FLUSH")
        seen.append(("script cache emptied", "script", command(port, "EVALSHA", sha, "1", "k", "reserve", *CONFIG)))
        setup(port, "FUNCTION", "DELETE", "pacer")
        seen.append(("function deleted", "function", command(port, "FCALL", "pacer", "1", "k", "reserve", *CONFIG)))
        server.cli("-x", "FUNCTION", "LOAD", stdin="#!lua name=pacer\n" + open(SCRIPT).read())
        setup(port, "CONFIG", "SET", "maxmemory", "1")
        each("maxmemory", port, "k-oom")
        setup(port, "CONFIG", "SET", "maxmemory", "0")
        # A busy script: every other call answers BUSY until it is killed.
        setup(port, "CONFIG", "SET", "busy-reply-threshold", "50")
        busy = socket.create_connection(("127.0.0.1", port))
        busy.sendall(b"*3\r\n$4\r\nEVAL\r\n$17\r\nwhile true do end\r\n$1\r\n0\r\n")
        time.sleep(0.3)
        try:
            each("busy script", port, "k")
        finally:
            command(port, "SCRIPT", "KILL")
            busy.close()
        # The killed script has ended when a command is served again.
        setup(port, "PING")
        # A replica of a port nothing listens on keeps its data and answers
        # writes READONLY; with stale data refused, MASTERDOWN.
        setup(port, "REPLICAOF", "127.0.0.1", str(free_port()))
        if setup(port, "ROLE")[0] != "slave":
            raise RuntimeError("REPLICAOF did not make the server a replica")
        each("replica", port, "k")
        setup(port, "CONFIG", "SET", "replica-serve-stale-data", "no")
        each("stale replica", port, "k")
        setup(port, "REPLICAOF", "NO", "ONE")
    with FleetServer(None) as server:
        seen.append(("module not loaded", "module", command(server.port, "PACER.RESERVE", "k", *CONFIG)))
    with FleetServer(module, extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]) as server:
        each("cluster without slots", server.port, "k")
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", required=True)
    args = parser.parse_args()
    with open(TABLE) as f:
        cases = json.load(f)["cases"]
    failures = []
    seen = capture(args.module)
    for state, engine, reply in seen:
        if not isinstance(reply, Error):
            failures.append(f"{state}, {engine}: answered {reply!r}, not an error")
            continue
        matches = [c for c in cases if normal(c["reply"]) == normal(reply)]
        if not matches:
            failures.append(f"{state}, {engine}: {str(reply)!r} is not in the table")
        elif not any(engine in c["engines"] and c["source"] == "captured" for c in matches):
            failures.append(f"{state}, {engine}: {str(reply)!r} is in the table, but not as captured from {engine}")
    captured = {(s, e) for s, e, _ in seen}
    for c in cases:
        if c["source"] == "captured":
            for engine in c["engines"]:
                if (c["state"], engine) not in captured:
                    failures.append(f"the table says {c['state']!r}, {engine} is captured; this script does not")
    for failure in failures:
        print(f"capture_replies: FAIL {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"capture_replies: {len(seen)} live replies, each in the table as captured: ok", file=sys.stderr)


if __name__ == "__main__":
    main()
