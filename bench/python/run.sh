#!/usr/bin/env bash
# The Python layer's benchmark (bench/python/bench.py): makes its own venv
# (target/bench-python-venv), installs the pinned competitors
# (requirements.txt) and the binding the way scripts/test-python.sh does
# (pip install ./bindings/python: cargo builds libpacer.a, the cffi module
# and pacer._fast are compiled), then runs.
#
#   bash bench/python/run.sh            # ROUNDS rounds (default 3); JSON to
#                                       # ${BENCH_OUT:-target-bench/results}/python.json
#   bash bench/python/run.sh --smoke    # each case a few hundred calls, answers checked
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=target/bench-python-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check -r bench/python/requirements.txt
# A local folder is always rebuilt and reinstalled, even at the same version.
"$py" -m pip install --quiet --disable-pip-version-check ./bindings/python
exec "$py" bench/python/bench.py "$@"
