"""doctor's report and the capacity table, as a person reads them in a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jupyter_gpuburst.core.inventory import Snapshot
from jupyter_gpuburst.doctor.checks import Report, Status

_MARK = {Status.OK: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL"}


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def render_report(report: Report) -> str:
    rows = [(_MARK[f.status], f.area, f.subject, f.detail) for f in report.findings]
    out = [f"context {report.context}, user namespace {report.namespace}", "", _table(("STATUS", "AREA", "CHECK", "DETAIL"), rows)]
    fixes: list[str] = []
    for f in report.findings:
        if f.fix and f.status is not Status.OK and f.fix not in fixes:
            fixes.append(f.fix)
    if fixes:
        out += ["", "Fixes:"]
        for i, fix in enumerate(fixes, 1):
            first, *rest = fix.splitlines()
            out.append(f"  {i}. {first}")
            out += [f"     {line}" for line in rest]
    if report.capacity is not None:
        out += ["", render_capacity(report.capacity)]
    failed = sum(f.status is Status.FAIL for f in report.findings)
    warned = sum(f.status is Status.WARN for f in report.findings)
    out += ["", "All needed pieces are in place." if not failed else f"{failed} needed piece(s) missing."]
    if warned:
        out[-1] += f" {warned} warning(s)."
    return "\n".join(out)


def capacity_rows(snapshot: Snapshot) -> list[dict[str, Any]]:
    rows = []
    for site in sorted(snapshot.sites.values(), key=lambda s: (s.is_donor, s.site)):
        resources = sorted(set(site.allocatable) | set(site.requested)) or ["-"]
        for resource in resources:
            rows.append(
                {
                    "site": site.site,
                    "kind": "donor" if site.is_donor else "origin",
                    "ready": site.ready,
                    "resource": resource,
                    "free": site.free.get(resource, 0),
                    "total": site.allocatable.get(resource, 0),
                    "requested": site.requested.get(resource, 0),
                }
            )
    return rows


def render_capacity(snapshot: Snapshot) -> str:
    rows = capacity_rows(snapshot)
    if not rows:
        return "no GPU capacity found (no node advertises a GPU resource)"
    return _table(
        ("SITE", "KIND", "READY", "RESOURCE", "FREE/TOTAL"),
        [(r["site"], r["kind"], "yes" if r["ready"] else "no", r["resource"], f"{r['free']}/{r['total']}") for r in rows],
    )
