"""The capacity page lists each donor's lent GPU-hours beside its health now, from what the
capacity tracker already knows (its Liqo virtual node Ready), with no Kubernetes read."""

from __future__ import annotations

import re

from jinja2 import Environment, FileSystemLoader, select_autoescape

from jupyter_gpuburst.hub.accounting.dashboard import donor_rows
from jupyter_gpuburst.hub.service import TEMPLATES

LENT = [{"site": "donor-1", "gpu_hours": 6.0, "sessions": 1}, {"site": "old-donor", "gpu_hours": 0.5, "sessions": 2}]
PEERED = [
    {"site": "donor-1", "cluster_id": "c1", "ready": True, "nodes_present": 1, "nodes_eligible": 1},
    {"site": "donor-2", "cluster_id": "c2", "ready": False, "nodes_present": 1, "nodes_eligible": 0},
]


def test_every_donor_with_its_hours_and_health():
    rows = {r["site"]: r for r in donor_rows(LENT, PEERED)}
    assert list(rows) == ["donor-1", "donor-2", "old-donor"]
    assert rows["donor-1"] == {
        "site": "donor-1",
        "gpu_hours": 6.0,
        "sessions": 1,
        "peered": True,
        "ready": True,
        "nodes_eligible": 1,
        "nodes_present": 1,
    }
    # peered but its virtual node is not Ready: listed, with nothing lent
    assert rows["donor-2"]["ready"] is False and rows["donor-2"]["gpu_hours"] == 0.0
    # lent this week, no longer peered
    assert rows["old-donor"]["peered"] is False and rows["old-donor"]["gpu_hours"] == 0.5


def test_the_page_shows_health_beside_the_hours_and_stop_buttons_for_admins():
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape())
    report = {
        "ready": True,
        "queue_length": 0,
        "sites": [],
        "donors": PEERED,
        "placements": [
            {"server": "alice/", "user": "alice", "server_name": "", "state": "running", "site": "origin", "node": "gpu-a"},
            {
                "server": "bob/kernel:1c60c284e87a",
                "user": "bob",
                "server_name": "kernel:1c60c284e87a",
                "state": "running",
                "site": "donor-1",
            },
        ],
    }
    usage = {
        "period": {"first_day": "2026-11-23", "last_day": "2026-11-29"},
        "total": {"gpu_hours": 6.5, "sessions": 3},
        "top_users": [],
        "donors": LENT,
        "counts_idle": False,
        "budgets": None,
        "charts": [],
        "csv": {},
    }
    page = env.get_template("gpuburst_capacity.html")

    def render(stop):
        return page.render(report=report, api_url="/x", hub_prefix="/hub/", usage=usage, stop=stop, donors=donor_rows(LENT, PEERED))

    html = render({"url": "/services/gpuburst/api/stop", "xsrf": "t0k3n"})
    donors = re.search(r'id="gpuburst-donor-hours">(.*?)</table>', html, re.S).group(1)
    health = dict(re.findall(r'data-site="([^"]+)">.*?class="gpuburst-health">\s*<span class="badge [^"]+">([^<]+)</span>', donors, re.S))
    assert health == {"donor-1": "ready", "donor-2": "not ready", "old-donor": "not peered now"}
    assert "1 / 1 virtual nodes eligible" in donors and "0 / 1 virtual nodes eligible" in donors
    # a stop button per server and GPU kernel, named in words
    buttons = re.findall(r'data-target="([^"]+)" data-what="([^"]+)"', html)
    assert buttons == [
        ("alice/", "alice's server on origin"),
        ("bob/kernel:1c60c284e87a", "bob's GPU kernel 1c60c284e87a on donor-1"),
    ]
    assert '"t0k3n"' in html  # the XSRF token the stop request carries
    # whoever may not stop gets no buttons and no token
    html = render(None)
    assert "gpuburst-stop" not in html and "t0k3n" not in html
