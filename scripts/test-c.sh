#!/usr/bin/env bash
# Builds libpacer.a / libpacer.so and runs the C tests: static and dynamic
# links, AddressSanitizer + UBSan, valgrind, threads, the header as C++17,
# and the exported-symbol check.
set -euo pipefail
# shellcheck source=scripts/lib/root.sh
. "$(dirname "$0")/lib/root.sh"

need() { command -v "$1" >/dev/null 2>&1 || { echo "installing $2"; apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }
need valgrind valgrind
need pkg-config pkg-config

cargo build --release --locked -p pacer-ffi
lib="$root/target/release"
out="$root/target/c-tests"
mkdir -p "$out/pkgconfig"
python3 tests/c/gen_vectors_h.py "$out/vectors.h"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
sed -e "s|@PREFIX@|$root|" -e "s|@LIBDIR@|$root/target/release|" -e "s|@INCLUDEDIR@|$root/include|" \
  -e "s|@VERSION@|$version|" ffi/pacer.pc.in > "$out/pkgconfig/pacer.pc"
export PKG_CONFIG_PATH="$out/pkgconfig"

CFLAGS=(-std=c11 -Wall -Wextra -Werror -pedantic -O1 -g -I "$out")
read -r -a PC_CFLAGS <<< "$(pkg-config --cflags pacer)"
read -r -a STATIC_LIBS <<< "$(pkg-config --libs --static pacer | sed 's/-lpacer/-l:libpacer.a/')"
read -r -a DYNAMIC_LIBS <<< "$(pkg-config --libs pacer)"

run() { printf -- '-- %s\n' "$1"; shift; "$@"; }

gcc "${CFLAGS[@]}" "${PC_CFLAGS[@]}" tests/c/test_pacer.c "${STATIC_LIBS[@]}" -o "$out/test_static"
gcc "${CFLAGS[@]}" "${PC_CFLAGS[@]}" tests/c/test_pacer.c "${DYNAMIC_LIBS[@]}" -Wl,-rpath,"$lib" -o "$out/test_dynamic"
gcc "${CFLAGS[@]}" "${PC_CFLAGS[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
  tests/c/test_pacer.c "${STATIC_LIBS[@]}" -o "$out/test_asan"
gcc "${CFLAGS[@]}" "${PC_CFLAGS[@]}" -pthread tests/c/test_threads.c "${STATIC_LIBS[@]}" -o "$out/test_threads"
gcc "${CFLAGS[@]}" "${PC_CFLAGS[@]}" -pthread -fsanitize=address,undefined -fno-sanitize-recover=all \
  tests/c/test_threads.c "${STATIC_LIBS[@]}" -o "$out/test_threads_asan"
g++ -std=c++17 -Wall -Wextra -Werror -pedantic "${PC_CFLAGS[@]}" tests/c/header_cpp.cpp "${STATIC_LIBS[@]}" -o "$out/test_cpp"

run "static link" "$out/test_static"
run "dynamic link" "$out/test_dynamic"
run "AddressSanitizer + UBSan" "$out/test_asan"
run "valgrind (dynamic)" valgrind -q --error-exitcode=1 --leak-check=full "$out/test_dynamic"
run "valgrind (static)" valgrind -q --error-exitcode=1 --leak-check=full "$out/test_static"
run "threads" "$out/test_threads"
run "threads under ASan + UBSan" "$out/test_threads_asan"
run "header as C++17" "$out/test_cpp"

printf -- '-- exported symbols of libpacer.so\n'
foreign=$(nm -D --defined-only "$lib/libpacer.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^pacer_' || true)
count=$(nm -D --defined-only "$lib/libpacer.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -c '^pacer_' || true)
if [ -n "$foreign" ]; then
  echo "FAIL: libpacer.so exports symbols without the pacer_ prefix:"; echo "$foreign"; exit 1
fi
echo "symbols: $count exported, all pacer_"

# The README's C programs, each built by each of the README's three command
# lines (run as written, in a folder where include/ and target/ are the
# repository's) and run.
printf -- '-- README: every C program, by every documented command line\n'
readme="$out/readme"
rm -rf "$readme" && mkdir -p "$readme"
ln -s "$root/include" "$readme/include"
ln -s "$root/target" "$readme/target"
python3 - "$root/README.md" "$readme" <<'PY'
import pathlib, re, sys
text = pathlib.Path(sys.argv[1]).read_text()
section = text[text.index("## Using the C library"):]
block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
# One way to build per comment line: the lines under it, run together.
ways = [w.strip() for w in re.split(r"^#.*$", block, flags=re.M) if w.strip()]
programs = re.findall(r"```c\n(.*?)```", text, re.S)
assert len(ways) == 4, ways
assert len(programs) == 2, len(programs)
out = pathlib.Path(sys.argv[2])
for i, way in enumerate(ways):
    (out / f"way{i}.sh").write_text(way + "\n")
for i, program in enumerate(programs):
    (out / f"program{i}.c").write_text(program)
PY
# The "installed" way builds against scripts/install.sh's prefix under a
# HOME of the test's own.
mkdir -p "$readme/home"
bash scripts/install.sh "$readme/home/.local" >/dev/null
# The shared-pacer program opens /dev/shm/myproxy-openai; it is not ours to
# keep, and one left over from another run must not be reused.
rm -f /dev/shm/myproxy-openai
for program in "$readme"/program*.c; do
  for way in "$readme"/way*.sh; do
    (cd "$readme" && rm -f a.out && cp "$program" app.c &&
      env -u PKG_CONFIG_PATH HOME="$readme/home" bash -euo pipefail "$way" &&
      ./a.out >/dev/null) || { echo "FAIL: $(basename "$program") built by: $(cat "$way")"; exit 1; }
  done
done
rm -f /dev/shm/myproxy-openai
echo "README: $(ls "$readme"/program*.c | wc -l) C programs, each built the $(ls "$readme"/way*.sh | wc -l) documented ways and run"
