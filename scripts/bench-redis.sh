#!/usr/bin/env bash
# The Redis engine's figures: the module's PACER.RESERVE and the script's
# reserve (redis/pacer.lua) beside INCR (the floor: one small write) and the
# usual GCRA rate-limit script (bench/redis/gcra.lua), all measured by
# redis-benchmark against one redis-server started here. The script runs
# both ways it ships: by EVALSHA, and loaded as a function library (FCALL).
#
#   bash scripts/bench-redis.sh            # 5 rounds; a Markdown section on stdout
#   bash scripts/bench-redis.sh --write    # the same, and it replaces the section
#                                          # between <!-- redis:begin --> and
#                                          # <!-- redis:end --> in docs/benchmarks.md
#   bash scripts/bench-redis.sh --smoke    # one round of a few hundred calls per
#                                          # case: checks everything works, times nothing
#   ROUNDS=9 REQUESTS=200000 CLIENTS=50 bash scripts/bench-redis.sh
#
# One redis-server (Debian's; scripts/redis-deps.sh installs it when absent)
# runs on a free loopback port in a temporary directory, with the module
# loaded in production mode (no test-clock) and no persistence (--save ""
# --appendonly no). Both scripts are loaded with SCRIPT LOAD. Every round
# runs every case once, in the same order, each as one
#
#   redis-benchmark -p PORT -n REQUESTS -c CLIENTS -P 1 --csv <command>
#
# on fresh keys (so every round starts alike: the admitting buckets full,
# the refusing ones primed until they refuse). After each run the keys are
# read back and the run is rejected unless every call was answered as the
# case says (admitted, or refused but for the few the refill allows).
# A figure is the median over rounds; a ratio is taken within each round,
# then the median over rounds (as docs/benchmarks.md does). The server is
# killed on exit, whatever happens; nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib/bench-args.sh
. scripts/lib/bench-args.sh
bench_args bench-redis 2,14 "$@"

if [ "$smoke" = 1 ]; then
    ROUNDS="${ROUNDS:-1}"
    REQUESTS="${REQUESTS:-300}"
    # The smoke run checks the harness, not the speed: the debug module that
    # scripts/test-redis.sh has already built serves (PROFILE=release for the other).
    PROFILE="${PROFILE:-debug}"
else
    ROUNDS="${ROUNDS:-5}"
    REQUESTS="${REQUESTS:-100000}"
    PROFILE="${PROFILE:-release}"
fi
CLIENTS="${CLIENTS:-50}"
# A bucket admits at most its burst (10^6) before refilling, so a round's
# admitting keys must see fewer calls than that.
if [ "$REQUESTS" -ge 1000000 ] || [ "$REQUESTS" -lt 10 ]; then
    echo "bench-redis: REQUESTS must be 10–999999 (the admitting buckets hold 10^6)" >&2
    exit 2
fi
DOC="docs/benchmarks.md"

# The configurations. Admitting: the pacer at 600/min with a burst of 10^6,
# so every call takes the write path (refill, debit, a ticket, the header
# written back); GCRA at the same rate and burst. Refusing: 60/min, burst 1
# (the pacer's mode is `refusing`: after the burst and the wait bound's
# worth of debt every call is refused; about one a second gets through);
# GCRA at 60 a minute, burst 1.
PACER_ADMIT=(600 1000000 120000 5 refund)
PACER_REFUSE=(60 1 120000 5 refund)
GCRA_ADMIT=(600 60000 1000000)
GCRA_REFUSE=(60 60000 1)
CASES=(incr module_admit script_admit function_admit gcra_admit module_refuse script_refuse function_refuse gcra_refuse)

started="$(date +%s)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

bash scripts/redis-deps.sh >&2
build=(cargo build --locked -p pacer-redis)
[ "$PROFILE" = release ] && build+=(--release)
echo "bench-redis: ${build[*]}" >&2
"${build[@]}" >&2
target_dir="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
module="$target_dir/$PROFILE/libpacer_redis.so"
[ -f "$module" ] || { echo "bench-redis: no module at $module" >&2; exit 1; }

scratch="$(mktemp -d "${TMPDIR:-/tmp}/pacer-bench-redis.XXXXXX")"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start the server; a port taken between choosing and binding gets another try.
port=""
for attempt in 1 2 3; do
    candidate="$(free_port)"
    redis-server --port "$candidate" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no --dir "$scratch" --logfile "$scratch/redis.log" \
        --loadmodule "$module" >"$scratch/server.out" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 100); do
        kill -0 "$server_pid" 2>/dev/null || break
        if [ "$(redis-cli -p "$candidate" PING 2>/dev/null || true)" = PONG ]; then
            port="$candidate"
            break
        fi
        sleep 0.1
    done
    [ -n "$port" ] && break
    echo "bench-redis: redis-server on port $candidate did not start (attempt $attempt):" >&2
    tail -5 "$scratch/redis.log" >&2 2>/dev/null || true
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
done
[ -n "$port" ] || { echo "bench-redis: could not start redis-server" >&2; exit 1; }

cli() { redis-cli -p "$port" "$@"; }
fail() { echo "bench-redis: $*" >&2; exit 1; }

cli MODULE LIST | grep -qx pacer || fail "the module did not load (MODULE LIST: $(cli MODULE LIST | tr '\n' ' '))"
pacer_sha="$(cli -x SCRIPT LOAD <redis/pacer.lua)"
gcra_sha="$(cli -x SCRIPT LOAD <bench/redis/gcra.lua)"
[[ "$pacer_sha" =~ ^[0-9a-f]{40}$ ]] || fail "SCRIPT LOAD redis/pacer.lua: $pacer_sha"
[[ "$gcra_sha" =~ ^[0-9a-f]{40}$ ]] || fail "SCRIPT LOAD bench/redis/gcra.lua: $gcra_sha"
# The same script as a function library, loaded as docs/redis.md says.
library="$( { echo '#!lua name=pacer'; cat redis/pacer.lua; } | cli -x FUNCTION LOAD REPLACE)"
[ "$library" = pacer ] || fail "FUNCTION LOAD redis/pacer.lua: $library"

# The command of case $1 on round $2's key, into CMD.
case_command() {
    local key="bench:$1:$2"
    case "$1" in
        incr) CMD=(INCR "$key") ;;
        module_admit) CMD=(PACER.RESERVE "$key" "${PACER_ADMIT[@]}") ;;
        script_admit) CMD=(EVALSHA "$pacer_sha" 1 "$key" reserve "${PACER_ADMIT[@]}") ;;
        function_admit) CMD=(FCALL pacer 1 "$key" reserve "${PACER_ADMIT[@]}") ;;
        gcra_admit) CMD=(EVALSHA "$gcra_sha" 1 "$key" "${GCRA_ADMIT[@]}") ;;
        module_refuse) CMD=(PACER.RESERVE "$key" "${PACER_REFUSE[@]}") ;;
        script_refuse) CMD=(EVALSHA "$pacer_sha" 1 "$key" reserve "${PACER_REFUSE[@]}") ;;
        function_refuse) CMD=(FCALL pacer 1 "$key" reserve "${PACER_REFUSE[@]}") ;;
        gcra_refuse) CMD=(EVALSHA "$gcra_sha" 1 "$key" "${GCRA_REFUSE[@]}") ;;
    esac
}

# One field of a bucket's INFO (the module's command, the script's or the
# function's op); 0 when there is no bucket yet.
pacer_field() { # engine key name
    local out
    case "$1" in
        module) out="$(cli PACER.INFO "$2" 2>&1)" ;;
        script) out="$(cli EVALSHA "$pacer_sha" 1 "$2" info 2>&1)" ;;
        function) out="$(cli FCALL pacer 1 "$2" info 2>&1)" ;;
    esac
    case "$out" in *"no bucket at key"*) echo 0; return ;; esac
    printf '%s\n' "$out" | awk -v n="$3" 'prev == n { print; found = 1; exit } { prev = $0 } END { if (!found) exit 1 }' \
        || fail "INFO $2: no field $3 in: $(printf '%s' "$out" | tr '\n' ' ')"
}

server_ms() { cli TIME | awk 'NR == 1 { s = $1 } NR == 2 { printf "%.0f\n", s * 1000 + int($1 / 1000) }'; }
gcra_tat() { local v; v="$(cli GET "$1")"; echo "${v:-0}"; }

# Call a refusing case's command until it refuses (the first calls spend the
# burst and, for the pacer, the wait bound's debt).
prime() { # case
    local first
    for _ in $(seq 1 50); do
        first="$(cli "${CMD[@]}" | head -1)"
        case "$1:$first" in
            module_refuse:refused|script_refuse:refused|function_refuse:refused|gcra_refuse:0) return ;;
        esac
    done
    fail "$1: still not refusing after 50 calls (last answer: $first)"
}

results="$scratch/results.tsv"
printf 'round\tcase\trps\tp50_ms\tp99_ms\tadmitted\trefused\tseconds\n' >"$results"
n="$REQUESTS"

for round in $(seq 1 "$ROUNDS"); do
    for case_id in "${CASES[@]}"; do
        case_command "$case_id" "$round"
        key="${CMD[1]}"
        case "${CMD[0]}" in EVALSHA|FCALL) key="${CMD[3]}" ;; esac
        engine="${case_id%%_*}"
        case "$case_id" in *_refuse) prime "$case_id" ;; esac
        admitted0=0 refused0=0 tat0=0 t0_ms=0
        case "$engine" in
            module|script|function)
                admitted0="$(pacer_field "$engine" "$key" admitted)"
                refused0="$(pacer_field "$engine" "$key" refused)" ;;
            gcra) tat0="$(gcra_tat "$key")"; t0_ms="$(server_ms)" ;;
        esac

        echo "bench-redis: round $round/$ROUNDS $case_id: redis-benchmark -n $n -c $CLIENTS -P 1 ${CMD[*]}" >&2
        wall0="$(date +%s%N)"
        status=0
        redis-benchmark -p "$port" -n "$n" -c "$CLIENTS" -P 1 --csv "${CMD[@]}" \
            >"$scratch/run.csv" 2>"$scratch/run.err" || status=$?
        wall1="$(date +%s%N)"
        [ "$status" = 0 ] && ! grep -q . "$scratch/run.err" \
            || fail "$case_id: redis-benchmark exited $status: $(head -3 "$scratch/run.err")"
        seconds="$(awk -v a="$wall0" -v b="$wall1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"
        # At most one a second gets through a refusing bucket (60/min), plus one.
        allowance="$(awk -v s="$seconds" 'BEGIN { printf "%d", s + 2 }')"

        # Every call answered as the case says.
        case "$engine" in
            incr)
                got="$(cli GET "$key")"
                [ "$got" = "$n" ] || fail "$case_id: $key is $got after $n INCRs"
                admitted="$n" refused=0 ;;
            module|script|function)
                admitted=$(( $(pacer_field "$engine" "$key" admitted) - admitted0 ))
                refused=$(( $(pacer_field "$engine" "$key" refused) - refused0 ))
                [ $((admitted + refused)) = "$n" ] \
                    || fail "$case_id: $admitted admitted + $refused refused is not $n calls"
                case "$case_id" in
                    *_admit) [ "$refused" = 0 ] || fail "$case_id: $refused refused" ;;
                    *_refuse) [ "$admitted" -le "$allowance" ] \
                        || fail "$case_id: $admitted admitted in ${seconds}s at 60/min" ;;
                esac ;;
            gcra)
                # No counters: TAT moves T (100 ms admitting, 1000 ms refusing)
                # per admission, and a refusal leaves it.
                tat1="$(gcra_tat "$key")"
                case "$case_id" in
                    gcra_admit)
                        read -r admitted ok < <(awk -v a="$tat1" -v t="$t0_ms" -v s="$seconds" -v n="$n" \
                            'BEGIN { k = int((a - t) / 100 + 1e-6); print k, (k >= n && k <= n + s * 10 + 2) }')
                        [ "$ok" = 1 ] || fail "$case_id: TAT advanced $admitted intervals for $n calls in ${seconds}s"
                        admitted="$n" refused=0 ;;
                    gcra_refuse)
                        read -r admitted ok < <(awk -v a="$tat1" -v b="$tat0" -v m="$allowance" \
                            'BEGIN { k = int((a - b) / 1000 + 0.999); print k, (k >= 0 && k <= m) }')
                        [ "$ok" = 1 ] || fail "$case_id: TAT advanced $admitted intervals in ${seconds}s at 60/min"
                        # An upper bound: TAT also moves when an admission came after an idle gap.
                        refused=$((n - admitted)) ;;
                esac ;;
        esac

        python3 - "$scratch/run.csv" "$round" "$case_id" "$admitted" "$refused" "$seconds" >>"$results" <<'PY'
import csv, sys
path, round_, case, admitted, refused, seconds = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
if len(rows) != 1:
    sys.exit("bench-redis: %s: expected one CSV row from redis-benchmark, got %r" % (case, open(path).read()))
row = rows[0]
print("\t".join([round_, case, row["rps"], row["p50_latency_ms"], row["p99_latency_ms"], admitted, refused, seconds]))
PY
    done
done

# A server still answering after every run: it did not crash under load.
[ "$(cli PING)" = PONG ] || fail "the server stopped answering"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

revision="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# The module's and script's sources uncommitted or untracked: say so.
if [ -n "$(git status --porcelain -- redis bench/redis core 2>/dev/null | head -c1)" ]; then
    revision="$revision, with uncommitted changes under redis/, bench/redis/ or core/"
fi

section="$scratch/section.md"
python3 - "$results" "$section" <<PY
import csv, json, statistics, sys

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
out = open(sys.argv[2], "w")
smoke = $smoke == 1
rounds = $ROUNDS
meta = {
    "command": "ROUNDS=$ROUNDS REQUESTS=$REQUESTS CLIENTS=$CLIENTS bash scripts/bench-redis.sh" + ("" if smoke else " --write"),
    "date": "$(date -u '+%Y-%m-%d %H:%M UTC')",
    "minutes": round(($(date +%s) - $started) / 60, 1),
    "load_before": "$load_before",
    "load_after": "$load_after",
    "revision": "$revision",
    "nproc": "$(nproc)",
    "cpu": "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')",
    "server": "$(redis-server --version)",
    "benchmark": "$(redis-benchmark --version)",
    "profile": "$PROFILE",
}
N, C = $REQUESTS, $CLIENTS
PA = "${PACER_ADMIT[*]}"
PR = "${PACER_REFUSE[*]}"
GA = "${GCRA_ADMIT[*]}"
GR = "${GCRA_REFUSE[*]}"

by = {}
for r in rows:
    by.setdefault(r["case"], {})[int(r["round"])] = r

def med(case, field):
    vals = [float(by[case][k][field]) for k in sorted(by[case])]
    return statistics.median(vals), min(vals), max(vals)

def ratio(num, den):
    vals = [float(by[num][k]["rps"]) / float(by[den][k]["rps"]) for k in sorted(by[num])]
    return statistics.median(vals), min(vals), max(vals)

def rng(t, f="{:.2f}", unit=""):
    m, lo, hi = t
    return (f + unit + " [" + f + ", " + f + "]").format(m, lo, hi)

def ops(t):
    m, lo, hi = t
    return "{:,.0f} [{:,.0f}, {:,.0f}]".format(m, lo, hi)

def p(*a):
    print(*a, file=out)

labels = {
    "incr": ("INCR (floor)", "INCR bench:incr:<round>"),
    "module_admit": ("module, admitting", "PACER.RESERVE bench:module_admit:<round> " + PA),
    "script_admit": ("script, admitting", "EVALSHA <sha of redis/pacer.lua> 1 bench:script_admit:<round> reserve " + PA),
    "function_admit": ("function, admitting", "FCALL pacer 1 bench:function_admit:<round> reserve " + PA),
    "gcra_admit": ("GCRA script, admitting", "EVALSHA <sha of bench/redis/gcra.lua> 1 bench:gcra_admit:<round> " + GA),
    "module_refuse": ("module, refusing", "PACER.RESERVE bench:module_refuse:<round> " + PR),
    "script_refuse": ("script, refusing", "EVALSHA <sha of redis/pacer.lua> 1 bench:script_refuse:<round> reserve " + PR),
    "function_refuse": ("function, refusing", "FCALL pacer 1 bench:function_refuse:<round> reserve " + PR),
    "gcra_refuse": ("GCRA script, refusing", "EVALSHA <sha of bench/redis/gcra.lua> 1 bench:gcra_refuse:<round> " + GR),
}
order = ["incr", "module_admit", "script_admit", "function_admit", "gcra_admit", "module_refuse", "script_refuse", "function_refuse", "gcra_refuse"]

p("<!-- redis:begin -->")
p("## Redis: the module and the script beside INCR")
p()
if smoke:
    p("**Smoke run** (\`--smoke\`): a few hundred calls per case, one round; it checks the harness and the answers, and its figures mean nothing.")
    p()
p("Generated by \`bash scripts/bench-redis.sh --write\`, which replaces only this section (between the \`redis:begin\` and \`redis:end\` markers); \`scripts/bench.sh\` does not run it.")
p("One \`redis-server\` is started on a free loopback port with the module loaded (production mode: no \`test-clock\`) and no persistence (\`--save \"\" --appendonly no\`);")
p("\`redis-benchmark\` runs on the same machine and reaches it over loopback, so client and server share the two cores (and with whatever else runs).")
p("Each run is \`redis-benchmark -p PORT -n %d -c %d -P 1 --csv <command>\`: %d calls from %d connections, no pipelining, all on one key." % (N, C, N, C))
p("Every round runs the nine cases below once, in this order, on fresh keys (refusing buckets are first called until they refuse);")
p("after each run the keys are read back and the run is rejected unless every call was answered as its case says.")
p("A figure is the median over rounds with [min, max]; a ratio is taken within each round (both sides from the same round), then the median over rounds.")
p()
p("- **Script** and **function** run the same \`redis/pacer.lua\`: by \`EVALSHA\` (every call runs the file's definitions, then the command) and loaded once as a function library (\`FUNCTION LOAD\` with \`#!lua name=pacer\` before its first line; a call runs only the command), as docs/redis.md describes.")
p("- **INCR** is the floor: a minimal write command (a string key read, incremented, written back), with the same client, connection count and round trips.")
p("- **Admitting** (\`%s\`: 600/min, burst 10^6): every call admits, so every call takes the write path: refill, debit, a ticket (its serial, MAC and, past 65536 tickets, a \`SETBIT\`), the header written back." % PA)
p("- **Refusing** (\`%s\`: 60/min, burst 1, mode \`refusing\`): about one call a second is admitted and every other is refused, the path under overload. A refusal still writes the header (its counter)." % PR)
p("- **GCRA** (\`bench/redis/gcra.lua\`) is the rate-limit script people usually copy, written from the published algorithm: one stored time (TAT), \`GET\`, \`TIME\` and, when it admits, \`SET … PX\`; a refusal writes nothing. Same rate and burst as the pacer's cases (\`EVALSHA sha 1 key %s\` and \`… %s\`: rate, period ms, burst)." % (GA, GR))
p()
p("| | |")
p("|---|---|")
for k, v in [
    ("command", "\`" + meta["command"] + "\`"),
    ("rounds", str(rounds)),
    ("date", "%s (took %s min)" % (meta["date"], meta["minutes"])),
    ("load average (1, 5, 15 min)", "before %s; after %s" % (meta["load_before"], meta["load_after"])),
    ("revision", meta["revision"]),
    ("cores (\`nproc\`)", meta["nproc"]),
    ("CPU", meta["cpu"]),
    ("server", meta["server"]),
    ("client", meta["benchmark"] + ", same machine, loopback"),
    ("module build", "\`cargo build --release -p pacer-redis\`" if meta["profile"] == "release" else "debug (\`cargo build -p pacer-redis\`)"),
]:
    p("| %s | %s |" % (k, v))
p()

targets = [
    ("module at least 80% of INCR's ops/s, admitting (\`module_admit / incr\`)", ratio("module_admit", "incr"), lambda m: m >= 0.80),
    ("module at least 80% of INCR's ops/s, refusing (\`module_refuse / incr\`)", ratio("module_refuse", "incr"), lambda m: m >= 0.80),
    ("script within 2× of the module, admitting (\`script_admit / module_admit\` ops/s at least 0.50)", ratio("script_admit", "module_admit"), lambda m: m >= 0.50),
    ("script within 2× of the module, refusing (\`script_refuse / module_refuse\` ops/s at least 0.50)", ratio("script_refuse", "module_refuse"), lambda m: m >= 0.50),
    ("script as a function within 2× of the module, admitting (\`function_admit / module_admit\` ops/s at least 0.50)", ratio("function_admit", "module_admit"), lambda m: m >= 0.50),
    ("script as a function within 2× of the module, refusing (\`function_refuse / module_refuse\` ops/s at least 0.50)", ratio("function_refuse", "module_refuse"), lambda m: m >= 0.50),
]
p("### Targets")
p()
p("| target | ops/s ratio | verdict |")
p("|---|---:|---|")
for name, t, ok in targets:
    verdict = "(smoke: no verdict)" if smoke else ("**met**" if ok(t[0]) else "**missed**")
    p("| %s | %s | %s |" % (name, rng(t, unit="×"), verdict))
p()
p("### Figures")
p()
p("| case | command | ops/s | p50 ms | p99 ms | admitted / refused (last round) |")
p("|---|---|---:|---:|---:|---|")
for c in order:
    last = by[c][max(by[c])]
    answers = "%s / %s" % (last["admitted"], last["refused"])
    if c == "gcra_refuse":
        answers = "≤ %s / ≥ %s" % (last["admitted"], last["refused"])
    elif c == "incr":
        answers = "—"
    p("| %s | \`%s\` | %s | %s | %s | %s |" % (labels[c][0], labels[c][1], ops(med(c, "rps")),
        rng(med(c, "p50_ms"), "{:.3f}"), rng(med(c, "p99_ms"), "{:.3f}"), answers))
p()
p("Ratios of ops/s, within each round:")
p()
p("| ratio | admitting | refusing |")
p("|---|---:|---:|")
for name, a, b in [
    ("module / INCR", ("module_admit", "incr"), ("module_refuse", "incr")),
    ("script / INCR", ("script_admit", "incr"), ("script_refuse", "incr")),
    ("function / INCR", ("function_admit", "incr"), ("function_refuse", "incr")),
    ("GCRA script / INCR", ("gcra_admit", "incr"), ("gcra_refuse", "incr")),
    ("script / module", ("script_admit", "module_admit"), ("script_refuse", "module_refuse")),
    ("function / module", ("function_admit", "module_admit"), ("function_refuse", "module_refuse")),
    ("function / script", ("function_admit", "script_admit"), ("function_refuse", "script_refuse")),
    ("script / GCRA script", ("script_admit", "gcra_admit"), ("script_refuse", "gcra_refuse")),
    ("module / GCRA script", ("module_admit", "gcra_admit"), ("module_refuse", "gcra_refuse")),
]:
    p("| %s | %s | %s |" % (name, rng(ratio(*a), unit="×"), rng(ratio(*b), unit="×")))
p()
p("Per round (ops/s):")
p()
p("| round | " + " | ".join(order) + " |")
p("|---:|" + "---:|" * len(order))
for k in sorted(by["incr"]):
    p("| %d | " % k + " | ".join("{:,.0f}".format(float(by[c][k]["rps"])) for c in order) + " |")
p()
p("<!-- redis:end -->")
PY

if [ "$write" = 1 ]; then
    python3 - "$section" "$DOC" <<'PY'
import re, sys
section = open(sys.argv[1]).read().rstrip("\n")
path = sys.argv[2]
doc = open(path).read()
begin, end = "<!-- redis:begin -->", "<!-- redis:end -->"
if doc.count(begin) > 1 or doc.count(end) > 1 or (begin in doc) != (end in doc):
    sys.exit("bench-redis: %s: expected one %s and one %s" % (path, begin, end))
if begin in doc:
    i, j = doc.index(begin), doc.index(end) + len(end)
    if j < i:
        sys.exit("bench-redis: %s: %s before %s" % (path, end, begin))
    doc = doc[:i] + section + doc[j:]
else:
    doc = doc.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(doc)
PY
    echo "bench-redis: wrote the Redis section of $DOC" >&2
fi

cat "$section"
if [ "$smoke" = 1 ]; then
    echo "bench-redis: smoke ok (${#CASES[@]} cases × $REQUESTS calls, every answer checked)" >&2
fi
