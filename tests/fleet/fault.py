#!/usr/bin/env python3
"""The fleet under faults: three clients of three languages on one key
while the server is demoted to a replica, the function is deleted, the
link is slowed and the script cache is emptied, with calls cancelled at
random points (docs/fleet-clients.md, "Under faults").

Starts a redis-server (tests/fleet/server.py: free loopback port, temporary
directory; the function library loaded, no module, so the clients' `auto`
engine is the function) and a delaying proxy in front of it, runs the
clients given with --client through the proxy, plays the schedule below on
the server directly, and checks what the clients printed against the
server's counters:

- no call ended in an error: every reply under a fault is an outage or an
  engine change (docs/fleet-clients.md, "Which replies are failures");
- no call lasted longer than its timeout (plus the wait it was granted, or
  the moment it was cancelled) and SLACK_MS;
- every answer is accounted for by the server's counters: the admissions
  the clients kept are at most what the server admitted and did not get
  back, and the rest (a debit without a holder) is at most the number of
  calls a fault could have cut off (their reply or their release lost);
  outside the faults that rest is zero, so a cancellation that leaks a debit
  fails here. Refusals likewise;
- every fault was seen (some answers by the failure policy in the demoted
  and the slow spell) and every client is answered by the server again
  after the last one.

Each client is a command printing one JSON line per call: {"client", "call",
"start_ms", "end_ms", "cancel_at_ms", "outcome": admitted | refused |
cancelled | error, "by": server | closed, "wait_ms"} (wall-clock ms). In a
command, {url} {key} {until} {quiet_from} {quiet_to} {every} {timeout} {seed}
and {rate} {burst} {idle} {retries} are replaced.

    python3 tests/fleet/fault.py --client 'node=node tests/fleet/fault.mjs {url} {key} ...'
"""

import argparse
import asyncio
import json
import random
import shlex
import subprocess
import sys
import threading
import time

from server import SCRIPT, FleetServer, free_port

# Rate 600, burst 5, idle 10000, retries 2 (SPEC §3 by hand: backoff(2) =
# 2000·3 = 6000; bound = floor(4000 / 6) = 666 ms; cap 1 s; schedule
# 2·1·1000 = 2000 ms, 2000·600 ≥ 60000: refusing). Short waits keep the
# run short; about ten admissions a second.
CONFIG = {"rate": 600, "burst": 5, "idle": 10000, "retries": 2}
TIMEOUT_MS = 600
EVERY_MS = 40
SLACK_MS = 1000
# A call within PAD_MS of a fault may have had its reply or its release cut
# off by it (a delayed reply lands up to a delay after the link is fast
# again, a release follows its admission by at most a timeout).
PAD_MS = TIMEOUT_MS + 2 * TIMEOUT_MS + 500

# (start s, end s, what): the server is a replica of nothing (writes answer
# READONLY), the function is gone (auto clients fall back to the script),
# the link adds SLOW_MS to every reply (past the timeout: replies are lost),
# then SLOWED_MS (within it, for a call of several round trips, with room
# for a busy machine: a call cancelled while its reply is on the way must
# still release what it was given), the script cache is emptied.
SLOW_MS = 2 * TIMEOUT_MS
SLOWED_MS = TIMEOUT_MS // 6
SCHEDULE = [(3.0, 5.0, "demoted"), (8.0, 10.0, "function deleted"), (13.0, 15.0, "slow link"),
            (17.5, 17.5, "counters read"), (17.7, 21.7, "slowed link"), (23.5, 23.5, "script cache emptied")]
RUN_S = 27.0
# The clients make no call from QUIET_S[0] to QUIET_S[1], so the counters
# read between them split the run exactly: every call before the reading
# ended (and released what it released) before it.
QUIET_S = (15.4, 17.6)
# The faults that can cut a call off from its answer: a lost reply (slow
# link) or a release refused (demoted). An engine change is retried within
# the call, so it cuts nothing off.
CUTTING = ("demoted", "slow link")


def wall_ms():
    return time.time_ns() // 1_000_000


class DelayProxy:
    """A loopback TCP proxy that holds every chunk the server sends for
    `delay_ms` (set at any time) before passing it on."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.delay_ms = 0
        self.port = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = None

    async def _pipe(self, reader, writer, delayed):
        # Each chunk is held delay_ms from the moment it was read (not one
        # after another): two replies in flight arrive delay_ms late each.
        queue = asyncio.Queue()

        async def send():
            while (item := await queue.get()) is not None:
                due, data = item
                await asyncio.sleep(max(0.0, due - self.loop.time()))
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while data := await reader.read(65536):
                held = self.delay_ms / 1000 if delayed else 0.0
                queue.put_nowait((self.loop.time() + held, data))
            queue.put_nowait(None)
            await sender
        except (ConnectionError, asyncio.CancelledError):
            sender.cancel()
        finally:
            writer.close()

    async def _serve(self, client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(self._pipe(client_reader, server_writer, False),
                             self._pipe(server_reader, client_writer, True))

    def __enter__(self):
        self.thread.start()
        self.port = free_port()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self.loop)
        self.server = started.result(timeout=10)
        return self

    def __exit__(self, *exc):
        async def stop():
            self.server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        return False


def play(server, proxy, library, begin_ms, windows, key, reads):
    """Runs SCHEDULE from begin_ms, recording each fault's wall-clock span
    and each reading of the counters (wall-clock ms, counters)."""
    dead_port = free_port()  # nothing listens there: the replica never syncs
    actions = {
        "demoted": (lambda: server.cli("REPLICAOF", "127.0.0.1", str(dead_port)),
                    lambda: server.cli("REPLICAOF", "NO", "ONE")),
        "function deleted": (lambda: server.cli("FUNCTION", "DELETE", "pacer"),
                             lambda: server.cli("-x", "FUNCTION", "LOAD", stdin=library)),
        "slow link": (lambda: setattr(proxy, "delay_ms", SLOW_MS), lambda: setattr(proxy, "delay_ms", 0)),
        "slowed link": (lambda: setattr(proxy, "delay_ms", SLOWED_MS), lambda: setattr(proxy, "delay_ms", 0)),
        "script cache emptied": (lambda: server.cli("SCRIPT", "FLUSH"), lambda: None),
        "counters read": (lambda: reads.append((wall_ms(), info(server, key))), lambda: None),
    }
    for start_s, end_s, what in SCHEDULE:
        begin, end = actions[what]
        time.sleep(max(0.0, (begin_ms + start_s * 1000 - wall_ms()) / 1000))
        started = wall_ms()
        begin()
        time.sleep(max(0.0, (begin_ms + end_s * 1000 - wall_ms()) / 1000))
        end()
        if what != "counters read":
            windows.append((what, started, wall_ms()))


def info(server, key):
    words = server.cli("FCALL", "pacer", "1", key, "info").split("\n")
    return {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2)}


def near(line, windows, pad):
    return any(line["start_ms"] <= end + pad and line["end_ms"] + pad >= start for _, start, end in windows)


def kept(lines, since_ms=0):
    """The admissions the server made that the clients kept (of the calls
    started at since_ms or later)."""
    return sum(1 for line in lines if line["start_ms"] >= since_ms
               and line["outcome"] == "admitted" and line.get("by") == "server")


def unheld(lines, counters, since_ms=0):
    """The server's admissions not released, less those the clients kept."""
    return int(counters["admitted"]) - int(counters["released"]) - kept(lines, since_ms)


def call_failures(lines):
    """Calls that ended in an error, and calls that lasted longer than the
    timeout (plus the wait granted, or the moment of cancelling) and
    SLACK_MS."""
    failures = []
    errors = {}
    for line in lines:
        if line["outcome"] == "error":
            errors.setdefault((line["client"], line["error"]), []).append(line["call"])
    for (client, error), calls in sorted(errors.items()):
        failures.append(f"{client}: {len(calls)} calls ended in an error ({error}), the first call {calls[0]}")
    for line in lines:
        limit = TIMEOUT_MS + SLACK_MS
        if line["outcome"] == "admitted":
            limit += line.get("wait_ms", 0)
        if line["outcome"] == "cancelled" and line["cancel_at_ms"] is not None:
            limit = max(limit, line["cancel_at_ms"] + SLACK_MS)
        if line["end_ms"] - line["start_ms"] > limit:
            failures.append(f"a call lasted {line['end_ms'] - line['start_ms']} ms (limit {limit}): {line}")
    return failures


def start_clients(specs, fields):
    """Starts each NAME=COMMAND of `specs`, its placeholders replaced by
    fields(index), the settings and the run's timeout and pace."""
    procs = []
    for index, spec in enumerate(specs):
        name, command = spec.split("=", 1)
        values = dict(fields(index), every=EVERY_MS, timeout=TIMEOUT_MS, **CONFIG)
        words = [w.format(**values) for w in shlex.split(command)]
        procs.append((name, subprocess.Popen(words, stdout=subprocess.PIPE, text=True)))
    return procs


def collect(procs):
    """Waits for the clients: (failures, every call's line)."""
    failures, lines = [], []
    for name, proc in procs:
        out = proc.communicate(timeout=120)[0]
        if proc.returncode != 0:
            failures.append(f"{name}: exited {proc.returncode}")
        lines += [json.loads(line) for line in out.splitlines() if line.strip()]
    return failures, lines


def finish(label, failures, seed):
    for failure in failures:
        print(f"{label}: FAIL {failure}", file=sys.stderr)
    if failures:
        print(f"{label}: rerun with --seed {seed}", file=sys.stderr)
        sys.exit(1)
    print(f"{label}: ok", file=sys.stderr)


def check(lines, windows, counters, reads):
    failures = call_failures(lines)
    refused = sum(1 for line in lines if line["outcome"] == "refused" and line.get("by") == "server")
    # A call answered by the server is accounted for; one cancelled or
    # answered by the policy near a cutting fault may have left a debit.
    cutting = [w for w in windows if w[0] in CUTTING]
    cut = sum(1 for line in lines if (line["outcome"] == "cancelled" or line.get("by") == "closed")
              and near(line, cutting, PAD_MS))
    cancelled = sum(1 for line in lines if line["outcome"] == "cancelled")
    admitted_s, released_s, refused_s = (int(counters[k]) for k in ("admitted", "released", "refused"))
    print(f"fault run: {len(lines)} calls, {kept(lines)} admissions kept, {cancelled} cancelled, {cut} near a fault; "
          f"server admitted {admitted_s}, released {released_s}, refused {refused_s}", file=sys.stderr)
    left = unheld(lines, counters)
    if not 0 <= left <= cut:
        failures.append(f"debits without a holder: admitted {admitted_s} − released {released_s} − kept "
                        f"{kept(lines)} = {left}, allowed 0..{cut} (calls a fault could cut off)")
    # From the reading on, only a timeout cuts a call off (a call of several
    # round trips, a new connection's handshake, can outlast the timeout on
    # the slowed link): every other admission is kept or released. No call
    # is under way at the reading (the clients keep quiet around it), so the
    # count is exact.
    (read_ms, before), = reads
    since = unheld(lines, counters, read_ms) - (int(before["admitted"]) - int(before["released"]))
    under_way = sum(1 for line in lines if line["start_ms"] < read_ms < line["end_ms"])
    print(f"fault run: after the reading, {since} debits without a holder ({under_way} calls under way at it)",
          file=sys.stderr)
    if under_way:
        failures.append(f"{under_way} calls were under way at the reading (the clients did not keep quiet)")
    timed_out = sum(1 for line in lines if line["start_ms"] >= read_ms and line.get("by") == "closed")
    if not under_way and not 0 <= since <= timed_out:
        failures.append(f"debits without a holder after the faults that cut calls off: {since} "
                        f"(allowed 0..{timed_out}, the calls answered by the policy since)")
    if not refused <= refused_s <= refused + cancelled + cut:
        failures.append(f"refusals: the server counted {refused_s}, the clients were told of {refused} "
                        f"(allowed up to {refused + cancelled + cut})")
    slowed = [line for line in lines if near(line, [w for w in windows if w[0] == "slowed link"], 0)]
    if not any(line["outcome"] == "cancelled" for line in slowed):
        failures.append("no call was cancelled while the link was slowed")
    for what, start, end in windows:
        if what in CUTTING:
            during = [line for line in lines if start <= line["start_ms"] and line["end_ms"] <= end]
            if not any(line.get("by") == "closed" for line in during):
                failures.append(f"no call was answered by the failure policy while {what}")
    last_end = max(end for _, _, end in windows)
    if len(windows) != sum(1 for _, _, what in SCHEDULE if what != "counters read"):
        failures.append("the schedule did not run to its end")
    for client in sorted({line["client"] for line in lines}):
        after = [line for line in lines if line["client"] == client and line["start_ms"] > last_end + PAD_MS]
        if not any(line.get("by") == "server" and line["outcome"] != "cancelled" for line in after):
            failures.append(f"{client}: never answered by the server after the last fault")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--client", action="append", required=True, metavar="NAME=COMMAND")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--lines", metavar="FILE", help="write every call's line and the fault windows there")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"fault run: seed {seed}", file=sys.stderr)
    key = f"pacer:fault:{seed}"
    with FleetServer(None) as server, DelayProxy(server.port) as proxy:
        with open(SCRIPT) as f:
            library = "#!lua name=pacer\n" + f.read()
        begin_ms = wall_ms() + 500
        until = begin_ms + int(RUN_S * 1000)
        quiet_from, quiet_to = (begin_ms + int(q * 1000) for q in QUIET_S)
        procs = start_clients(args.client, lambda index: dict(
            url=f"redis://127.0.0.1:{proxy.port}/", key=key, until=until, quiet_from=quiet_from,
            quiet_to=quiet_to, seed=seed + index))
        windows, reads = [], []
        try:
            play(server, proxy, library, begin_ms, windows, key, reads)
        finally:
            failures, lines = collect(procs)
        counters = info(server, key)
    if args.lines:
        with open(args.lines, "w") as f:
            json.dump({"windows": windows, "reads": reads, "counters": counters, "lines": lines}, f)
    failures += check(lines, windows, counters, reads)
    finish("fault run", failures, seed)


if __name__ == "__main__":
    main()
