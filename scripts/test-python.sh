#!/usr/bin/env bash
# Builds and installs the Python package (bindings/python) into its own
# virtual environment, the way a user would (pip install, not editable: the
# build runs cargo for libpacer.a and compiles the cffi module), then runs
# its tests. Needs python3 (3.10+, with venv and pip), cargo and a C compiler.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/python-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check pytest==8.3.5
# A local folder is always rebuilt and reinstalled, even at the same version.
"$py" -m pip install --quiet --disable-pip-version-check ./bindings/python
"$py" -m pytest bindings/python/tests -q -p no:cacheprovider
