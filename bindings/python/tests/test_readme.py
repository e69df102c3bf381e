"""Every ```python block of README.md runs as written: each is extracted, in
order, into a file of its own and run as a program with this interpreter
(the venv the tests run in). Nothing is added around a block; what it needs
from outside comes from the environment it documents:

- ``REDIS_URL``: a block that reads it gets a real redis-server (free
  loopback port, temporary folder, killed at the end, as in test_redis.py),
  with the module named by ``PACER_REDIS_MODULE`` when that is set;
- ``REDIS_CLUSTER_NODES``: likewise a real Redis Cluster of six nodes
  (tests/redis_cluster.py), two of its nodes given as the seeds;
- ``SHARED_PACER_NAME``: a path in the test's temporary folder, so the
  shared-memory example leaves nothing in /dev/shm;
- the pacer's own settings (``PACER_RATE_PER_MIN``, ...) are removed, so
  ``Pacer.from_env()`` runs with the defaults whatever the shell has.

The number of blocks is asserted, and every fence's language is one this
test knows, so a block cannot be skipped silently (by a new block, or a
``py`` fence)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pacer
from redis_cluster import REDIS_CLI, RedisCluster
from redis_server import REDIS_SERVER, RedisServer, module_path

README = Path(__file__).resolve().parents[1] / "README.md"
#: The ```python blocks of README.md: update when one is added or removed.
PYTHON_BLOCKS = 7
#: Fence languages allowed: python (run here), sh (instructions), none (output).
KNOWN_FENCES = {"python", "sh", ""}


def fences() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of README.md, in order."""
    found: list[tuple[str, str]] = []
    language: str | None = None
    lines: list[str] = []
    for line in README.read_text(encoding="utf-8").splitlines(keepends=True):
        if language is None:
            if line.startswith("```"):
                language, lines = line[3:].strip(), []
        elif line.rstrip() == "```":
            found.append((language, "".join(lines)))
            language = None
        else:
            lines.append(line)
    assert language is None, "README.md ends inside a fenced block"
    return found


def python_blocks() -> list[str]:
    return [code for language, code in fences() if language == "python"]


def test_the_readme_has_the_expected_blocks() -> None:
    assert {language for language, _ in fences()} <= KNOWN_FENCES
    assert len(python_blocks()) == PYTHON_BLOCKS


@pytest.mark.parametrize("index", range(PYTHON_BLOCKS))
def test_the_readme_python_block_runs(index: int, tmp_path: Path) -> None:
    code = python_blocks()[index]
    program = tmp_path / f"readme_block_{index + 1}.py"
    program.write_text(code, encoding="utf-8")
    env = {name: value for name, value in os.environ.items() if name not in pacer.ENV_NAMES.values()}
    env["SHARED_PACER_NAME"] = str(tmp_path / "myproxy-openai")
    with contextlib.ExitStack() as stack:
        if "REDIS_URL" in code:
            if REDIS_SERVER is None:
                pytest.skip("redis-server not installed (scripts/redis-deps.sh)")
            server = stack.enter_context(RedisServer(module=module_path()))
            env["REDIS_URL"] = server.url
        if "REDIS_CLUSTER_NODES" in code:
            if REDIS_SERVER is None or REDIS_CLI is None:
                pytest.skip("redis-server or redis-cli not installed (scripts/redis-deps.sh)")
            if os.environ.get("PACER_CLUSTER_TESTS") == "0":
                pytest.skip("PACER_CLUSTER_TESTS=0 (scripts/test-python.sh runs it once per redis-py)")
            cluster = stack.enter_context(RedisCluster(module=module_path()))
            env["REDIS_CLUSTER_NODES"] = ",".join(cluster.seeds[:2])
        done = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=30, check=False)
    assert done.returncode == 0, (
        f"README.md python block {index + 1} exited with {done.returncode}\n"
        f"--- code\n{code}--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
    )
