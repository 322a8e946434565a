"""What a container runtime derives from a pod: argv, environment, executable, user."""

from __future__ import annotations

import base64
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.store import Store

Obj = dict[str, Any]
_FIELD_REF = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.hostIP",
)


def _subscript(path: str, prefix: str) -> str | None:
    """``metadata.labels['x']`` -> ``x``."""
    if path.startswith(prefix + "['") and path.endswith("']"):
        return path[len(prefix) + 2 : -2]
    return None


def resolve_field_ref(pod: Obj, path: str) -> str:
    """The value of a downward-API fieldRef."""
    for prefix in ("metadata.labels", "metadata.annotations"):
        key = _subscript(path, prefix)
        if key is not None:
            return ((pod.get("metadata") or {}).get(prefix.split(".")[1]) or {}).get(key, "")
    if path not in _FIELD_REF:
        raise ValueError(f"unsupported fieldRef fieldPath {path!r}")
    value: Any = pod
    for part in path.split("."):
        value = (value or {}).get(part)
    return "" if value is None else str(value)


def pod_env(pod: Obj, container: Obj, store: Store, replace_ip: str | None) -> dict[str, str]:
    """The container's environment as the kubelet builds it (service links left out), with
    0.0.0.0 replaced by ``replace_ip`` where given (a pod sharing the host's network)."""
    env: dict[str, str] = {}
    namespace = pod["metadata"]["namespace"]
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            data = _lookup(store, "configmaps", namespace, source["configMapRef"], None, decode=False)
        else:
            data = _lookup(store, "secrets", namespace, source.get("secretRef") or {}, None, decode=True)
        for k, v in (data or {}).items():
            env[prefix + k] = v
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" in item:
            src = item["valueFrom"]
            if "fieldRef" in src:
                value = resolve_field_ref(pod, src["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in src:
                value = _lookup(store, "configmaps", namespace, src["configMapKeyRef"], src["configMapKeyRef"].get("key"), decode=False)
            elif "secretKeyRef" in src:
                value = _lookup(store, "secrets", namespace, src["secretKeyRef"], src["secretKeyRef"].get("key"), decode=True)
            else:
                value = ""  # resourceFieldRef: not emulated
            env[name] = "" if value is None else str(value)
        else:
            env[name] = _expand(str(item.get("value", "")), env)
    if replace_ip is None:
        return env
    return {k: v.replace("0.0.0.0", replace_ip) for k, v in env.items()}


def _lookup(store: Store, rtype: str, namespace: str, ref: Obj, key: str | None, *, decode: bool) -> Any:
    try:
        obj = store.get(rtype, namespace, ref.get("name", ""))
    except ApiError:
        if ref.get("optional"):
            return None
        raise ValueError(f'{rtype[:-1]} "{ref.get("name")}" not found') from None
    data = dict(obj.get("data") or {})
    if decode:
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update(obj.get("stringData") or {})
    return data if key is None else data.get(key)


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of earlier variables."""
    for k, v in env.items():
        value = value.replace(f"$({k})", v)
    return value


# Images have no content here; a container without ``command`` runs its image's entrypoint, and
# the Jupyter images (KubeSpawner's default among them) start the single-user server.
JUPYTER_IMAGE = re.compile(r"(^|/)(k8s-singleuser|[a-z-]*notebook|jupyter)[^/]*(:[^/]*)?$|jupyter")
JUPYTER_ENTRYPOINT = ("jupyterhub-singleuser",)


def container_argv(container: Obj) -> list[str]:
    """command + args, as a container runtime builds them from the pod and the image.

    Jupyter images have a pass-through entrypoint (tini) and a default CMD; ``args`` replace
    that CMD, so the stand-in CMD is used only when the pod gives neither command nor args.
    """
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if not command and not args and JUPYTER_IMAGE.search(container.get("image", "")):
        return list(JUPYTER_ENTRYPOINT)
    return [*command, *args]


IMAGE_PATH_ENV = "GPUBURST_SIM_IMAGE_PATH"


def image_path() -> list[str]:
    """Where the "image's" programs are: ``$GPUBURST_SIM_IMAGE_PATH`` (directories put first,
    e.g. npm's configurable-http-proxy, which JupyterHub's image has), then this Python's bin dir."""
    extra = [d for d in os.environ.get(IMAGE_PATH_ENV, "").split(os.pathsep) if d]
    return [*extra, str(Path(sys.executable).parent)]


def resolve_command(argv0: str, path: str | None = None) -> str | None:
    """The executable for argv[0], looked up on a PATH that starts with the image's directories."""
    if os.sep in argv0:
        return argv0 if os.access(argv0, os.X_OK) else None
    search = os.pathsep.join([*image_path(), path or os.environ.get("PATH", "")])
    return shutil.which(argv0, path=search)


def run_as_user(pod: Obj, container: Obj) -> int | None:
    """The uid the container would run as (container securityContext over the pod's)."""
    for ctx in ((container.get("securityContext") or {}), ((pod.get("spec") or {}).get("securityContext") or {})):
        if ctx.get("runAsUser") is not None:
            return int(ctx["runAsUser"])
    return None


def _pretend_unprivileged(pod_dir: Path, env: dict[str, str]) -> None:
    """Where this kubelet runs as root, the process does too: it cannot drop to the container's
    uid, as the interpreter may live in root's home. Jupyter servers refuse to run as root unless
    told it is intended, so tell them through an extra config path (the container would have run
    as an unprivileged user and not needed it)."""
    conf = pod_dir / "jupyter-config"
    conf.mkdir(exist_ok=True)
    (conf / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}\n')
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(conf), env.get("JUPYTER_CONFIG_PATH")]))
