"""`gpuburst doctor` against the demo's federation (origin + Liqo-peered donor-1)."""

from __future__ import annotations

import asyncio
import json

import pytest

from jupyter_gpuburst import doctor
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.demo import NAMESPACE, DemoOptions, federation_config
from jupyter_gpuburst.sim.testing import running_federation

pytestmark = pytest.mark.integration


@pytest.fixture
async def demo_federation(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    async with running_federation(federation_config(DemoOptions()), tmp_path / "sim", kubeconfig) as fed:
        fed.origin.store.create(
            f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}", liqo.namespace_offloading(NAMESPACE), NAMESPACE
        )
        yield fed, str(kubeconfig)


async def doctor_json(kubeconfig: str, *argv: str) -> tuple[int, dict]:
    from contextlib import redirect_stdout
    from io import StringIO

    buf = StringIO()

    def run() -> int:
        with redirect_stdout(buf):
            return doctor.main(["--kubeconfig", kubeconfig, "--json", *argv])

    rc = await asyncio.to_thread(run)
    return rc, json.loads(buf.getvalue())


async def test_demo_federation_passes(demo_federation):
    _fed, kubeconfig = demo_federation
    rc, report = await doctor_json(kubeconfig)
    assert rc == 0, [f for f in report["findings"] if f["status"] != "ok"]
    sites = {s["site"]: s["resources"] for s in report["capacity"]["sites"]}
    assert sites["origin"]["nvidia.com/gpu"]["free"] == 2
    assert sites["origin"]["nvidia.com/mig-1g.10gb"]["free"] == 7
    assert sites["donor-1"]["nvidia.com/gpu"]["free"] == 8


async def test_donor_outage_fails_and_names_the_fix(demo_federation):
    fed, kubeconfig = demo_federation
    await fed.donor_outage("donor-1")
    rc, report = await doctor_json(kubeconfig)
    assert rc == 1
    [bad] = [f for f in report["findings"] if f["status"] == "fail"]
    assert bad["area"] == "donors" and "NotReady" in bad["detail"]
    assert bad["fix"].startswith("liqoctl info peer donor-1")


async def test_namespace_not_offloaded_warns_and_names_the_fix(demo_federation):
    fed, kubeconfig = demo_federation
    fed.origin.store.create("namespaces", {"metadata": {"name": "course-ml"}})
    rc, report = await doctor_json(kubeconfig, "-n", "course-ml")
    assert rc == 0  # the spawner offloads the namespace itself before its first donor spawn
    [warn] = [f for f in report["findings"] if f["area"] == "offloading"]
    assert warn["status"] == "warn" and "liqoctl offload namespace course-ml" in warn["fix"]
    storage = {f["subject"]: f for f in report["findings"] if f["area"] == "storage"}
    assert storage["storage policies"]["detail"] == "supported here: pin-to-volume, scratch-on-donor"
    assert "class liqo" in storage and "class standard (default)" in storage
