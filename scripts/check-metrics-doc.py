#!/usr/bin/env python3
"""The metric set is listed once, in docs/metrics.md; the dashboard
(docs/grafana-dashboard.json) and the alert queries in that page may only
name metrics from that list, and the dashboard shows every one of them.
Exits 1 naming what disagrees."""
import json
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
doc = (root / "docs/metrics.md").read_text()
rows = re.findall(r"^\| `(pacer_[a-z_]+)` \| (counter|gauge|histogram) \|", doc, re.M)
listed = {name: kind for name, kind in rows}
problems = []
if len(listed) != len(rows) or not listed:
    problems.append(f"docs/metrics.md: {len(rows)} rows, {len(listed)} distinct names")
for name, kind in listed.items():
    if kind == "counter" and not name.endswith("_total"):
        problems.append(f"{name}: a counter's name ends in _total")
    if kind != "counter" and name.endswith("_total"):
        problems.append(f"{name}: only counters end in _total")


def series_names(expr):
    """The metric names an expression reads (a histogram's series by its own name)."""
    found = set()
    for name in re.findall(r"\bpacer_[a-z_]+", expr):
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)] if name.endswith(suffix) else None
            if base and listed.get(base) == "histogram":
                name = base
        found.add(name)
    return found


dashboard = json.loads((root / "docs/grafana-dashboard.json").read_text())
shown = set()
for panel in dashboard["panels"]:
    for target in panel["targets"]:
        for name in series_names(target["expr"]):
            shown.add(name)
            if name not in listed:
                problems.append(f"dashboard panel '{panel['title']}': {name} is not in docs/metrics.md")
for expr in re.findall(r"`([^`|]*\(pacer_[^`]*|[^`|]*\bpacer_[a-z_]+\{[^`]*)`", doc):
    for name in series_names(expr):
        if name not in listed:
            problems.append(f"docs/metrics.md query `{expr}`: {name} is not in the list")
for name in sorted(set(listed) - shown):
    problems.append(f"dashboard: no panel shows {name}")
for problem in problems:
    print(f"metrics doc: {problem}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"metrics doc: {len(listed)} metrics listed; the dashboard's {len(dashboard['panels'])} panels and the alert queries name only them")
