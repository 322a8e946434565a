"""Pod volumes as real directories, and the per-container view of the filesystem.

Each volume is materialised under ``<pod dir>/volumes/<name>`` (configMap, secret, downwardAPI,
projected: one file per key, as the kubelet's atomic writer leaves them; emptyDir: an empty
directory; persistentVolumeClaim: a directory per claim that outlives the pod, so the next pod
using the claim on this site finds the data; hostPath: the host's own path).

Where the kubelet may, each container sees them at their ``mountPath`` through binds in a mount
namespace of its own (``namespace_view``, planned by ``mounts``). Elsewhere (not root, no
overlayfs, ``GPUBURST_SIM_MOUNTS=rewrite``), or for a mount that cannot be made real, a container
gets a root ``<pod dir>/rootfs-<container>`` in which every ``mountPath`` is a symlink to its
volume, and the kubelet rewrites the paths the program is handed: env values,
``command``/``args``, ``workingDir`` and ``HOME`` (``container_view``, ``PathMap``). A path
compiled into a program or written in a file it reads is then not rewritten. Paths outside every
mount are the host's, as the image's filesystem is the host's.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kubelet import mounts
from jupyter_gpuburst.sim.kubelet.runtime import resolve_field_ref
from jupyter_gpuburst.sim.store import Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class VolumeError(Exception):
    """A volume cannot be set up yet (a missing ConfigMap, Secret or claim): FailedMount."""


def _write_files(target: Path, files: dict[str, bytes], mode: int) -> None:
    for rel, content in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.chmod(path, mode)


def _keyed(data: dict[str, bytes], items: list[Obj] | None, what: str, optional: bool) -> dict[str, bytes]:
    if not items:
        return data
    out = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeError(
                f"configmap references non-existent config key: {item['key']}"
                if what == "configmap"
                else f"references non-existent secret key: {item['key']}"
            )
        out[item.get("path") or item["key"]] = data[item["key"]]
    return out


def _configmap_files(store: Store, ns: str, src: Obj) -> dict[str, bytes] | None:
    try:
        cm = store.get("configmaps", ns, src.get("name", ""))
    except ApiError:
        if src.get("optional"):
            return {}
        raise VolumeError(f'configmap "{src.get("name")}" not found') from None
    data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return _keyed(data, src.get("items"), "configmap", bool(src.get("optional")))


def _secret_files(store: Store, ns: str, src: Obj, name_key: str) -> dict[str, bytes]:
    try:
        secret = store.get("secrets", ns, src.get(name_key, ""))
    except ApiError:
        if src.get("optional"):
            return {}
        raise VolumeError(f'secret "{src.get(name_key)}" not found') from None
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    return _keyed(data, src.get("items"), "secret", bool(src.get("optional")))


def _projected(store: Store, pod: Obj, vol: Obj) -> tuple[dict[str, bytes], int] | None:
    """(files, mode) of a volume the kubelet fills from the API (configMap, secret, downwardAPI,
    projected); None for any other kind."""
    ns = pod["metadata"]["namespace"]
    if "configMap" in vol:
        return _configmap_files(store, ns, vol["configMap"]), _mode(vol["configMap"])
    if "secret" in vol:
        return _secret_files(store, ns, vol["secret"], "secretName"), _mode(vol["secret"])
    if "downwardAPI" in vol:
        return _downward_files(pod, vol["downwardAPI"].get("items")), _mode(vol["downwardAPI"])
    if "projected" not in vol:
        return None
    mode = _mode(vol["projected"])
    files: dict[str, bytes] = {}
    for source in vol["projected"].get("sources") or []:
        if "configMap" in source:
            files.update(_configmap_files(store, ns, source["configMap"]))
        elif "secret" in source:
            files.update(_secret_files(store, ns, source["secret"], "name"))
        elif "downwardAPI" in source:
            files.update(_downward_files(pod, source["downwardAPI"].get("items")))
        elif "serviceAccountToken" in source:
            # The emulated API server does not authenticate; the file is there so that
            # clients configured "in cluster" find one.
            files[source["serviceAccountToken"].get("path", "token")] = b"sim-service-account-token"
    return files, mode


def refresh(store: Store, pod: Obj, materialized: dict[str, Path]) -> list[str]:
    """Bring a running pod's API-filled volumes up to date, as the kubelet does when it syncs the
    pod (on an update to the pod, and periodically): a Secret or ConfigMap that changed, or an
    optional one that appeared or went, changes the files. Each file is replaced whole (a reader
    never sees half of one); files whose key went are removed. A source that cannot be read now
    leaves the volume as it was. Returns the names of the volumes that changed."""
    changed = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        target = materialized.get(vol["name"])
        if target is None or not target.is_dir():
            continue
        try:
            written = _projected(store, pod, vol)
        except VolumeError as exc:
            log.debug("volume %s of pod %s/%s not refreshed: %s", vol["name"], pod["metadata"]["namespace"], pod["metadata"]["name"], exc)
            continue
        if written is None:
            continue
        files, mode = written
        before = {str(p.relative_to(target)): p for p in target.rglob("*") if p.is_file()}
        if all(rel in before and before[rel].read_bytes() == content for rel, content in files.items()) and set(before) <= set(files):
            continue
        for rel, content in files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            staged = path.with_name(f"..{path.name}.tmp")
            staged.write_bytes(content)
            os.chmod(staged, mode)
            os.replace(staged, path)
        for rel, path in before.items():
            if rel not in files:
                path.unlink(missing_ok=True)
        changed.append(vol["name"])
    return changed


def _resource_value(pod: Obj, ref: Obj) -> str:
    """A downward-API resourceFieldRef (``limits.cpu``, ``requests.memory``...), in the unit's divisor."""
    cname = ref.get("containerName") or pod["spec"]["containers"][0]["name"]
    container = next((c for c in pod["spec"]["containers"] if c["name"] == cname), {})
    kind, _, res = ref.get("resource", "").partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(res)
    return "0" if value is None else str(value)


def _downward_files(pod: Obj, items: list[Obj]) -> dict[str, bytes]:
    out = {}
    for item in items or []:
        if "fieldRef" in item:
            path = item["fieldRef"]["fieldPath"]
            if path in ("metadata.labels", "metadata.annotations"):
                values = pod["metadata"].get(path.split(".")[1]) or {}
                value = "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
            else:
                value = resolve_field_ref(pod, path)
        else:
            value = _resource_value(pod, item.get("resourceFieldRef") or {})
        out[item["path"]] = value.encode()
    return out


def _mode(src: Obj, default: int = 0o644) -> int:
    return int(src.get("defaultMode", default))


def claim_dir(store: Store, state_dir: Path, ns: str, claim: str) -> Path:
    """Where a claim's data lives on this site: by bound volume name, else by claim uid."""
    try:
        pvc = store.get("persistentvolumeclaims", ns, claim)
    except ApiError:
        raise VolumeError(f'persistentvolumeclaim "{claim}" not found') from None
    if (pvc.get("metadata") or {}).get("deletionTimestamp"):
        raise VolumeError(f'persistentvolumeclaim "{claim}" is being deleted')
    volume = (pvc.get("spec") or {}).get("volumeName") or f"pvc-{pvc['metadata']['uid']}"
    return state_dir / "persistent-volumes" / volume


def materialize(store: Store, pod: Obj, pod_dir: Path, state_dir: Path) -> dict[str, Path]:
    """Create every volume of the pod; ``{volume name: directory}``. VolumeError when not yet possible."""
    ns = pod["metadata"]["namespace"]
    out: dict[str, Path] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = vol["name"]
        target = pod_dir / "volumes" / name
        if "persistentVolumeClaim" in vol:
            path = claim_dir(store, state_dir, ns, vol["persistentVolumeClaim"]["claimName"])
            path.mkdir(parents=True, exist_ok=True)
            out[name] = path
            continue
        if "hostPath" in vol:
            path = Path(vol["hostPath"]["path"])
            if (vol["hostPath"].get("type") or "") in ("DirectoryOrCreate",):
                path.mkdir(parents=True, exist_ok=True)
            out[name] = path
            continue
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        written = _projected(store, pod, vol)
        if written is not None:
            _write_files(target, *written)
        elif "emptyDir" not in vol:
            log.warning("volume %s of pod %s/%s: type not emulated, served as an emptyDir", name, ns, pod["metadata"]["name"])
        out[name] = target
    return out


class PathMap:
    """One container's view: ``mountPath`` -> directory, and the rewriting of paths it is handed."""

    def __init__(self, root: Path, mounts: dict[str, Path]):
        self.root = root
        # in a mount namespace of its own (namespace_view): what the start script mounts, and
        # the paths that are there for real (mounted or made), which need no mapping
        self.fstab: Path | None = None
        self.in_namespace: set[str] = set()
        self.mounts = dict(sorted(mounts.items(), key=lambda kv: -len(kv[0])))
        if self.mounts:
            alternatives = "|".join(re.escape(m.rstrip("/")) for m in self.mounts)
            # a mount path as a whole path or path prefix, where a path can start inside a value
            self._pattern = re.compile(rf"(?:(?<=^)|(?<=[=:,\s'\"]))({alternatives})(?=/|$|[\s:,'\"])")
        else:
            self._pattern = None

    def resolve(self, path: str) -> str:
        """Where the container's ``path`` is on the host."""
        for mount, target in self.mounts.items():
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return str(target) + path[len(mount.rstrip("/")) :]
        return path

    def rewrite(self, value: str) -> str:
        if self._pattern is None or "/" not in value:
            return value
        return self._pattern.sub(lambda m: str(self.mounts.get(m.group(1)) or self.mounts.get(m.group(1) + "/")), value)

    def directory(self, path: str, *, private: bool = False) -> Path:
        """A directory the container expects at ``path`` (HOME, workingDir, TMPDIR): ``path``
        itself where it is there for real in the container's mount namespace, else a mount, else
        the host's own directory when it exists (unless ``private``: a home is never shared with
        the host or other pods), else one created in the container's root."""
        if path in self.in_namespace:
            return Path(path)
        resolved = self.resolve(path)
        if resolved != path or (not private and Path(path).is_dir()):
            Path(resolved).mkdir(parents=True, exist_ok=True)
            return Path(resolved)
        # one flat directory beside the container's root, not the whole path inside it
        private = self.root.parent / f"{self.root.name}{path.rstrip('/').replace('/', '_')}"
        private.mkdir(exist_ok=True)
        return private


def _mount_sources(container: Obj, volumes: dict[str, Path]) -> list[tuple[str, Path, bool]]:
    """(mountPath, host directory or file, readOnly) of each volumeMount; a missing subPath
    directory is made, as the kubelet makes it."""
    out = []
    for vm in container.get("volumeMounts") or []:
        source = volumes.get(vm["name"])
        if source is None:
            raise VolumeError(f'volume "{vm["name"]}" is not defined in the pod')
        if vm.get("subPath"):
            # a key of a configMap/secret volume is a file; any other subPath a directory
            source = source / vm["subPath"]
            if not source.exists():
                source.mkdir(parents=True)
        out.append((vm["mountPath"].rstrip("/") or "/", source, bool(vm.get("readOnly"))))
    return out


def container_view(pod_dir: Path, container: Obj, volumes: dict[str, Path]) -> PathMap:
    """``rootfs-<container>`` with a symlink per volumeMount (made only if there are mounts); the PathMap."""
    root = pod_dir / f"rootfs-{container['name']}"
    mounts: dict[str, Path] = {}
    for mount_path, source, _ in _mount_sources(container, volumes):
        link = root / mount_path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)  # the root exists only where there are mounts
        if link.is_symlink() or link.exists():
            if link.is_dir() and not link.is_symlink():
                shutil.rmtree(link)
            else:
                link.unlink()
        link.symlink_to(source, target_is_directory=source.is_dir())
        mounts[mount_path] = source
    return PathMap(root, mounts)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def namespace_view(
    pod_dir: Path,
    container: Obj,
    volumes: dict[str, Path],
    *,
    home: str,
    hosts_file: Path | None,
    instance: int,
    keep_visible: list[Path],
    keep_home_off: list[Path],
) -> PathMap:
    """The view of a container started in a mount namespace of its own: each volumeMount bound
    at its mountPath (``mounts.plan``), a private home bound at ``home`` unless a volume holds it
    or it would cover one of ``keep_home_off`` (the interpreter's prefix, the kubelet's state),
    the pod's hosts file at /etc/hosts. What cannot be mounted is left to the PathMap's rewriting."""
    root = pod_dir / f"rootfs-{container['name']}"
    listed = [mounts.Mount(t, s, ro) for t, s, ro in _mount_sources(container, volumes)]
    directories = []
    if any(_under(home, m.target) for m in listed):
        directories.append(home)
    elif not any(_under(str(k), home) for k in keep_home_off):
        private = root.parent / f"{root.name}{home.rstrip('/').replace('/', '_')}"
        private.mkdir(exist_ok=True)
        listed.append(mounts.Mount(home, private))
    if hosts_file is not None:
        listed.append(mounts.Mount("/etc/hosts", hosts_file))
    working_dir = container.get("workingDir")
    if working_dir:
        directories.append(working_dir.rstrip("/") or "/")
    tag = f"{container['name']}-{instance}"
    plan = mounts.plan(listed, directories, pod_dir / f"layers-{tag}", keep_visible)
    if plan.rewritten:
        log.debug(
            "container %s: %s not mountable here (no overlay over / or the kubelet's state), paths mapped instead",
            container["name"],
            ", ".join(sorted(plan.rewritten)),
        )
    view = PathMap(root, plan.rewritten)
    if plan.fstab:
        view.fstab = pod_dir / f"fstab-{tag}"
        view.fstab.write_text("\n".join(plan.fstab) + "\n")
    view.in_namespace = {*plan.real, *plan.directories}
    return view
