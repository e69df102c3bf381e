#!/usr/bin/env bash
# Sourced by scripts/fuzz.sh and scripts/test-fuzz.sh: checks the nightly
# toolchain and installs cargo-fuzz from crates.io when `cargo fuzz` is
# absent (nothing else is downloaded). $1 names the caller in messages.
fuzz_tools() {
  if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "$1: the nightly toolchain is not installed (cargo-fuzz needs it)" >&2
    exit 1
  fi
  if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "$1: installing cargo-fuzz (cargo install cargo-fuzz --locked)"
    cargo install cargo-fuzz --locked
  fi
}
