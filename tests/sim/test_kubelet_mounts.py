"""Volumes at their mountPath in each container's own mount namespace (``sim.kubelet.mounts``),
and path rewriting where that is not possible."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import tempfile
from pathlib import Path

import pytest
from helpers.pods import PY, pod, py

from jupyter_gpuburst.sim.kubelet import mounts
from jupyter_gpuburst.sim.kubelet.processes import uts_namespaces
from jupyter_gpuburst.sim.testing import one_node_cluster, wait_for_pod, wait_until

WHY_NOT = (
    "no UTS and mount namespaces (not root, or no util-linux)" if not uts_namespaces() else mounts.unavailable(Path(tempfile.gettempdir()))
)
needs_mounts = pytest.mark.skipif(WHY_NOT is not None, reason=f"volumes cannot be mounted for real here: {WHY_NOT}")


@pytest.fixture
async def cluster(tmp_path):
    async with one_node_cluster(tmp_path, 13) as c:
        yield c


async def finished(cluster, name: str) -> tuple[dict, str]:
    done = await wait_for_pod(cluster.store, "default", name, lambda p: p["status"].get("phase") in ("Succeeded", "Failed"))
    return done, cluster.kubelet.log_path("default", name).read_text()


def pod_story(cluster, name: str) -> str:
    """What a pod's containers did, for a failure message: states, restarts, their logs' ends."""
    status = cluster.store.get("pods", "default", name).get("status", {})
    lines = [f"phase {status.get('phase')}"]
    for c in status.get("containerStatuses") or []:
        lines.append(f"{c['name']}: restarts {c.get('restartCount')}, state {json.dumps(c.get('state'))}")
        for previous in (True, False):
            log = cluster.kubelet.log_path("default", name, c["name"], previous=previous)
            if log is not None:
                lines.append(f"  {'previous ' if previous else ''}log: {log.read_text()[-500:]!r}")
    return "\n".join(lines)


def fresh_dir_under(parent: str) -> str:
    """A path under ``parent`` (which exists) that does not exist on the host."""
    path = f"{parent}/gpuburst-test-{secrets.token_hex(4)}"
    assert not os.path.lexists(path)
    return path


@needs_mounts
async def test_a_path_written_in_a_configmap_file_finds_its_volume(cluster):
    """The hub's case: its config file (a subPath of a ConfigMap) names a Secret's file by an
    absolute path; neither path reaches the program through argv or env."""
    store = cluster.store
    base, where = fresh_dir_under("/etc"), fresh_dir_under("/var")
    config = f"import json\nCERT = open('{base}/secret/internal-ssl.tar').read()\n"
    store.create(
        "configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hub-config"}, "data": {"hub_config.py": config, "other": "x"}},
        "default",
    )
    store.create(
        "secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub-secret"}, "stringData": {"internal-ssl.tar": "certs"}},
        "default",
    )
    # the program learns the config path from a file of its own, so nothing can be rewritten
    program = (
        "import json,os\n"
        "path=open(os.environ['WHERE_FILE']).read().strip()\n"
        "ns={}; exec(open(path).read(), ns)\n"
        "try:\n    open(os.path.dirname(path)+'/secret/new','w'); ro=False\nexcept OSError as e:\n    ro=e.errno\n"
        "print(json.dumps({'cert': ns['CERT'], 'listing': sorted(os.listdir(os.path.dirname(path))), 'ro': ro, 'env': os.environ['WHERE_FILE'], 'cwd': os.getcwd(), 'oldpwd': 'OLDPWD' in os.environ}))\n"
    )
    store.create(
        "configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "where"}, "data": {"where": f"{base}/hub_config.py"}},
        "default",
    )
    c = py(
        "hub",
        program,
        env=[{"name": "WHERE_FILE", "value": f"{where}/where"}],
        workingDir=f"{base}/secret",
        volumeMounts=[
            {"name": "config", "mountPath": f"{base}/hub_config.py", "subPath": "hub_config.py"},
            {"name": "secret", "mountPath": f"{base}/secret", "readOnly": True},
            {"name": "where", "mountPath": where},
        ],
    )
    vols = [
        {"name": "config", "configMap": {"name": "hub-config"}},
        {"name": "secret", "secret": {"secretName": "hub-secret"}},
        {"name": "where", "configMap": {"name": "where"}},
    ]
    store.create("pods", pod("hub", c, restartPolicy="Never", volumes=vols), "default")
    done, out = await finished(cluster, "hub")
    assert done["status"]["phase"] == "Succeeded", out
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["cert"] == "certs"
    assert seen["listing"] == ["hub_config.py", "secret"]  # the subPath is one file, not the volume
    assert seen["ro"] == 30  # EROFS: readOnly is a read-only bind
    assert seen["env"] == f"{where}/where" and seen["cwd"] == f"{base}/secret"  # handed over as written
    assert seen["oldpwd"] is False  # the start script's cd leaves no trace of the kubelet's directory
    # the host's filesystem has none of it
    assert not os.path.lexists(base) and not os.path.lexists(where)


@needs_mounts
async def test_emptydir_is_shared_between_containers_and_writes_outside_volumes_stay_private(cluster):
    store = cluster.store
    a, b = fresh_dir_under("/etc"), fresh_dir_under("/var")
    writer = py(
        "writer",
        # written aside and renamed: the reader polls for the name, and a file created by open()
        # is there, empty, before its write lands
        f"import os,time\nopen('{a}/shared/f.part','w').write('from writer')\nos.replace('{a}/shared/f.part','{a}/shared/f')\n"
        f"open('/etc/{Path(a).name}-outside','w').write('x')\ntime.sleep(60)",
        workingDir=f"{a}/shared",
        volumeMounts=[{"name": "scratch", "mountPath": f"{a}/shared"}],
    )
    reader = py(
        "reader",
        f"import os,time\nwhile not os.path.exists('{b}/in/f'): time.sleep(0.02)\nprint(open('{b}/in/f').read(), flush=True)\ntime.sleep(60)",
        volumeMounts=[{"name": "scratch", "mountPath": f"{b}/in"}],
    )
    store.create("pods", pod("pair", writer, reader, volumes=[{"name": "scratch", "emptyDir": {}}]), "default")
    try:
        await wait_until(
            lambda: (p := cluster.kubelet.log_path("default", "pair", "reader")) is not None and "from writer" in p.read_text(),
            timeout=30,
            what="reader sees the writer's file",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{pod_story(cluster, 'pair')}") from None
    # a file written beside the volume, in /etc, went to the container's private layer
    assert not os.path.lexists(f"/etc/{Path(a).name}-outside")
    # exec runs in the container's view, in its working directory (which only exists there):
    # the volume at its mountPath, the private file there too
    proc, _ = await cluster.kubelet.open_exec(
        "default", "pair", "writer", ["sh", "-c", f"pwd; cat f /etc/{Path(a).name}-outside"], stdin=False, tty=False
    )
    out, err = await proc.communicate()
    assert (proc.returncode, out) == (0, f"{a}/shared\nfrom writerx".encode()), err
    store.delete("pods", "default", "pair")
    await wait_until(lambda: not cluster.kubelet.processes(), what="pod gone")
    assert not os.path.lexists(a) and not os.path.lexists(b)


@needs_mounts
async def test_exec_probe_and_hook_see_the_mounts(cluster):
    store = cluster.store
    base = fresh_dir_under("/etc")
    c = py(
        "c",
        "import time; time.sleep(60)",
        volumeMounts=[{"name": "w", "mountPath": base}],
        lifecycle={"postStart": {"exec": {"command": ["touch", f"{base}/started"]}}},
        readinessProbe={"exec": {"command": ["test", "-f", f"{base}/started"]}, "periodSeconds": 1},
    )
    store.create("pods", pod("probed", c, volumes=[{"name": "w", "emptyDir": {}}]), "default")
    ready = await wait_for_pod(
        store,
        "default",
        "probed",
        lambda p: any(x["type"] == "Ready" and x["status"] == "True" for x in p["status"].get("conditions") or []),
    )
    assert ready["status"]["phase"] == "Running"
    # the hook's file is in the volume's directory, not on the host at the mountPath
    assert (cluster.kubelet._pods[("default", "probed")].volumes["w"] / "started").exists()
    assert not os.path.lexists(base)


@needs_mounts
async def test_claim_data_persists_across_pods_at_the_mount_path(cluster):
    store = cluster.store
    base = fresh_dir_under("/var")
    store.create(
        "persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "home"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
        "default",
    )
    vols = [{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}]
    mount = [{"name": "home", "mountPath": base}]
    store.create(
        "pods",
        pod("w", py("c", f"open('{base}/kept','w').write('kept')", volumeMounts=mount), restartPolicy="Never", volumes=vols),
        "default",
    )
    done, out = await finished(cluster, "w")
    assert done["status"]["phase"] == "Succeeded", out
    store.create(
        "pods", pod("r", py("c", f"print(open('{base}/kept').read())", volumeMounts=mount), restartPolicy="Never", volumes=vols), "default"
    )
    done, out = await finished(cluster, "r")
    assert done["status"]["phase"] == "Succeeded" and out.strip() == "kept", out
    assert not os.path.lexists(base)


async def test_forced_rewriting_maps_the_paths_a_program_is_handed(cluster, monkeypatch):
    monkeypatch.setenv(mounts.MODE_ENV, "rewrite")
    store = cluster.store
    store.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}}, "default")
    c = py(
        "c",
        "import sys; print(sys.argv[1]); print(open(sys.argv[1] + '/k').read())",
        volumeMounts=[{"name": "cfg", "mountPath": "/etc/gpuburst-rewritten"}],
    )
    c["args"] = ["/etc/gpuburst-rewritten"]
    store.create("pods", pod("rw", c, restartPolicy="Never", volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}]), "default")
    done, out = await finished(cluster, "rw")
    assert done["status"]["phase"] == "Succeeded", out
    handed, content = out.strip().splitlines()[-2:]
    assert content == "v"
    assert handed == str(cluster.kubelet._finished.get(("default", "rw"), cluster.kubelet._pods.get(("default", "rw"))).volumes["cfg"])


def test_plan_never_overlays_the_root_or_the_kubelet_state(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    vol = tmp_path / "vol"
    vol.mkdir()
    top = f"/gpuburst-test-{secrets.token_hex(4)}"  # its only existing ancestor is /
    beside_state = tmp_path / "not-yet" / "x"  # its nearest existing ancestor holds the state
    plan = mounts.plan(
        [mounts.Mount(top, vol), mounts.Mount(str(beside_state), vol), mounts.Mount(f"{top}/child", vol)], [], state / "layers", [state]
    )
    assert plan.rewritten == {top: vol, str(beside_state): vol, f"{top}/child": vol}
    assert plan.fstab == [] and not (state / "layers").exists()


def test_plan_makes_missing_mountpoints_in_an_overlay_and_in_parent_volumes(tmp_path):
    host = tmp_path / "host"  # stands for an existing host directory such as /etc
    (host / "has").mkdir(parents=True)
    state = tmp_path / "state"
    home, cfg, key = state / "home", state / "cfg", state / "key"
    home.mkdir(parents=True)
    cfg.mkdir()
    key.write_text("k")
    wanted = [
        mounts.Mount(f"{host}/app/config.py", key, read_only=True),  # a subPath file, host lacks its parent
        mounts.Mount(f"{host}/has", cfg),  # exists on the host
        mounts.Mount(f"{host}/home", home),
        mounts.Mount(f"{host}/home/.ssh", cfg),  # inside the volume mounted over its parent
    ]
    plan = mounts.plan(list(reversed(wanted)), [f"{host}/home/work"], state / "layers", [state])
    assert plan.rewritten == {} and plan.real == sorted(m.target for m in wanted)
    assert plan.directories == [f"{host}/home/work"]
    layers = state / "layers"
    assert plan.fstab[0] == f"overlay {host} overlay lowerdir={host},upperdir={layers}/upper0,workdir={layers}/work0 0 0"
    assert plan.fstab[1:] == [
        f"{key} {host}/app/config.py none bind,ro 0 0",
        f"{cfg} {host}/has none bind 0 0",
        f"{home} {host}/home none bind 0 0",
        f"{cfg} {host}/home/.ssh none bind 0 0",
    ]
    # mountpoints were made where the container will see them, never in the host directory
    assert (layers / "upper0" / "app" / "config.py").is_file() and (layers / "upper0" / "home").is_dir()
    assert (home / ".ssh").is_dir() and (home / "work").is_dir()
    assert sorted(p.name for p in host.iterdir()) == ["has"]


def test_plan_stages_a_source_that_an_overlay_would_cover(tmp_path):
    host = tmp_path / "host"
    source = host / "data"  # a hostPath volume below the directory that gets the overlay
    source.mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir()
    plan = mounts.plan([mounts.Mount(f"{host}/new/dir", source)], [], state / "layers", [state])
    layers = state / "layers"
    assert plan.fstab[0] == f"{source} {layers}/src0 none bind 0 0"
    assert plan.fstab[1].startswith(f"overlay {host} overlay ")
    assert plan.fstab[2] == f"{layers}/src0 {host}/new/dir none bind 0 0"


def test_fstab_fields_escape_whitespace():
    assert mounts._bind(Path("/a b"), "/c\td", True) == "/a\\040b /c\\011d none bind,ro 0 0"


@pytest.mark.skipif(not uts_namespaces(), reason="no UTS and mount namespaces (not root, or no util-linux): pods use the host's /etc/hosts")
async def test_service_names_resolve_to_a_selected_pod_and_follow_changes(cluster):
    store = cluster.store
    served = pod("web", py("c", "import time; time.sleep(60)"))
    served["metadata"]["labels"] = {"app": "web"}
    store.create("pods", served, "default")
    store.create("pods", pod("client", py("c", "import time; time.sleep(60)")), "default")
    web = await wait_for_pod(store, "default", "web", lambda p: p["status"].get("phase") == "Running")
    await wait_for_pod(store, "default", "client", lambda p: p["status"].get("phase") == "Running")

    async def resolve(*names: str) -> list[str]:
        code = "import socket,sys\nfor n in sys.argv[1:]:\n    try: print(socket.gethostbyname(n))\n    except OSError: print('-')"
        proc, _ = await cluster.kubelet.open_exec("default", "client", None, [PY, "-c", code, *names], stdin=False, tty=False)
        out, _ = await proc.communicate()
        return out.decode().split()

    names = ("web", "web.default", "web.default.svc", "web.default.svc.cluster.local")
    assert await resolve(*names) == ["-"] * 4  # no Service yet
    store.create(
        "services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 8888}]},
        },
        "default",
    )
    ip = web["status"]["podIP"]
    # each look starts a Python process in the pod: a loaded machine gets few of them in 5 s
    deadline = asyncio.get_running_loop().time() + 20
    while (seen := await resolve(*names)) != [ip] * 4 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert seen == [ip] * 4
    store.delete("services", "default", "web")
    deadline = asyncio.get_running_loop().time() + 20
    while (seen := await resolve("web")) != ["-"] and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert seen == ["-"]
