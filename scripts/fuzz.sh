#!/usr/bin/env bash
# The long fuzz run of the C ABI (cargo-fuzz / libFuzzer on the nightly
# toolchain): both targets (fuzz/fuzz_targets/) side by side, first under
# AddressSanitizer, then once more without ASan but with debug assertions
# (std's UB precondition checks) and overflow checks. The harness counts
# every call into the C ABI and prints the count at exit; this script adds
# them up, requires at least MIN_CALLS (10^7), minimises every crash into
# fuzz/regressions/<target>/ and writes the figures to docs/fuzzing.md.
#
#   bash scripts/fuzz.sh                       # about 8 minutes on 2 cores
#   ASAN_SECONDS=600 CHECKED_SECONDS=300 bash scripts/fuzz.sh
#
# The corpus is kept in fuzz/corpus/<target> (not committed) and seeded from
# fuzz/seeds/<target>. Installs cargo-fuzz from crates.io when `cargo fuzz`
# is absent; downloads nothing else. Exits non-zero on a crash, an oracle
# failure or too few calls.
set -euo pipefail
# shellcheck source=scripts/lib/root.sh
. "$(dirname "$0")/lib/root.sh"

ASAN_SECONDS="${ASAN_SECONDS:-240}"
CHECKED_SECONDS="${CHECKED_SECONDS:-120}"
MIN_CALLS="${MIN_CALLS:-10000000}"
TARGETS=(abi_calls shared_open)

# shellcheck source=scripts/fuzz-tools.sh
. "$root/scripts/fuzz-tools.sh"
fuzz_tools fuzz

cd "$root/fuzz"
work="$root/fuzz/target/long"
rm -rf "$work"
mkdir -p "$work"
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
revision=$(git -C "$root" rev-parse --short HEAD)
if ! git -C "$root" diff --quiet HEAD -- ffi core include 2>/dev/null; then
  revision="$revision (with uncommitted changes to ffi/, core/ or include/)"
fi

# build name → extra cargo-fuzz arguments and RUSTFLAGS.
declare -A ARGS=(
  [asan]=""
  [checked]="--sanitizer none --target-dir target/checked"
)
declare -A FLAGS=(
  [asan]=""
  [checked]="-Coverflow-checks=on"
)
declare -A SECONDS_FOR=([asan]="$ASAN_SECONDS" [checked]="$CHECKED_SECONDS")
declare -A DESCRIBE=(
  [asan]="AddressSanitizer, debug assertions (cargo-fuzz's default build)"
  [checked]="no sanitizer; debug assertions (std's UB precondition checks) and overflow checks"
)

for b in asan checked; do
  # shellcheck disable=SC2086
  if ! RUSTFLAGS="${FLAGS[$b]}" cargo +nightly fuzz build ${ARGS[$b]} >"$work/build-$b.log" 2>&1; then
    echo "fuzz: the $b build failed (log: $work/build-$b.log)" >&2
    tail -n 20 "$work/build-$b.log" >&2
    exit 1
  fi
done

rows=()
total_calls=0
total_runs=0
crashes_total=0
failures=()
expect_line=""

for b in asan checked; do
  pids=()
  for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$b/$t"
    if [ -d "seeds/$t" ]; then cp -n seeds/"$t"/* "corpus/$t"/ 2>/dev/null || true; fi
    # shellcheck disable=SC2086
    ( rc=0
      RUSTFLAGS="${FLAGS[$b]}" cargo +nightly fuzz run ${ARGS[$b]} "$t" "corpus/$t" -- \
        -max_total_time="${SECONDS_FOR[$b]}" -max_len=4096 -print_final_stats=1 \
        -artifact_prefix="artifacts/$b/$t/" >"$work/$b-$t.log" 2>&1 || rc=$?
      echo "$rc" >"$work/$b-$t.rc" ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done

  for t in "${TARGETS[@]}"; do
    log="$work/$b-$t.log"
    rc=$(cat "$work/$b-$t.rc" 2>/dev/null || echo "?")
    line=$(grep -E '^pacer-fuzz: target=' "$log" | tail -n 1 || true)
    calls=$(sed -n 's/.* calls=\([0-9]*\).*/\1/p' <<<"$line")
    iters=$(sed -n 's/.* iterations=\([0-9]*\).*/\1/p' <<<"$line")
    [ -n "$line" ] && expect_line="${line##*expect=}"
    runs=$(grep -Eo '^Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -n 1 || true)
    runs="${runs:-${iters:-0}}"
    covline=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 || true)
    cov=$(awk '{print $2}' <<<"$covline")
    ft=$(awk '{print $4}' <<<"$covline")
    corp=$(awk '{print $6}' <<<"$covline")
    secs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -Eo '[0-9]+ second' | grep -Eo '[0-9]+' | tail -n 1 || true)
    found=0
    for a in "artifacts/$b/$t"/crash-* "artifacts/$b/$t"/oom-* "artifacts/$b/$t"/timeout-* "artifacts/$b/$t"/leak-*; do
      [ -e "$a" ] || continue
      found=$((found + 1))
      mkdir -p "regressions/$t"
      name="$b-$(basename "$a")"
      # shellcheck disable=SC2086
      if RUSTFLAGS="${FLAGS[$b]}" cargo +nightly fuzz tmin ${ARGS[$b]} "$t" "$a" -r 2000 >"$work/tmin-$name.log" 2>&1; then :; fi
      # tmin writes artifacts/<target>/minimized-from-<hash> (none when the
      # input cannot be made smaller).
      min="artifacts/$t/minimized-from-$(basename "$a" | sed 's/^[a-z]*-//')"
      [ -e "$min" ] || min="$a"
      cp "$min" "regressions/$t/$name"
      failures+=("$b/$t: $(grep -m1 -E 'panicked at|ERROR: AddressSanitizer|deadly signal' -A1 "$log" | tr '\n' ' ' | cut -c1-200) → fuzz/regressions/$t/$name")
    done
    if [ "$rc" != 0 ] && [ "$found" = 0 ]; then
      failures+=("$b/$t: exit $rc without an artifact (log: $log)")
    fi
    if [ -z "$line" ]; then
      failures+=("$b/$t: the harness printed no call count (log: $log)")
    fi
    crashes_total=$((crashes_total + found))
    total_calls=$((total_calls + ${calls:-0}))
    total_runs=$((total_runs + runs))
    rows+=("| $b | \`$t\` | ${secs:-?} | $runs | ${calls:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $found |")
    echo "fuzz: $b $t: runs=$runs calls=${calls:-?} cov=${cov:-?} ft=${ft:-?} crashes=$found (exit $rc)"
  done
done

if [ "$total_calls" -lt "$MIN_CALLS" ]; then
  failures+=("only $total_calls calls into the C ABI, fewer than $MIN_CALLS: raise ASAN_SECONDS")
fi

regressions=$(cd "$root/fuzz" && find regressions -type f ! -name '*.md' 2>/dev/null | sort || true)

{
  cat <<EOF
# Fuzzing the C ABI

Generated by \`scripts/fuzz.sh\`; do not edit by hand. The smoke run in the
test command is \`scripts/test-fuzz.sh\` (about one minute, run by
\`scripts/test.sh\`).

## Last long run

| | |
|---|---|
| date | $started_at |
| revision | $revision |
| command | \`ASAN_SECONDS=$ASAN_SECONDS CHECKED_SECONDS=$CHECKED_SECONDS bash scripts/fuzz.sh\` |
| toolchain | $(rustc +nightly --version) , $(cargo fuzz --version) |
| switched checks in force | ${expect_line:-?} |
| fuzz inputs run | $total_runs |
| calls into the C ABI | $total_calls (required: at least $MIN_CALLS) |
| crashes and oracle failures | $crashes_total |

| build | target | seconds | runs | calls into the C ABI | cov (edges) | ft (features) | corpus | crashes |
|---|---|---|---|---|---|---|---|---|
EOF
  printf '%s\n' "${rows[@]}"
  cat <<EOF

Builds: \`asan\` = ${DESCRIBE[asan]}; \`checked\` = ${DESCRIBE[checked]}.
Calls are counted by the harness (every \`pacer_*\` call, including the
oracles' own reads such as \`pacer_get_info\`) and printed at exit;
\`cov\`/\`ft\` are libFuzzer's last coverage line; the corpus is kept in
\`fuzz/corpus/\` between runs (not committed).

EOF
  if [ "${#failures[@]}" -gt 0 ]; then
    echo "Failures in this run:"
    echo
    for f in "${failures[@]}"; do echo "- $f"; done
    echo
  fi
  cat <<'EOF'
## Targets

- `abi_calls` (`fuzz/src/calls.rs`): random sequences of up to 64 calls over
  three pacers and two notice registries in caller storage (initially a
  repeated random byte): `pacer_init` with valid and invalid configs
  (release policies outside the enum included), `pacer_reserve`,
  `pacer_reserve_or_book`, `pacer_redeem`, `pacer_release` with fresh,
  copied, twice-released, forged and other-pacer tickets and bookings,
  clocks of 0, `u64::MAX`, small and far steps both ways;
  `pacer_get_info` / `pacer_get_counters`; `pacer_refusal_body`,
  `pacer_notice_render`, `pacer_notice_key` with buffers of length 0 (NULL
  and not), NULL with a length, random, exact and one short;
  `pacer_resolve` on random NUL-terminated bytes (non-UTF-8 included);
  `pacer_mode_notice`; `pacer_notice_kind_name`; the registry (init,
  garbage storage, `first_time` with resolved and forged notices);
  `pacer_status_str` of any `u32`; the derived-quantity functions and the
  constants. NULL in every pointer position, and misaligned pacer, registry,
  ticket and booking pointers (8 bytes into an aligned buffer first).
- `shared_open` (`fuzz/src/shared.rs`): in a private directory under
  `$TMPDIR` (one per process, removed at exit; those of crashed processes
  are removed by the next start), lays out nothing, a genuine shared-pacer
  file (made at startup) with patched header fields, state word and bytes,
  random bytes or zeros of size 0, short, header-only, exact, long or one
  page, with a random mode and possibly another owner, a symlink (to a good
  file, dangling, to a directory), a directory or a FIFO; calls
  `pacer_shared_open` with it (or an invalid, non-UTF-8 or overlong name, or
  NULL / misaligned arguments) and a random config; an opened handle runs
  reserves, releases (twice, forged), `pacer_reserve` at a random later
  clock, `pacer_get_info`, a second open of the same file, then is closed
  twice, used after close, and the file unlinked.

## Oracles

Beyond "no crash, no sanitizer report": no call returns
`PACER_STATUS_PANIC`; a failing call leaves its out-parameters (pre-filled
with 0xA5) and the pacer, registry, ticket, booking, handle and file it was
given byte-for-byte unchanged (`BUFFER_TOO_SHORT`: only `*out_written`, with
the needed length, which a second call then fills exactly); the first
failing check decides the status (NULL → `NULL_PARAMETER`, misaligned →
`MISALIGNED`, uninitialised → `NOT_INITIALIZED`, unknown enum →
`INVALID_ENUM`, ...); `pacer_init` accepts exactly the configs the
documented rules accept; after every step `-max_debt_units <= tokens_units
<= capacity_units` and no counter decreases; admitted waits are within the
wait bound; a ticket struct released twice refunds at most once; a live
ticket or booking of another pacer returns `FOREIGN_TICKET`; every resolved
budget is a config `pacer_init` accepts, and a non-UTF-8 setting is resolved
with its malformed notice; the registry agrees with a model keyed by
`pacer_notice_key`; rendered text is UTF-8 within the buffer;
`pacer_status_str` is never NULL; `pacer_notice_kind_name` is NULL exactly
for unknown kinds; a shared file that opens is regular, of the layout's
size and mode 0600; the statuses that follow from a hostile file alone
(symlink, not regular, owner, permissions, truncated) are the documented
ones.

## Switched checks

`PACER_FUZZ_EXPECT` (comma-separated; `all`, `none`, `-name` to turn one
off) overrides the defaults in `fuzz/src/lib.rs` (`LANDED`). A check that is
off still generates its inputs but steers them to a harmless form.

EOF
  if [ -f regressions/README.md ]; then
    cat regressions/README.md
  fi
  if [ -n "$regressions" ]; then
    echo
    echo "Files in \`fuzz/regressions/\` (replayed by \`scripts/test-fuzz.sh\`):"
    echo
    while read -r f; do echo "- \`fuzz/$f\`"; done <<<"$regressions"
  fi
} >"$root/docs/fuzzing.md"

echo "fuzz: $total_runs runs, $total_calls calls into the C ABI, $crashes_total crashes; wrote docs/fuzzing.md"
if [ "${#failures[@]}" -gt 0 ]; then
  printf 'fuzz: %s\n' "${failures[@]}" >&2
  exit 1
fi
