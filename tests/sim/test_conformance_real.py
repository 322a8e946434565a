"""Kubernetes behaviour the product and KubeSpawner rely on, asserted as any conformant cluster
(kube-apiserver + kubelet) shows it. Run against a real cluster in this tier, and against the
local federation by ``test_tier_runs_against_emulator.py``; one test per behaviour.

Pods use ``GPUBURST_TEST_IMAGE`` (busybox by default) and only ``sh``, ``sleep``, ``cat``, ``touch``, ``rm``,
``echo``, ``hostname`` and ``test``; the network test uses ``GPUBURST_PYTHON_IMAGE`` (``python3``).

Longer than 600 lines: it is the list of those behaviours, one short test each, that
tests/REALCLUSTER.md points a cluster's admin to; the 15 tests share nothing but their helpers.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers.programs import FETCH, NETWORK_SERVER

pytestmark = pytest.mark.realcluster


def wait(what: str, fn: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2) -> Any:
    """Poll ``fn`` until it returns something truthy; its last value in the failure message."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as exc:  # noqa: BLE001 - a not-yet state (404, missing field)
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout}s; last: {last!r}")


def name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def read_pod(core_v1: Any, ns: str, pod: str) -> dict:
    return json.loads(core_v1.read_namespaced_pod(pod, ns, _preload_content=False).data)


def container_status(pod: dict, container: str, init: bool = False) -> dict:
    key = "initContainerStatuses" if init else "containerStatuses"
    return next((c for c in (pod.get("status") or {}).get(key) or [] if c["name"] == container), {})


def condition(pod: dict, ctype: str) -> str | None:
    return next((c["status"] for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def make_pod(core_v1: Any, ns: str, pod_name: str, spec: dict) -> None:
    spec.setdefault("terminationGracePeriodSeconds", 2)
    core_v1.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name}, "spec": spec})


def logs(core_v1: Any, ns: str, pod: str, container: str | None = None) -> str:
    kwargs = {"container": container} if container else {}
    return core_v1.read_namespaced_pod_log(pod, ns, **kwargs)


def sh(image: str, script: str, cname: str = "main", **extra: Any) -> dict:
    return {"name": cname, "image": image, "command": ["sh", "-c", script], **extra}


@pytest.fixture
def cleanup(core_v1, test_namespace):
    pods: list[str] = []
    yield pods
    for pod in pods:
        try:
            core_v1.delete_namespaced_pod(pod, test_namespace, grace_period_seconds=0)
        except Exception:  # noqa: BLE001 - already gone
            pass


# 1. Deleting a namespace that holds a running pod finishes.
def test_namespace_with_running_pod_is_deleted(core_v1, real_cluster):
    ns = name("gpuburst-test-nsdel")
    core_v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        make_pod(
            core_v1, ns, "sleeper", {"containers": [sh(real_cluster.test_image, "exec sleep 3600")], "terminationGracePeriodSeconds": 5}
        )
        wait("pod running", lambda: read_pod(core_v1, ns, "sleeper")["status"].get("phase") == "Running", real_cluster.start_timeout)
        # the answer to the DELETE is the namespace, Terminating while its pods are killed (read
        # afterwards, it may already be gone: `sleep` ends at once on SIGTERM)
        deleted = core_v1.delete_namespace(ns, _preload_content=False)
        assert json.loads(deleted.data)["status"]["phase"] == "Terminating"
        from kubernetes.client.exceptions import ApiException

        def gone() -> bool:
            try:
                core_v1.read_namespace(ns)
            except ApiException as exc:
                return exc.status == 404
            return False

        # SIGTERM ends `sleep` at once (pid 1 of its own, or the shell's exec), well within 5 s
        wait("namespace gone", gone, 60)
    finally:
        try:
            core_v1.delete_namespace(ns)
        except Exception:  # noqa: BLE001 - gone, as it should be
            pass


# 2. Readiness probes drive the Ready condition.
def test_readiness_probes_drive_ready(core_v1, test_namespace, real_cluster, cleanup):
    closed, flag = name("closed-port"), name("flag")
    cleanup += [closed, flag]
    make_pod(
        core_v1,
        test_namespace,
        closed,
        {
            "containers": [
                sh(
                    real_cluster.test_image,
                    "exec sleep 3600",
                    readinessProbe={"tcpSocket": {"port": 8081}, "periodSeconds": 1, "failureThreshold": 1},
                )
            ]
        },
    )
    make_pod(
        core_v1,
        test_namespace,
        flag,
        {
            "containers": [
                sh(
                    real_cluster.test_image,
                    "sleep 3; touch /flags/ready; exec sleep 3600",
                    readinessProbe={"exec": {"command": ["test", "-f", "/flags/ready"]}, "periodSeconds": 1},
                    volumeMounts=[{"name": "flags", "mountPath": "/flags"}],
                )
            ],
            "volumes": [{"name": "flags", "emptyDir": {}}],
        },
    )
    wait("flag pod ready", lambda: condition(read_pod(core_v1, test_namespace, flag), "Ready") == "True", real_cluster.start_timeout)
    pod = read_pod(core_v1, test_namespace, closed)
    assert pod["status"]["phase"] == "Running"
    assert condition(pod, "Ready") == "False" and container_status(pod, "main")["ready"] is False
    events = core_v1.list_namespaced_event(test_namespace, field_selector=f"involvedObject.name={closed},reason=Unhealthy").items
    assert events and events[0].type == "Warning" and "Readiness probe failed" in events[0].message


# 3. restartPolicy, restarts, every container, init containers in order.
def test_restart_policy_and_every_container(core_v1, test_namespace, real_cluster, cleanup):
    crash, ordered, once = name("crash"), name("ordered"), name("once")
    cleanup += [crash, ordered, once]
    image = real_cluster.test_image
    make_pod(
        core_v1,
        test_namespace,
        crash,
        {"restartPolicy": "Always", "containers": [sh(image, "echo crashing; exit 3"), sh(image, "exec sleep 3600", "sidecar")]},
    )
    make_pod(
        core_v1,
        test_namespace,
        ordered,
        {
            "restartPolicy": "Never",
            "initContainers": [
                sh(image, "echo first >> /work/order", "init-a", volumeMounts=[{"name": "w", "mountPath": "/work"}]),
                sh(image, "echo second >> /work/order", "init-b", volumeMounts=[{"name": "w", "mountPath": "/work"}]),
            ],
            "containers": [sh(image, "cat /work/order", volumeMounts=[{"name": "w", "mountPath": "/work"}])],
            "volumes": [{"name": "w", "emptyDir": {}}],
        },
    )
    make_pod(core_v1, test_namespace, once, {"restartPolicy": "OnFailure", "containers": [sh(image, "exit 0")]})

    def crash_looping() -> dict | None:
        pod = read_pod(core_v1, test_namespace, crash)
        cs = container_status(pod, "main")
        waiting = (cs.get("state") or {}).get("waiting") or {}
        return pod if cs.get("restartCount", 0) >= 1 and waiting.get("reason") == "CrashLoopBackOff" else None

    pod = wait("CrashLoopBackOff", crash_looping, real_cluster.start_timeout + 60)
    main = container_status(pod, "main")
    assert main["lastState"]["terminated"]["exitCode"] == 3 and main["lastState"]["terminated"]["reason"] == "Error"
    assert "running" in container_status(pod, "sidecar")["state"]
    assert pod["status"]["phase"] == "Running"
    done = wait(
        "ordered pod done",
        lambda: (p := read_pod(core_v1, test_namespace, ordered))["status"].get("phase") in ("Succeeded", "Failed") and p,
        real_cluster.start_timeout,
    )
    assert done["status"]["phase"] == "Succeeded"
    assert [c["state"]["terminated"]["exitCode"] for c in done["status"]["initContainerStatuses"]] == [0, 0]
    assert logs(core_v1, test_namespace, ordered).split() == ["first", "second"]
    finished = wait(
        "OnFailure pod done",
        lambda: (p := read_pod(core_v1, test_namespace, once))["status"].get("phase") in ("Succeeded", "Failed") and p,
        real_cluster.start_timeout,
    )
    assert finished["status"]["phase"] == "Succeeded" and container_status(finished, "main")["restartCount"] == 0


# 4. pods/exec through the kubernetes client's stream helper (WebSocket, v4.channel.k8s.io).
def test_exec_streams_and_exit_code(core_v1, test_namespace, real_cluster, cleanup):
    from kubernetes.stream import stream

    pod_name = name("exec")
    cleanup.append(pod_name)
    make_pod(
        core_v1,
        test_namespace,
        pod_name,
        {"containers": [sh(real_cluster.test_image, "exec sleep 3600", env=[{"name": "GREETING", "value": "hello"}])]},
    )
    wait("pod running", lambda: read_pod(core_v1, test_namespace, pod_name)["status"].get("phase") == "Running", real_cluster.start_timeout)
    resp = stream(
        core_v1.connect_get_namespaced_pod_exec,
        pod_name,
        test_namespace,
        command=["sh", "-c", 'echo "$GREETING"; echo oops >&2; read line; echo "got $line"; exit 3'],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    resp.write_stdin("ping\n")
    out, err = "", ""
    deadline = time.monotonic() + 30
    while resp.is_open() and time.monotonic() < deadline:
        resp.update(timeout=1)
        out += resp.read_stdout() if resp.peek_stdout() else ""
        err += resp.read_stderr() if resp.peek_stderr() else ""
    resp.close()
    assert out.split("\n")[:2] == ["hello", "got ping"]
    assert err.strip() == "oops"
    assert resp.returncode == 3
    assert (
        stream(
            core_v1.connect_get_namespaced_pod_exec,
            pod_name,
            test_namespace,
            command=["hostname"],
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
        ).strip()
        == pod_name
    )


# 5. Volumes appear as directories; the hostname is the pod name; claims keep their data.
def test_volumes_and_hostname(core_v1, test_namespace, real_cluster, cleanup):
    pod_name = name("vols")
    cleanup.append(pod_name)
    core_v1.create_namespaced_config_map(test_namespace, {"metadata": {"name": pod_name}, "data": {"greeting": "hi from a configmap"}})
    core_v1.create_namespaced_secret(test_namespace, {"metadata": {"name": pod_name}, "stringData": {"token": "s3cret"}})
    script = (
        "cat /cfg/greeting; echo; cat /sec/token; echo; cat /meta/name; echo; cat /proj/greeting; echo; cat /proj/labels; echo; "
        "test -d /scratch && echo scratch-ok; hostname"
    )
    mounts = [
        {"name": "cfg", "mountPath": "/cfg"},
        {"name": "sec", "mountPath": "/sec"},
        {"name": "meta", "mountPath": "/meta"},
        {"name": "proj", "mountPath": "/proj"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    make_pod(
        core_v1,
        test_namespace,
        pod_name,
        {
            "restartPolicy": "Never",
            "containers": [sh(real_cluster.test_image, script, volumeMounts=mounts)],
            "volumes": [
                {"name": "cfg", "configMap": {"name": pod_name}},
                {"name": "sec", "secret": {"secretName": pod_name}},
                {"name": "meta", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                {
                    "name": "proj",
                    "projected": {
                        "sources": [
                            {"configMap": {"name": pod_name}},
                            {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                        ]
                    },
                },
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    )
    done = wait(
        "pod done",
        lambda: (p := read_pod(core_v1, test_namespace, pod_name))["status"].get("phase") in ("Succeeded", "Failed") and p,
        real_cluster.start_timeout,
    )
    assert done["status"]["phase"] == "Succeeded", logs(core_v1, test_namespace, pod_name)
    lines = logs(core_v1, test_namespace, pod_name).splitlines()
    assert lines == ["hi from a configmap", "s3cret", pod_name, "hi from a configmap", "", "scratch-ok", pod_name]


def test_a_path_written_in_a_file_finds_its_volume(core_v1, test_namespace, real_cluster, cleanup):
    """A program that reads a volume's path from a file (a hub config naming its secret) finds
    it: mounts are at their mountPath, whatever way the program learns it."""
    pod_name = name("abspath")
    cleanup.append(pod_name)
    core_v1.create_namespaced_config_map(
        test_namespace, {"metadata": {"name": pod_name}, "data": {"where": "/etc/gpuburst-app/secret/token"}}
    )
    core_v1.create_namespaced_secret(test_namespace, {"metadata": {"name": pod_name}, "stringData": {"token": "found"}})
    mounts = [
        {"name": "cfg", "mountPath": "/etc/gpuburst-app/where", "subPath": "where"},
        {"name": "sec", "mountPath": "/etc/gpuburst-app/secret", "readOnly": True},
    ]
    script = 'cat "$(cat "$WHERE")"; echo; touch /etc/gpuburst-app/secret/new 2>/dev/null && echo writable || echo read-only'
    make_pod(
        core_v1,
        test_namespace,
        pod_name,
        {
            "restartPolicy": "Never",
            "containers": [
                sh(real_cluster.test_image, script, env=[{"name": "WHERE", "value": "/etc/gpuburst-app/where"}], volumeMounts=mounts)
            ],
            "volumes": [{"name": "cfg", "configMap": {"name": pod_name}}, {"name": "sec", "secret": {"secretName": pod_name}}],
        },
    )
    done = wait(
        "pod done",
        lambda: (p := read_pod(core_v1, test_namespace, pod_name))["status"].get("phase") in ("Succeeded", "Failed") and p,
        real_cluster.start_timeout,
    )
    assert done["status"]["phase"] == "Succeeded", logs(core_v1, test_namespace, pod_name)
    assert logs(core_v1, test_namespace, pod_name).splitlines() == ["found", "read-only"]


def test_claim_data_outlives_the_pod(core_v1, test_namespace, real_cluster, cleanup):
    claim, writer, reader = name("claim"), name("writer"), name("reader")
    cleanup += [writer, reader]
    core_v1.create_namespaced_persistent_volume_claim(
        test_namespace,
        {"metadata": {"name": claim}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}}},
    )
    volume = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    mount = [{"name": "data", "mountPath": "/data"}]
    make_pod(
        core_v1,
        test_namespace,
        writer,
        {
            "restartPolicy": "Never",
            "containers": [sh(real_cluster.test_image, "echo kept > /data/file", volumeMounts=mount)],
            "volumes": volume,
        },
    )
    wait("writer done", lambda: read_pod(core_v1, test_namespace, writer)["status"].get("phase") == "Succeeded", real_cluster.start_timeout)
    core_v1.delete_namespaced_pod(writer, test_namespace)
    make_pod(
        core_v1,
        test_namespace,
        reader,
        {"restartPolicy": "Never", "containers": [sh(real_cluster.test_image, "cat /data/file", volumeMounts=mount)], "volumes": volume},
    )
    wait("reader done", lambda: read_pod(core_v1, test_namespace, reader)["status"].get("phase") == "Succeeded", real_cluster.start_timeout)
    assert logs(core_v1, test_namespace, reader).strip() == "kept"


# 6. Secret stringData is write-only: encoded into data.
def test_secret_string_data_is_encoded_into_data(core_v1, test_namespace):
    secret = name("sd")
    created = json.loads(
        core_v1.create_namespaced_secret(
            test_namespace,
            {"metadata": {"name": secret}, "data": {"a": base64.b64encode(b"old").decode()}, "stringData": {"a": "new", "b": "plain"}},
            _preload_content=False,
        ).data
    )
    assert "stringData" not in created
    assert {k: base64.b64decode(v).decode() for k, v in created["data"].items()} == {"a": "new", "b": "plain"}
    replaced = json.loads(
        core_v1.patch_namespaced_secret(secret, test_namespace, {"stringData": {"c": "more"}}, _preload_content=False).data
    )
    assert "stringData" not in replaced and base64.b64decode(replaced["data"]["c"]) == b"more"
    core_v1.delete_namespaced_secret(secret, test_namespace)


# 7a. DELETE answers a Status for configmaps and secrets, the object for pods.
def test_delete_returns_status_or_object_as_the_registry_does(core_v1, test_namespace, real_cluster):
    cm = name("del")
    core_v1.create_namespaced_config_map(test_namespace, {"metadata": {"name": cm}, "data": {"k": "v"}})
    body = json.loads(core_v1.delete_namespaced_config_map(cm, test_namespace, _preload_content=False).data)
    assert body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == cm and body["details"]["kind"] == "configmaps" and body["details"]["uid"]
    pod_name = name("delpod")
    make_pod(core_v1, test_namespace, pod_name, {"containers": [sh(real_cluster.test_image, "exec sleep 3600")]})
    body = json.loads(core_v1.delete_namespaced_pod(pod_name, test_namespace, _preload_content=False).data)
    assert body["kind"] == "Pod" and body["metadata"]["name"] == pod_name


# 7b. Server-side apply: create on apply, managedFields, 409 on a conflict, force takes over.
def test_server_side_apply(core_v1, test_namespace):
    cm = name("ssa")

    def apply(body: dict, manager: str, force: bool = False) -> tuple[int, dict]:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = core_v1.patch_namespaced_config_map(
                cm,
                test_namespace,
                body,
                field_manager=manager,
                force=force or None,
                _content_type="application/apply-patch+yaml",
                _preload_content=False,
            )
        except ApiException as exc:
            return exc.status, json.loads(exc.body)
        return resp.status, json.loads(resp.data)

    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm, "labels": {"owner": "a"}},
        "data": {"shared": "1", "a-only": "x"},
    }
    code, created = apply(config, "manager-a")
    assert code == 201 and created["data"] == {"shared": "1", "a-only": "x"}
    entry = next(m for m in created["metadata"]["managedFields"] if m["manager"] == "manager-a")
    assert entry["operation"] == "Apply" and "f:shared" in entry["fieldsV1"]["f:data"]
    code, conflict = apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm}, "data": {"shared": "2"}}, "manager-b")
    assert code == 409 and conflict["reason"] == "Conflict" and "manager-a" in conflict["message"]
    assert json.loads(core_v1.read_namespaced_config_map(cm, test_namespace, _preload_content=False).data)["data"]["shared"] == "1"
    code, forced = apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm}, "data": {"shared": "2"}}, "manager-b", force=True
    )
    assert code == 200 and forced["data"] == {"shared": "2", "a-only": "x"}
    # manager-a drops a field it alone owns: it goes; the field it lost stays with manager-b
    code, pruned = apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm, "labels": {"owner": "a"}}, "data": {}}, "manager-a"
    )
    assert code == 200 and pruned["data"] == {"shared": "2"}
    core_v1.delete_namespaced_config_map(cm, test_namespace)


# 7c. events.k8s.io/v1 events can be watched.
def test_events_v1_watch_sees_new_event(kube_client, core_v1, test_namespace):
    from kubernetes import client

    events_v1 = client.EventsV1Api(kube_client)
    rv = json.loads(events_v1.list_namespaced_event(test_namespace, _preload_content=False).data)["metadata"]["resourceVersion"]
    ev_name = name("ev")
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    events_v1.create_namespaced_event(
        test_namespace,
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": ev_name},
            "eventTime": now,
            "reportingController": "gpuburst.io/tests",
            "reportingInstance": "tests",
            "action": "Testing",
            "reason": "Conformance",
            "note": "watched",
            "type": "Normal",
            "regarding": {"kind": "Namespace", "name": test_namespace, "apiVersion": "v1"},
        },
    )
    # raw JSON: the client's model rejects kubelet events, whose eventTime is null in this API
    seen = None
    resp = events_v1.list_namespaced_event(
        test_namespace, watch=True, resource_version=rv, timeout_seconds=20, _preload_content=False, _request_timeout=30
    )
    try:
        for line in _lines(resp):
            event = json.loads(line)
            if event["object"]["metadata"]["name"] == ev_name:
                seen = event
                break
    finally:
        resp.release_conn()
    assert seen is not None and seen["type"] == "ADDED"
    assert seen["object"]["apiVersion"] == "events.k8s.io/v1"
    assert seen["object"]["note"] == "watched" and seen["object"]["regarding"]["name"] == test_namespace


def _lines(resp: Any):
    """Lines of a streamed HTTP response, as they arrive."""
    buffer = b""
    for chunk in resp.stream(4096, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line


# 7d. list limit/continue pages through a collection.
def test_list_paging_with_continue(core_v1, test_namespace):
    prefix = name("page")
    names = sorted(f"{prefix}-{i}" for i in range(5))
    for cm in names:
        core_v1.create_namespaced_config_map(test_namespace, {"metadata": {"name": cm, "labels": {"page": prefix}}, "data": {}})
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core_v1.list_namespaced_config_map(test_namespace, label_selector=f"page={prefix}", limit=2, _continue=token)
        assert len(page.items) <= 2
        seen += [c.metadata.name for c in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert seen == names and pages == 3
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as err:
        core_v1.list_namespaced_config_map(test_namespace, limit=2, _continue="not-a-token")
    assert err.value.status == 400
    for cm in names:
        core_v1.delete_namespaced_config_map(cm, test_namespace)


# 8. Lifecycle hooks: postStart holds the container from Running, and its failure kills it;
# preStop runs before SIGTERM.
def test_post_start_hook_runs_before_running_and_its_failure_kills(core_v1, test_namespace, real_cluster, cleanup):
    from kubernetes.stream import stream

    good, bad = name("poststart"), name("poststart-fails")
    cleanup += [good, bad]
    mount = [{"name": "w", "mountPath": "/w"}]
    make_pod(
        core_v1,
        test_namespace,
        good,
        {
            "containers": [
                sh(
                    real_cluster.test_image,
                    "exec sleep 3600",
                    volumeMounts=mount,
                    lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "sleep 2; echo hooked > /w/post"]}}},
                )
            ],
            "volumes": [{"name": "w", "emptyDir": {}}],
        },
    )
    make_pod(
        core_v1,
        test_namespace,
        bad,
        {
            "containers": [
                sh(real_cluster.test_image, "exec sleep 3600", lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "exit 3"]}}})
            ]
        },
    )
    wait(
        "hooked pod running",
        lambda: "running" in (container_status(read_pod(core_v1, test_namespace, good), "main").get("state") or {}),
        real_cluster.start_timeout,
    )
    # the container is Running only once its postStart hook has returned: the hook's file is there
    out = stream(
        core_v1.connect_get_namespaced_pod_exec,
        good,
        test_namespace,
        command=["cat", "/w/post"],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
    )
    assert out.strip() == "hooked"
    wait(
        "failing hook restarts the container",
        lambda: container_status(read_pod(core_v1, test_namespace, bad), "main").get("restartCount", 0) >= 1,
        real_cluster.start_timeout + 30,
    )
    reasons = {e.reason for e in core_v1.list_namespaced_event(test_namespace, field_selector=f"involvedObject.name={bad}").items}
    assert "FailedPostStartHook" in reasons


def test_pre_stop_hook_runs_before_sigterm(core_v1, test_namespace, real_cluster, cleanup):
    pod_name = name("prestop")
    cleanup.append(pod_name)
    # First instance: traps SIGTERM (noting whether the preStop hook ran before it), then turns
    # its liveness probe false so the kubelet kills it. The restarted instance prints the note.
    script = (
        "if [ -f /w/at-term ]; then cat /w/at-term; rm -f /w/sick; exec sleep 3600; fi; "
        "trap 'if [ -f /w/prestop ]; then echo hook-first > /w/at-term; else echo term-first > /w/at-term; fi; exit 0' TERM; "
        "sleep 1; touch /w/sick; while true; do sleep 1; done"
    )
    make_pod(
        core_v1,
        test_namespace,
        pod_name,
        {
            "terminationGracePeriodSeconds": 10,
            "containers": [
                sh(
                    real_cluster.test_image,
                    script,
                    volumeMounts=[{"name": "w", "mountPath": "/w"}],
                    livenessProbe={"exec": {"command": ["sh", "-c", "test ! -f /w/sick"]}, "periodSeconds": 1, "failureThreshold": 1},
                    lifecycle={"preStop": {"exec": {"command": ["touch", "/w/prestop"]}}},
                )
            ],
            "volumes": [{"name": "w", "emptyDir": {}}],
        },
    )
    wait(
        "container restarted after the liveness kill",
        lambda: container_status(read_pod(core_v1, test_namespace, pod_name), "main").get("restartCount", 0) >= 1,
        real_cluster.start_timeout + 30,
    )
    assert wait("restarted instance's note", lambda: logs(core_v1, test_namespace, pod_name).strip(), 30) == "hook-first"


# 9. Each pod has a network of its own: the two ports a JupyterHub pod's proxy takes (all
# addresses' 8000, 127.0.0.1:8001) are free in every pod, whatever the others listen on.


def test_each_pod_has_a_network_of_its_own(core_v1, test_namespace, real_cluster, cleanup):
    from kubernetes.stream import stream

    pods = {who: name(f"net{who}") for who in ("a", "b")}
    for who, pod_name in pods.items():
        cleanup.append(pod_name)
        make_pod(
            core_v1,
            test_namespace,
            pod_name,
            {
                "containers": [
                    {
                        "name": "main",
                        "image": real_cluster.python_image,
                        "command": ["python3", "-c", NETWORK_SERVER],
                        "env": [{"name": "WHO", "value": who}],
                        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1},
                    }
                ]
            },
        )
    ips = {}
    for who, pod_name in pods.items():
        ready = wait(
            f"pod {who} ready",
            lambda pod_name=pod_name: condition(p := read_pod(core_v1, test_namespace, pod_name), "Ready") == "True" and p,
            real_cluster.start_timeout,
        )
        ips[who] = ready["status"]["podIP"]

    def fetch(pod_name: str, url: str) -> str:
        return stream(
            core_v1.connect_get_namespaced_pod_exec,
            pod_name,
            test_namespace,
            command=["python3", "-c", FETCH, url],
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
        ).strip()

    assert fetch(pods["a"], "http://127.0.0.1:8001/") == "private-a"
    assert fetch(pods["b"], "http://127.0.0.1:8001/") == "private-b"
    assert fetch(pods["a"], f"http://{ips['b']}:8000/") == "b"
    assert fetch(pods["b"], "http://localhost:8000/") == "b"
