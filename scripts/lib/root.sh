#!/usr/bin/env bash
# Sourced first by the scripts that name the repository root: moves to the
# root (the parent of scripts/) and keeps its absolute path in $root.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
