"""Shared by the generators that rewrite a document in docs/ but keep a part
of it that something else wrote (scripts/bench-report.py keeps the section
scripts/bench-redis.sh writes; scripts/mutants-report.py keeps the part
written by hand). Imported from the scripts' own folder."""

from __future__ import annotations

from pathlib import Path


def kept(path: Path, begin: str, end: str | None = None) -> str | None:
    """The part of the document at `path` from the marker `begin` through
    the marker `end` (to the document's end when `end` is None), or None
    when the document or a marker is missing."""
    if not path.exists():
        return None
    previous = path.read_text()
    if begin not in previous or (end is not None and end not in previous):
        return None
    stop = len(previous) if end is None else previous.index(end) + len(end)
    return previous[previous.index(begin):stop]
