#!/usr/bin/env bash
# Builds checks/nostd (a #![no_std] staticlib with its own #[panic_handler]
# that links every pacer-core entry point a binding uses), then scans the
# archive's symbols: it fails if any object in it defines or references an
# allocator. Building at all proves pacer-core links no `std` (std would
# bring a second `panic_impl` lang item); the scan proves it links no
# `alloc` and calls no C allocator (SPEC §6.7).
#
# Usage: scripts/check-nostd.sh    (env CARGO_TARGET_DIR, default target-nostd)
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target-nostd}"
start=$SECONDS

# panic=abort for this crate only: a no_std staticlib has no unwinder, and
# the workspace profiles keep unwinding for the FFI crate.
cargo rustc -p pacer-nostd-check --release --quiet -- -C panic=abort

archive="$CARGO_TARGET_DIR/release/libpacer_nostd_check.a"
[[ -f "$archive" ]] || { echo "check-nostd: FAIL: $archive was not built" >&2; exit 1; }

# Name the object format: rustc embeds LLVM bitcode in core's and
# compiler_builtins' objects, and GNU nm would otherwise hand those to its
# LLVM plugin, fail, and silently report "no symbols" for them.
case "$(uname -m)" in
  x86_64) nm_target=(--target=elf64-x86-64) ;;
  aarch64) nm_target=(--target=elf64-littleaarch64) ;;
  *) nm_target=() ;;
esac
nm_err=$(mktemp)
trap 'rm -f "$nm_err"' EXIT
# One line per symbol: "member<TAB>type<TAB>name", names demangled.
listing=$(nm "${nm_target[@]}" -A -C "$archive" 2>"$nm_err")
if [[ -s "$nm_err" ]]; then
  echo "check-nostd: FAIL: nm could not read every object of $archive:" >&2
  sort -u "$nm_err" | head -5 >&2
  exit 1
fi
symbols=$(printf '%s\n' "$listing" \
  | sed -nE 's/^[^:]+:([^:]+):[0-9a-fA-F ]{8,16} ([A-Za-z?-]) (.*)$/\1\t\2\t\3/p')
count=$(printf '%s\n' "$symbols" | grep -c . || true)
# Sanity: the scan must see libcore's code and the pacer's code
# (`Pacer::new`: `reserve` and `release` are #[inline], so their code is in
# the check's own function, which the scan reads too).
for needed in 'core::fmt::write' 'pacer_core::pacer::Pacer::new' 'pacer_nostd_check'; do
  if ! grep -qF "	T	$needed" <<<"$symbols"; then
    echo "check-nostd: FAIL: $needed not found defined in $archive: the scan would be blind" >&2
    exit 1
  fi
done

# Rust's allocator shims, the C allocator by exact name (possibly
# versioned, e.g. malloc@GLIBC_2.2.5), and any item of the `alloc` crate
# (`alloc::…` as a path root, not `core::alloc::Layout`).
pattern='(__rust_alloc|__rust_alloc_zeroed|__rust_realloc|__rust_dealloc|__rg_alloc|__rg_alloc_zeroed|__rg_realloc|__rg_dealloc|__rust_alloc_error_handler)'
pattern+='|	(malloc|calloc|realloc|free)(@.*)?$'
pattern+='|(^|[^A-Za-z0-9_:])alloc::'
hits=$(printf '%s\n' "$symbols" | grep -E "$pattern" || true)

# The raw (mangled) names too, in case a name does not demangle:
# legacy `_ZN5alloc…` and v0 crate roots `…C<disambiguator>_5alloc`.
raw_hits=$(nm "${nm_target[@]}" -A "$archive" 2>/dev/null | grep -E '_ZN5alloc|C[0-9A-Za-z_]*_5alloc[0-9A-Z]' || true)

if [[ -n "$hits" || -n "$raw_hits" ]]; then
  objects=$(printf '%s\n' "$hits" | cut -f1 | sed -E 's/-[0-9a-f]+\..*//' | sort -u | tr '\n' ' ')
  echo "check-nostd: FAIL: $(printf '%s\n' "$hits" | grep -c . || true) allocator symbols in $archive, in objects of: ${objects:-?}" >&2
  echo "  allocator shims and C allocator (member, type, symbol):" >&2
  printf '%s\n' "$hits" | grep -vE '(^|[^A-Za-z0-9_:])alloc::' | sort -u | head -20 | sed 's/^/    /' >&2 || true
  echo "  items of the alloc crate (first 10):" >&2
  printf '%s\n' "$hits" | grep -E '(^|[^A-Za-z0-9_:])alloc::' | sort -u | head -10 | sed 's/^/    /' >&2 || true
  if [[ -z "$hits" ]]; then
    printf '%s\n' "$raw_hits" | sort -u | head -20 | sed 's/^/    /' >&2 || true
  fi
  exit 1
fi

# The crate is no_std only when built with panic=abort (see its lib.rs):
# an archive carrying std's objects means that did not happen.
ar_members=$(ar t "$archive")
if grep -qE '^std-' <<<"$ar_members"; then
  echo "check-nostd: FAIL: $archive contains std's objects (built without -C panic=abort?)" >&2
  exit 1
fi
members=$(grep -c '^pacer_core-' <<<"$ar_members" || true)
if [[ "$members" -eq 0 ]]; then
  echo "check-nostd: FAIL: no pacer_core object in $archive" >&2
  exit 1
fi
echo "check-nostd: PASS: no_std staticlib built; $count symbols in $(grep -c . <<<"$ar_members") objects ($members from pacer-core) reference no allocator ($((SECONDS - start))s)"
