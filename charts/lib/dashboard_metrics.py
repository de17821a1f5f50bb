#!/usr/bin/env python3
"""Checks that every query of a Grafana dashboard names only metrics a running recache
exports: the metric names in each panel target's `expr` and each template variable's query
must appear in a /metrics scrape (a histogram's _bucket/_sum/_count series count as the
histogram). A query that names no metric at all is an error too. Exits 1 on any problem.

Usage: dashboard_metrics.py DASHBOARD.json METRICS.txt
"""
import json
import re
import sys

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
            "or", "unless", "offset", "inf", "nan", "atan2"}
SUFFIXES = ("_bucket", "_sum", "_count")


def exported(text):
    names, kinds = set(), {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            kinds[name] = kind.strip()
            names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    for name, kind in kinds.items():
        if kind in ("histogram", "summary"):
            names.update(name + s for s in SUFFIXES)
    return names


def metric_names(expr):
    """Metric names in a PromQL expression (Grafana variables allowed)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\[\]]*\]", " ", s)  # ranges, subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", s)
    names = []
    for m in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or m.group(0) in KEYWORDS:
            continue  # a function or a keyword
        names.append(m.group(0))
    return names


def queries(dash):
    def walk(panels):
        for p in panels:
            yield from walk(p.get("panels", []))
            if p.get("type") == "row":
                continue
            targets = p.get("targets") or []
            if not targets:
                yield f"panel '{p.get('title')}'", None
            for t in targets:
                yield f"panel '{p.get('title')}' ({t.get('refId')})", t.get("expr")
    yield from walk(dash.get("panels", []))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q or "")
        yield f"variable '{v.get('name')}'", m.group(1) if m else q


def main():
    dash = json.load(open(sys.argv[1]))
    have = exported(open(sys.argv[2]).read())
    problems, used, n = [], set(), 0
    for where, expr in queries(dash):
        n += 1
        if not expr:
            problems.append(f"{where}: no query")
            continue
        names = metric_names(expr)
        if not names:
            problems.append(f"{where}: names no metric: {expr}")
        for name in names:
            used.add(name)
            if name not in have:
                problems.append(f"{where}: {name} is not exported by recache")
    for p in problems:
        print(f"[dashboard] {p}", file=sys.stderr)
    families = {n for n in have if not n.endswith(SUFFIXES)}
    print(f"[dashboard] {n} queries name {len(used)} metrics; recache exported "
          f"{len(families)} metric families; {len(problems)} problem(s)", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
