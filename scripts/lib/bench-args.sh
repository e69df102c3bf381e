#!/usr/bin/env bash
# Sourced by scripts/bench-redis.sh and scripts/bench-clients.sh: reads
# their arguments into $smoke and $write (0 or 1). `bench_args NAME LINES
# ARGS…`: NAME names the caller in messages, LINES (sed's `2,14`) are the
# lines of the caller's header comment that -h/--help prints. --smoke and
# --write together are refused: a smoke run measures nothing worth writing.
bench_args() {
    local name=$1 lines=$2 arg
    shift 2
    usage() { sed -n "${lines}p" "$0" | sed 's/^# \{0,1\}//'; }
    smoke=0
    write=0
    for arg in "$@"; do
        case "$arg" in
            --smoke) smoke=1 ;;
            --write) write=1 ;;
            -h|--help) usage; exit 0 ;;
            *) echo "$name: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
        esac
    done
    if [ "$smoke" = 1 ] && [ "$write" = 1 ]; then
        echo "$name: --smoke measures nothing worth writing; drop --write" >&2
        exit 2
    fi
}
