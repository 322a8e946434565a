"""`gpuburst sim` and its YAML config: clear errors naming file and field, foreground run, clean Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from jupyter_gpuburst.sim.cli import main
from jupyter_gpuburst.sim.config import DEFAULT_CONFIG, ConfigError, load_config, parse_config

GOOD = {
    "origin": {"nodes": [{"name": "mig", "resources": {"nvidia.com/mig-1g.10gb": 7}}]},
    "donors": [{"name": "d", "nodes": [{"name": "g", "count": 2, "resources": {"nvidia.com/gpu": 4}}], "grant": {"nvidia.com/gpu": 8}}],
}


def test_default_config_matches_the_shipped_federation():
    cfg = load_config()
    assert cfg.origin.name == "origin"
    assert [(n.name, n.resources) for n in cfg.origin.nodes] == [("origin-gpu", {"nvidia.com/gpu": 2}), ("origin-cpu", {})]
    (donor,) = cfg.donors
    assert donor.cluster.id == "donor-1" and donor.cluster.nodes[0].names() == ["donor-1-gpu-1", "donor-1-gpu-2"]
    assert donor.grant["nvidia.com/gpu"] == "8"


def test_mig_layout_parses():
    cfg = parse_config(GOOD, "x.yaml")
    assert cfg.origin.nodes[0].resources == {"nvidia.com/mig-1g.10gb": 7}


@pytest.mark.parametrize(
    ("mutate", "field", "why"),
    [
        (lambda c: c["donors"][0]["grant"].update({"nvidia.com/gpu": "lots"}), "donors[0].grant.nvidia.com/gpu", "non-negative quantity"),
        (lambda c: c["origin"]["nodes"][0].update({"count": 0}), "origin.nodes[0].count", "integer >= 1"),
        (lambda c: c["origin"]["nodes"][0].update({"colour": "red"}), "origin.nodes[0].colour", "unknown field"),
        (lambda c: c["donors"][0].pop("grant"), "donors[0].grant", "required"),
        (lambda c: c["donors"][0].update({"name": "Bad_Name"}), "donors[0].name", "DNS label"),
        (lambda c: c["donors"][0].update({"name": "origin"}), "donors[0].name", "used twice"),
        (lambda c: c["origin"].update({"nodes": []}), "origin.nodes", "non-empty"),
        (
            lambda c: c["origin"]["nodes"][0]["resources"].update({"nvidia.com/gpu": -1}),
            "origin.nodes[0].resources.nvidia.com/gpu",
            "integer >= 0",
        ),
    ],
)
def test_bad_config_errors_name_file_and_field(mutate, field, why):
    cfg = yaml.safe_load(yaml.safe_dump(GOOD))
    mutate(cfg)
    with pytest.raises(ConfigError) as info:
        parse_config(cfg, "fed.yaml")
    assert str(info.value).startswith(f"fed.yaml: {field}: ")
    assert why in str(info.value)


def test_cli_bad_config_exits_non_zero_naming_file_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("origin:\n  nodes:\n    - name: n\n      cpu: many\n")
    assert main(["--config", str(bad), "--kubeconfig-out", str(tmp_path / "kc")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: origin.nodes[0].cpu: must be a non-negative quantity, got 'many'" in err
    assert not (tmp_path / "kc").exists()
    broken = tmp_path / "broken.yaml"
    broken.write_text("origin: [\n")
    assert main(["--config", str(broken)]) == 2
    assert f"{broken}: invalid YAML: line" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2


def test_cli_pod_network_that_cannot_be_had_exits_before_starting(tmp_path, capsys, monkeypatch):
    from jupyter_gpuburst.sim.kubelet import netns

    monkeypatch.setenv(netns.MODE_ENV, "namespace")
    assert main(["--kubeconfig-out", str(tmp_path / "kc")]) == 2
    assert "GPUBURST_SIM_NETWORK must be 'shared' or 'namespaces', not 'namespace'" in capsys.readouterr().err
    monkeypatch.setattr(netns, "unavailable", lambda: "pod network namespaces need root on Linux")
    assert main(["--pod-network", "namespaces", "--kubeconfig-out", str(tmp_path / "kc")]) == 2
    assert "gpuburst sim: no pod network namespaces: pod network namespaces need root on Linux" in capsys.readouterr().err
    assert not (tmp_path / "kc").exists()


def test_cli_check_accepts_default(capsys):
    assert main(["--config", str(DEFAULT_CONFIG), "--check"]) == 0
    assert "ok (2 clusters)" in capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_gpuburst_sim_runs_in_foreground_and_stops_on_ctrl_c(tmp_path):
    from kubernetes_asyncio import client, config

    kc = tmp_path / "sim.kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jupyter_gpuburst.cli",
        "sim",
        "--kubeconfig-out",
        str(kc),
        "--state-dir",
        str(tmp_path / "state"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        lines = []
        while time.monotonic() < deadline:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            lines.append(line)
            if line.startswith("ready") or not line:
                break
        assert lines[-1].startswith("ready"), "".join(lines) + (await proc.stderr.read()).decode()
        doc = yaml.safe_load(Path(kc).read_text())
        assert [c["name"] for c in doc["contexts"]] == ["origin", "donor-1"] and doc["current-context"] == "origin"
        names = {}
        for ctx in ("origin", "donor-1"):
            api = await config.new_client_from_config(str(kc), context=ctx)
            async with api:
                nodes = await client.CoreV1Api(api).list_node()
                names[ctx] = sorted(n.metadata.name for n in nodes.items)
        assert names == {"origin": ["donor-1", "origin-cpu", "origin-gpu"], "donor-1": ["donor-1-gpu-1", "donor-1-gpu-2"]}
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
