"""The process kubelet's pod lifecycle: probes, restarts, termination, hostname, volumes."""

from __future__ import annotations

import asyncio
import base64
import os
import socket

import psutil
import pytest
from helpers.pods import pod, py

from jupyter_gpuburst.sim.kubelet.processes import uts_namespaces
from jupyter_gpuburst.sim.kubelet.volumes import PathMap
from jupyter_gpuburst.sim.testing import one_node_cluster, wait_for_pod, wait_until


@pytest.fixture
async def cluster(tmp_path):
    async with one_node_cluster(tmp_path, 6, backoff_initial_s=0.5) as c:
        yield c


def status_of(p: dict, name: str) -> dict:
    return next((c for c in p["status"].get("containerStatuses") or [] if c["name"] == name), {"restartCount": 0})


def ready(p: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])


async def test_http_readiness_and_liveness_restart(cluster):
    store = cluster.store
    # /ready answers 500 once the file "sick" is in its working directory, /alive once "dead" is
    server = (
        "import http.server,os\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        bad = {'/ready': 'sick', '/alive': 'dead'}.get(self.path)\n"
        "        self.send_response(500 if bad and os.path.exists(bad) else 200); self.end_headers()\n"
        "    def log_message(self,*a): pass\n"
        "http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n"
    )

    def probe(path: str) -> dict:
        # a loaded machine's server may take seconds to answer: a 500 must not read as a timeout
        return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 5}

    c = py(
        "web",
        server,
        ports=[{"name": "http", "containerPort": 8080}],
        # readiness and liveness begin once the server listens, however long its start takes
        startupProbe={"tcpSocket": {"port": "http"}, "periodSeconds": 1, "failureThreshold": 60},
        readinessProbe=probe("/ready"),
        livenessProbe=probe("/alive"),
        workingDir="/srv",
        volumeMounts=[{"name": "w", "mountPath": "/srv"}],
    )
    store.create("pods", pod("web", c, volumes=[{"name": "w", "emptyDir": {}}]), "default")
    up = await wait_for_pod(store, "default", "web", ready)
    assert status_of(up, "web")["restartCount"] == 0
    workdir = cluster.kubelet._pods[("default", "web")].volumes["w"]

    def events() -> list[str]:
        return [e["message"] for e in store.list("events", "default", field_selector="involvedObject.name=web")[0]]

    # a failing readiness probe takes the pod out of service and leaves the container running
    (workdir / "sick").touch()
    await wait_until(lambda: "Readiness probe failed: HTTP probe failed with statuscode: 500" in events(), 10, "readiness to fail")
    unready = store.get("pods", "default", "web")
    assert not ready(unready) and status_of(unready, "web")["restartCount"] == 0
    # a failing liveness probe restarts it, and the failure that did it is told
    (workdir / "dead").touch()
    restarted = await wait_for_pod(store, "default", "web", lambda p: status_of(p, "web")["restartCount"] >= 1)
    assert restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] in (137, 143)
    told = events()
    assert "Liveness probe failed: HTTP probe failed with statuscode: 500" in told
    assert "Container web failed liveness probe, will be restarted" in told


async def test_startup_probe_holds_started_and_ready(cluster):
    store = cluster.store
    code = "import time,pathlib;time.sleep(1.5);pathlib.Path('up').touch();time.sleep(60)"
    c = py("slow", code, startupProbe={"exec": {"command": ["test", "-f", "up"]}, "periodSeconds": 1, "failureThreshold": 30})
    store.create("pods", pod("slow", c), "default")
    running = await wait_for_pod(store, "default", "slow", lambda p: p["status"].get("phase") == "Running")
    assert status_of(running, "slow")["started"] is False and not ready(running)
    up = await wait_for_pod(store, "default", "slow", ready, timeout=10)
    assert status_of(up, "slow")["started"] is True


async def test_crash_loop_back_off_grows(cluster):
    store = cluster.store
    store.create("pods", pod("crash", py("c", "raise SystemExit(3)"), restartPolicy="Always"), "default")
    looping = await wait_for_pod(
        store, "default", "crash", lambda p: (status_of(p, "c").get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
    )
    cs = status_of(looping, "c")
    assert cs["restartCount"] == 1 and cs["lastState"]["terminated"]["exitCode"] == 3
    assert cs["state"]["waiting"]["message"].startswith("back-off 500ms restarting failed container=c pod=crash_default(")
    later = await wait_for_pod(store, "default", "crash", lambda p: status_of(p, "c")["restartCount"] >= 3, timeout=10)
    assert later["status"]["phase"] == "Running"
    events = store.list("events", "default", field_selector="involvedObject.name=crash,reason=BackOff")[0]
    assert events and events[0]["type"] == "Warning"


async def test_on_failure_restarts_only_failures_and_never_fails_the_pod(cluster):
    store = cluster.store
    # fails the first time only: a marker in an emptyDir survives the restart
    code = "import os,sys\nif os.path.exists('/m/once'): sys.exit(0)\nopen('/m/once','w').close(); sys.exit(2)"
    c = py("c", code, volumeMounts=[{"name": "m", "mountPath": "/m"}])
    store.create("pods", pod("onf", c, restartPolicy="OnFailure", volumes=[{"name": "m", "emptyDir": {}}]), "default")
    done = await wait_for_pod(store, "default", "onf", lambda p: p["status"].get("phase") in ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded" and status_of(done, "c")["restartCount"] == 1
    store.create("pods", pod("never", py("c", "raise SystemExit(4)"), restartPolicy="Never"), "default")
    failed = await wait_for_pod(store, "default", "never", lambda p: p["status"].get("phase") == "Failed")
    assert status_of(failed, "c")["restartCount"] == 0


async def test_graceful_termination_sigterm_then_sigkill(cluster):
    store = cluster.store
    # records SIGTERM, then ignores it: only SIGKILL after the grace period ends it
    code = "import signal,time\ndef term(*a): open('/m/term','w').write(str(time.time()))\nsignal.signal(signal.SIGTERM, term)\nopen('/m/ready','w').close()\nwhile True: time.sleep(0.05)"
    c = py("c", code, volumeMounts=[{"name": "m", "mountPath": "/m"}])
    store.create("pods", pod("grace", c, terminationGracePeriodSeconds=2, volumes=[{"name": "m", "emptyDir": {}}]), "default")
    await wait_for_pod(store, "default", "grace", lambda p: p["status"].get("phase") == "Running")
    volume = cluster.kubelet._pods[("default", "grace")].volumes["m"]
    await wait_until(lambda: (volume / "ready").exists(), 10, "the container to handle SIGTERM")
    store.delete("pods", "default", "grace")
    await wait_until(lambda: (volume / "term").exists(), 10, "SIGTERM to reach the container")
    # the container ignored SIGTERM: the pod waits out its grace period, then SIGKILL ends it
    assert store.exists("pods", "default", "grace")
    await wait_until(lambda: not store.exists("pods", "default", "grace"), 10, "the pod to be killed after its grace period")


async def test_deletion_also_ends_children_that_left_the_process_group(cluster):
    store = cluster.store
    code = "import subprocess,sys,time;p=subprocess.Popen([sys.executable,'-c','import time;time.sleep(60)'],start_new_session=True);print(p.pid,flush=True);time.sleep(60)"
    store.create("pods", pod("family", py("c", code)), "default")
    await wait_for_pod(store, "default", "family", lambda p: p["status"].get("phase") == "Running")
    log = cluster.kubelet.log_path("default", "family")
    await wait_until(lambda: log.read_text().strip(), 5, "the container to print its child's pid")
    child = int(log.read_text().split()[0])
    store.delete("pods", "default", "family")
    await wait_until(lambda: not store.exists("pods", "default", "family"), 30, "the pod to go")

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    # killed before the pod went; a loaded machine may take a moment to reap it
    await wait_until(gone, 5, "the child that left the process group to end")


async def test_hostname_is_the_pod_name(cluster):
    store = cluster.store
    store.create(
        "pods",
        pod("host-a", py("c", "import socket,os;print(socket.gethostname(), os.environ['HOSTNAME'])"), restartPolicy="Never"),
        "default",
    )
    await wait_for_pod(store, "default", "host-a", lambda p: p["status"].get("phase") == "Succeeded")
    assert cluster.kubelet.log_path("default", "host-a").read_text().split() == ["host-a", "host-a"]
    if uts_namespaces():  # its own UTS namespace: non-Python programs see it too
        store.create("pods", pod("host-b", {"name": "c", "image": "busybox", "command": ["hostname"]}, restartPolicy="Never"), "default")
        await wait_for_pod(store, "default", "host-b", lambda p: p["status"].get("phase") == "Succeeded")
        assert cluster.kubelet.log_path("default", "host-b").read_text().strip() == "host-b"
        assert socket.gethostname() != "host-b"
        # the pod's hosts file names it at its pod IP, as the kubelet's managed /etc/hosts does
        code = "import socket;print(socket.gethostbyname(socket.gethostname()))"
        store.create(
            "pods",
            pod("host-c", py("c", code), restartPolicy="Never", hostAliases=[{"ip": "127.0.0.9", "hostnames": ["alias.example"]}]),
            "default",
        )
        done = await wait_for_pod(store, "default", "host-c", lambda p: p["status"].get("phase") == "Succeeded")
        assert cluster.kubelet.log_path("default", "host-c").read_text().strip() == done["status"]["podIP"]
        assert (
            "127.0.0.9\talias.example"
            in (cluster.kubelet._finished.get(("default", "host-c")) or cluster.kubelet._pods[("default", "host-c")]).hosts_file.read_text()
        )


async def test_volume_sources_items_modes_and_missing_configmap(cluster):
    store = cluster.store
    store.create(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"a.json": "{}", "b": "bee"},
            "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()},
        },
        "default",
    )
    code = "import os,json,stat\nprint(json.dumps({'cfg': sorted(os.listdir('/etc/cfg')), 'only': open('/etc/only/renamed').read(), 'mode': oct(stat.S_IMODE(os.stat('/etc/only/renamed').st_mode)), 'bin': list(open('/etc/cfg/bin','rb').read())}))"
    c = py("c", code, volumeMounts=[{"name": "cfg", "mountPath": "/etc/cfg"}, {"name": "only", "mountPath": "/etc/only"}])
    vols = [
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "only", "configMap": {"name": "cfg", "items": [{"key": "b", "path": "renamed"}], "defaultMode": 0o600}},
    ]
    # the paths reach the program in its args (here, the -c program text), which are mapped
    store.create("pods", pod("vols", c, restartPolicy="Never", volumes=vols), "default")
    done = await wait_for_pod(store, "default", "vols", lambda p: p["status"].get("phase") in ("Succeeded", "Failed"))
    out = cluster.kubelet.log_path("default", "vols").read_text()
    assert done["status"]["phase"] == "Succeeded", out
    assert '"cfg": ["a.json", "b", "bin"]' in out and '"only": "bee"' in out and '"mode": "0o600"' in out and '"bin": [0, 1]' in out
    # a missing configmap: FailedMount, the pod stays Pending without containers started
    store.create("pods", pod("nocm", py("c", "print(1)"), volumes=[{"name": "x", "configMap": {"name": "absent"}}]), "default")
    await wait_until(
        lambda: store.list("events", "default", field_selector="involvedObject.name=nocm,reason=FailedMount")[0], 10, "FailedMount"
    )
    pending = store.get("pods", "default", "nocm")
    assert pending["status"].get("phase", "Pending") == "Pending"
    events = store.list("events", "default", field_selector="involvedObject.name=nocm,reason=FailedMount")[0]
    assert events and 'configmap "absent" not found' in events[0]["message"]


def test_path_map_rewrites_mount_paths_only_at_path_boundaries(tmp_path):
    view = PathMap(tmp_path / "root", {"/home/jovyan": tmp_path / "vol", "/etc/cfg": tmp_path / "cfg"})
    assert view.rewrite("--notebook-dir=/home/jovyan") == f"--notebook-dir={tmp_path / 'vol'}"
    assert view.rewrite("/home/jovyan/work/x.ipynb") == f"{tmp_path / 'vol'}/work/x.ipynb"
    assert view.rewrite("/home/jovyanother") == "/home/jovyanother"
    assert view.rewrite("PATH=/usr/bin:/etc/cfg") == f"PATH=/usr/bin:{tmp_path / 'cfg'}"
    assert view.rewrite("http://host/home/jovyan") == "http://host/home/jovyan"
    assert view.resolve("/etc/cfgx") == "/etc/cfgx"


async def test_namespace_deletion_kills_running_pods_and_finishes(cluster):
    store = cluster.store
    store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nsdel"}})
    store.create("pods", pod("p", py("c", "import time;time.sleep(60)"), terminationGracePeriodSeconds=5), "nsdel")
    await wait_for_pod(store, "nsdel", "p", lambda p: p["status"].get("phase") == "Running")
    pid = cluster.kubelet.processes()[("nsdel", "p")]
    store.delete("namespaces", None, "nsdel")
    for _ in range(200):
        if not store.exists("namespaces", None, "nsdel"):
            break
        await asyncio.sleep(0.05)
    assert not store.exists("namespaces", None, "nsdel")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_running_is_never_reported_without_a_pod_ip(cluster):
    store = cluster.store
    watch = store.watch("pods")
    store.create("pods", pod("ip", py("main", "import time; time.sleep(60)")), "default")
    seen = []
    async for _etype, p in watch:
        seen.append(p)
        if p["status"].get("phase") == "Running" or len(seen) > 20:
            break
    watch.close()
    running = [p for p in seen if p["status"].get("phase") == "Running"]
    assert running, [p["status"] for p in seen]
    assert all(p["status"].get("podIP") for p in running)


async def test_pod_recreated_under_the_name_of_a_force_deleted_one_starts(cluster):
    store = cluster.store
    # ignores SIGTERM, so the old container outlives its pod object for a while
    stubborn = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    store.create("pods", pod("same", py("main", stubborn)), "default")
    old = await wait_for_pod(store, "default", "same", lambda p: p["status"].get("phase") == "Running")
    store.delete("pods", "default", "same", grace_period_seconds=0)
    store.create("pods", pod("same", py("main", "import time; time.sleep(60)")), "default")
    new = await wait_for_pod(
        store,
        "default",
        "same",
        lambda p: p["status"].get("phase") == "Running" and p["metadata"]["uid"] != old["metadata"]["uid"],
        timeout=20,
    )
    assert new["status"]["podIP"]


async def test_a_pod_whose_deletion_the_kubelet_missed_is_killed_by_housekeeping(cluster, monkeypatch, caplog):
    store, kubelet = cluster.store, cluster.kubelet
    store.create("pods", pod("missed", py("main", "import time; time.sleep(60)")), "default")
    await wait_for_pod(store, "default", "missed", lambda p: p["status"].get("phase") == "Running")
    assert ("default", "missed") in kubelet.processes()
    seen = kubelet._on_pod_event

    def deaf_to_deletions(etype, p):
        if etype != "DELETED":
            seen(etype, p)

    # the event of the deletion is lost, as one is when a node's watch breaks at the wrong time
    monkeypatch.setattr(kubelet, "_on_pod_event", deaf_to_deletions)
    store.delete("pods", "default", "missed", grace_period_seconds=0)
    await asyncio.sleep(0.5)
    assert ("default", "missed") in kubelet.processes(), "the deletion was seen after all: this test tests nothing"
    await wait_until(lambda: ("default", "missed") not in kubelet.processes(), 15, "housekeeping to kill the orphaned pod")
    assert "default/missed" in caplog.text and "gone from the API" in caplog.text


async def test_a_pod_whose_sync_fails_leaves_the_node_running_the_others(cluster, monkeypatch, caplog):
    store, kubelet = cluster.store, cluster.kubelet
    start = kubelet._start_pod

    def broken_for_one(key, p):
        if key[1] == "broken":
            raise OSError("No space left on device")
        start(key, p)

    monkeypatch.setattr(kubelet, "_start_pod", broken_for_one)
    store.create("pods", pod("broken", py("main", "import time; time.sleep(60)")), "default")
    store.create("pods", pod("fine", py("main", "import time; time.sleep(60)")), "default")
    await wait_for_pod(store, "default", "fine", lambda p: p["status"].get("phase") == "Running")
    assert "sync of pod default/broken failed" in caplog.text and "No space left on device" in caplog.text
    # and the node still sees what comes after: the running pod's deletion
    store.delete("pods", "default", "fine")
    await wait_until(lambda: not store.exists("pods", "default", "fine"), 15, "the pod to go")


async def test_grpc_probe_is_reported_unsupported_and_never_passes(cluster):
    from jupyter_gpuburst.sim.kubelet.probes import GRPC_UNSUPPORTED

    store = cluster.store
    c = py("main", "import time; time.sleep(60)", readinessProbe={"grpc": {"port": 9090}, "periodSeconds": 1, "failureThreshold": 1})
    store.create("pods", pod("grpc", c), "default")
    await wait_for_pod(store, "default", "grpc", lambda p: p["status"].get("phase") == "Running")
    message = f"Readiness probe failed: {GRPC_UNSUPPORTED}"

    def unhealthy() -> bool:
        return any(
            e["reason"] == "Unhealthy" and e["message"] == message
            for e in store.list("events", "default", field_selector="involvedObject.name=grpc")[0]
        )

    for _ in range(250):
        if unhealthy():
            break
        await asyncio.sleep(0.02)
    assert unhealthy()
    assert not ready(store.get("pods", "default", "grpc"))
