"""A rehearsal of the install guide (docs/install.md), step by step, against `gpuburst sim`.

The commands come from the guide's code blocks, so the guide and this test cannot drift apart.
What the emulator cannot run is translated, and said so at each step:

1. `liqoctl peer ... --cpu --memory --resource`: its grant becomes the donor's grant in the
   federation's YAML, and `gpuburst sim` (the real command) peers it; the README's kubectl
   command then finds exactly one virtual node for the donor.
2. Images: the hub runs this checkout's JupyterHub environment; servers run as local processes.
3. `kubectl create namespace` and `kubectl apply` of the RBAC file run as written; the emulator
   authorizes requests made as another identity (`--as`) by those rules, as a cluster does.
4. The hub loads hub_config/jupyterhub_config.py as written, with only what differs on a laptop
   overridden after it (addresses, the proxy process, the single-user command).
5. `gpuburst doctor` runs as written, against the emulator's kubeconfig: as the hub's service
   account, which the RBAC file lets do what the hub does (and no more: not list storage
   classes), then as the admin, who sees the storage classes.
Then two students spawn the README's GPU profiles: the first lands on the origin with its home
volume; the second, with the origin full, bursts to the donor, where the storage policy of the
shipped config gives it scratch space and says so. With the shipped config's kernel mode, both servers (origin and donor) reach the gpuburst service's kernel API at the
address the spawner gives them, with their own token, and the launcher's figures come back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.hub import Hub, free_port
from hub_config.readme import command

from jupyter_gpuburst.core import keys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
NAMESPACE = "jhub-users"  # the user servers'; the hub's is jhub


def federation_config_from_the_peer_command() -> dict:
    """The README's grant, as the emulator's federation config; donor nodes hold the grant."""
    peer = command("liqoctl peer")
    flag = {name: peer[peer.index(name) + 1] for name in ("--cpu", "--memory", "--resource")}
    resource, gpus = flag["--resource"].split("=")
    return {
        "origin": {
            "name": "origin",
            "nodes": [
                {"name": "origin-gpu", "cpu": "16", "memory": "64Gi", "resources": {resource: 2}},
                {"name": "origin-cpu", "cpu": "8", "memory": "32Gi"},
            ],
        },
        "donors": [
            {
                "name": "polito-hpc",
                "nodes": [{"name": "polito-hpc-gpu", "count": 2, "cpu": "64", "memory": "256Gi", "resources": {resource: int(gpus)}}],
                "grant": {"cpu": flag["--cpu"], "memory": flag["--memory"], "pods": "110", resource: int(gpus)},
            }
        ],
    }


# A guard against a hang, not a speed check: `gpuburst doctor` is CPU-bound (2.7 CPU-s, most of it
# importing the kubernetes client) and took 13-14 s a run here beside eight busy loops; in a fresh
# clone's `make test` one ran past 60 s just as the kube tier's control planes started (load 15).
COMMAND_TIMEOUT_S = 180


async def run(args: list[str], env: dict[str, str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    return await asyncio.to_thread(
        subprocess.run, args, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )  # the guide's paths are the checkout's


@pytest.fixture
async def sim(tmp_path):
    """`gpuburst sim` with the README's grant, as a separate process; its kubeconfig."""
    config = tmp_path / "federation.yaml"
    config.write_text(yaml.safe_dump(federation_config_from_the_peer_command()))
    kubeconfig = tmp_path / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "gpuburst"), "sim", "--config", str(config), "--kubeconfig-out", str(kubeconfig), "--state-dir", str(tmp_path / "pods"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        output = []
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, f"gpuburst sim exited: {''.join(output)}"
            output.append(line)
            if line.startswith("ready"):
                break
        yield kubeconfig
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


LOCAL_OVERRIDES = """
# ---- only what differs on a laptop, after the README's config --------------------------------
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.JupyterHub.hub_connect_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.should_start = True
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.KubeSpawner.image = "jupyter-gpuburst-singleuser"
c.KubeSpawner.cmd = [{singleuser!r}]
c.KubeSpawner.args = list(c.KubeSpawner.args) + ["--allow-root"]
c.KubeSpawner.start_timeout = 60
c.KubeSpawner.volume_mounts = [{{"name": "volume-{{user_server}}", "mountPath": {home!r} + "/{{username}}"}}]
c.KubeSpawner.environment = {{"JUPYTER_GPUBURST_BACKEND": "simulated"}}
c.Spawner.default_url = "/api"
# the test's own: spawns answer 202 at once, so their progress events stream (a spawn already
# ready shows only "Server ready")
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0.2}}
"""


def env_of(pod: dict) -> dict:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}


async def test_the_real_cluster_guide_works_as_written(sim, tmp_path):
    env = {**os.environ, "KUBECONFIG": str(sim), "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    from kubernetes import client
    from kubernetes import config as kube_config

    kube_config.load_kube_config(str(sim), context="origin")
    core = client.CoreV1Api()

    # 1. one virtual node per donor, carrying the README's grant
    listed = await run(command("kubectl get nodes -l liqo.io/type=virtual-node"), env)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert rows == ["polito-hpc"]
    granted = core.read_node("polito-hpc").status.allocatable
    peer = command("liqoctl peer")
    assert granted["cpu"] == peer[peer.index("--cpu") + 1] and granted["memory"] == peer[peer.index("--memory") + 1]

    # 3. the namespace and the hub's grant, as written
    doctor_cmd = command("gpuburst doctor -n jhub-users --as")
    created = await run(command("kubectl create namespace"), env)
    assert created.returncode == 0, created.stderr
    ungranted = await run([*doctor_cmd, "--kubeconfig", str(sim)], env)
    assert ungranted.returncode == 1 and "FAIL    rbac" in ungranted.stdout, ungranted.stdout + ungranted.stderr
    granted_rbac = await run(command("kubectl apply -f hub_config/rbac.yaml"), env)
    assert granted_rbac.returncode == 0, granted_rbac.stderr

    # 5. doctor as the hub's account: nothing needed missing (not offloaded yet is a warning); the
    # hub may not list storage classes, which the admin's own run shows
    doctor = await run([*doctor_cmd, "--kubeconfig", str(sim)], env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "not offloaded yet" in doctor.stdout
    assert "this identity may not list storage classes" in doctor.stdout
    as_admin = await run([*doctor_cmd[: doctor_cmd.index("--as")], "--kubeconfig", str(sim)], env)
    assert as_admin.returncode == 0, as_admin.stdout + as_admin.stderr
    assert "supported here: pin-to-volume, scratch-on-donor" in as_admin.stdout

    # 4. the hub with the README's config file
    workdir = tmp_path / "hub"
    workdir.mkdir()
    hub = Hub(workdir, sim)
    hub.extra_config = (
        "import os\nos.environ['GPUBURST_NAMESPACE'] = 'jhub'\n"
        # the gpuburst service where a laptop reaches it (the hub Service's DNS name does not resolve)
        f"os.environ['GPUBURST_SERVICE_HOST'] = '127.0.0.1'\nos.environ['GPUBURST_SERVICE_PORT'] = '{free_port()}'\n"
        f"load_subconfig({str(REPO / 'hub_config' / 'jupyterhub_config.py')!r})\n"
        # the README's config sets the service list (install(c) adds gpuburst's) and a loaded
        # subconfig's list replaces the harness's: its API token service is added back
        f"c.JupyterHub.services = [s for s in c.JupyterHub.services if s['name'] != 'tester']"
        f" + [{{'name': 'tester', 'api_token': {hub.token!r}}}]\n"
        + LOCAL_OVERRIDES.format(
            hub_port=hub.hub_port, proxy_api_port=hub.proxy_api_port,
            singleuser=str(VENV_BIN / "jupyterhub-singleuser"), home=str(tmp_path / "homes"),
        )
        # the shipped config has kernel mode (docs/kernels.md quotes it); the students are in
        # its course group
        + '\nc.JupyterHub.load_groups = {"course-ml101": {"users": ["student1", "student2"]}}\n'
    )  # fmt: skip
    hub._write_config()
    hub.start()
    try:
        await hub.wait_up()
        # first student: the origin has 2 GPUs free; the home volume is bound there and mounted
        status, body = await hub.spawn("student1", {"profile": "gpu-2"})
        assert status in (201, 202), body
        await hub.wait_ready("student1", timeout=90)
        pod = core.read_namespaced_pod("jupyter-student1", NAMESPACE).to_dict()
        assert pod["metadata"]["labels"][keys.SITE_LABEL] == keys.ORIGIN_SITE
        assert env_of(pod)["JUPYTER_GPUBURST_STORAGE"] == "home"
        claim = core.read_namespaced_persistent_volume_claim("claim-student1", NAMESPACE)
        assert claim.status.phase == "Bound"

        # second student: the origin is full, so the server bursts to the donor; its home
        # stays on the origin and the shipped policy (scratch-on-donor) says so
        status, body = await hub.spawn("student2", {"profile": "gpu-1"})
        assert status == 202, body
        progress = [e.get("message", "") for e in await hub.progress("student2", timeout=90)]
        await hub.wait_ready("student2", timeout=90)
        pod = core.read_namespaced_pod("jupyter-student2", NAMESPACE).to_dict()
        assert pod["spec"]["node_name"] == "polito-hpc"
        home = next(v for v in pod["spec"]["volumes"] if v["name"].startswith("volume-"))
        assert home["empty_dir"] is not None and home["persistent_volume_claim"] is None
        storage = env_of(pod)
        assert storage["JUPYTER_GPUBURST_STORAGE"] == "scratch"
        assert storage["JUPYTER_GPUBURST_STORAGE_MESSAGE"] in progress
        code, _ = await hub.get_via_proxy("student2")
        assert code == 200
        # both servers, origin and donor, reach the kernel API at the service's own address
        # (the host of hub_connect_url, port of the service), with their own token
        for student in ("student1", "student2"):
            pod = core.read_namespaced_pod(f"jupyter-{student}", NAMESPACE).to_dict()
            kernels_url = env_of(pod)["JUPYTER_GPUBURST_KERNELS_URL"]
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/services/gpuburst/api/kernels", kernels_url), kernels_url
            code, text = await hub.get_via_proxy(student, "api/gpuburst/kernel-profiles")
            assert code == 200, text
            offered = json.loads(text)
            assert offered["error"] is None, offered
            by_slug = {p["slug"]: p["available"] for p in offered["profiles"]}
            # student1 holds both origin GPUs, student2 one of the donor's
            assert by_slug["gpu-1"]["origin"] == 0 and by_slug["gpu-1"]["donors"] > 0, by_slug
        # the spawner offloaded the namespace itself, as doctor said it would
        offloaded = await run([*doctor_cmd, "--kubeconfig", str(sim)], env)
        assert offloaded.returncode == 0 and "not offloaded yet" not in offloaded.stdout
        # both servers carry the release that made them, the one doctor runs (no upgrade pending)
        assert "2 pod(s), all of release" in offloaded.stdout, offloaded.stdout
    finally:
        await hub.stop()
