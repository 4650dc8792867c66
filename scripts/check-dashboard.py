#!/usr/bin/env python3
"""Checks a Grafana dashboard against sluice's real metrics.

Every metric a panel queries must be documented in docs/metrics.md and present in a scrape of a
running sidecar (except the few that only appear after an event the scrape cannot show), and every
label a panel groups by must exist on that metric in the scrape.

usage: check-dashboard.py DASHBOARD.json docs/metrics.md SCRAPE.txt
"""
import json
import re
import sys

# Series that exist only after an event a short demo does not cause.
NEEDS_EVENT = {"sluice_config_reloads_total": "appears after the first config reload"}
SUFFIXES = ("_bucket", "_sum", "_count")


def targets(panels):
    for p in panels:
        yield from ((p["title"], t["expr"]) for t in p.get("targets", []))
        yield from targets(p.get("panels", []))


def scrape_labels(text):
    """metric family name -> label names seen in the scrape."""
    seen = {}
    for line in text.splitlines():
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        if not m or line.startswith("#"):
            continue
        name = m.group(1)
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(2) or ""))
        seen.setdefault(name, set()).update(labels)
        for suffix in SUFFIXES:
            if name.endswith(suffix):
                seen.setdefault(name[: -len(suffix)], set()).update(labels - {"le"})
    return seen


def main():
    dashboard, docs, scrape = sys.argv[1:4]
    panels = json.load(open(dashboard))["panels"]
    documented = set(re.findall(r"^\| `(sluice_[a-z0-9_]+)`", open(docs).read(), re.M))
    seen = scrape_labels(open(scrape).read())
    errors, used = [], set()
    for title, expr in targets(panels):
        names = set(re.findall(r"\b(sluice_[a-z0-9_]+)", expr))
        if not names:
            errors.append(f"{title}: no sluice metric in {expr!r}")
        for name in names:
            base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s) and name[: -len(s)] in documented), name)
            used.add(base)
            if base not in documented:
                errors.append(f"{title}: {base} is not in {docs}")
            if name not in seen and base not in NEEDS_EVENT:
                errors.append(f"{title}: {name} is not in the scrape")
            for group in re.findall(r"\bby \(([^)]*)\)", expr):
                have = seen.get(name, set()) | {"le"}
                if name in seen:
                    missing = {l.strip() for l in group.split(",")} - have
                    if missing and len(names) == 1:
                        errors.append(f"{title}: {name} has no label(s) {sorted(missing)} (has {sorted(have)})")
    if errors:
        sys.exit("dashboard check failed:\n  " + "\n  ".join(errors))
    print(f"dashboard: {sum(1 for _ in targets(panels))} queries on {len(used)} metrics, all documented and scraped"
          f" ({', '.join(f'{n}: {why}' for n, why in NEEDS_EVENT.items())})")


if __name__ == "__main__":
    main()
