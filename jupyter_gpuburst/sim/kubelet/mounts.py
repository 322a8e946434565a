"""Volume mounts made real in each container's own mount namespace, where this kubelet may.

Where the kubelet runs as root and the kernel lets it, each container starts through util-linux
``unshare --mount`` (see ``processes.enter_pod_argv``), and a shell script there binds every volume (or
``subPath``) at its ``mountPath``, ``readOnly`` ones remounted read-only, parents before children
as the kubelet sorts them. The program finds its files where the pod spec says, whatever way it
learns the path (a path written in a ConfigMap file included); nothing it is handed is rewritten.

A mountpoint the host lacks is created without touching the host: a private overlay is mounted
over the nearest existing ancestor (upper and work layers in the pod's directory), and the
directory is made in it. An overlay hides what is mounted below its lower directory, and writes
through it land in the upper layer, so it is never put over ``/``, ``/proc``, ``/sys``, ``/dev``
or a directory holding the kubelet's state (pod directories, claims); mounts found below it are
bound back on top, and a bind source below it is first bound to a staging path that the overlay
does not cover. A mount that cannot be made real this way is served by path rewriting
(``volumes.PathMap``), as everything is where mount namespaces are unavailable.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)
UNSHARE = "/usr/bin/unshare"
MODE_ENV = "GPUBURST_SIM_MOUNTS"  # "rewrite" forces path rewriting; default: real mounts where possible
NEVER_OVERLAID = (Path("/"), Path("/proc"), Path("/sys"), Path("/dev"))
_UNSAFE_IN_OPTIONS = (",", ":", "\\", "\n", " ", "\t")


@dataclass(frozen=True)
class Mount:
    """One bind: ``source`` (host directory or file) at ``target`` (a path in the container)."""

    target: str
    source: Path
    read_only: bool = False


@dataclass
class Plan:
    """The container's fstab (what the start script mounts), and what is left to path rewriting."""

    fstab: list[str] = field(default_factory=list)
    rewritten: dict[str, Path] = field(default_factory=dict)  # mountPath -> source
    directories: list[str] = field(default_factory=list)  # there in the namespace (workingDir, HOME)
    real: list[str] = field(default_factory=list)  # mountPaths made real


def _under(path: Path | str, root: Path | str) -> bool:
    """``path`` is ``root`` or below it (by string: pathlib's ``parents`` is slow here)."""
    p, r = str(path), str(root)
    return p == r or p.startswith(r if r.endswith("/") else r + "/")


def _mountinfo() -> list[tuple[Path, bool]]:
    """The host's mount points and whether each is read-only (this process's mount table)."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if len(fields) < 6:
            continue
        point = fields[4].encode().decode("unicode_escape")  # \040 for a space, as the kernel escapes
        out.append((Path(point), "ro" in fields[5].split(",")))
    return out


def _existing_ancestor(path: Path) -> Path:
    for parent in path.parents:
        if parent.is_dir():
            return parent
    return Path("/")


def _field(path: Path | str) -> str:
    """A path as an fstab field (octal escapes, as fstab(5) and the kernel write them)."""
    return str(path).replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")


def _bind(source: Path, target: Path | str, read_only: bool) -> str:
    return f"{_field(source)} {_field(target)} none {'bind,ro' if read_only else 'bind'} 0 0"


def plan(mounts: list[Mount], directories: list[str], layers: Path, keep_visible: list[Path]) -> Plan:
    """The fstab for ``mounts`` (and ``directories`` that must exist, such as workingDir).

    Missing mountpoints are made now, from the host side, where they will appear in the
    container's view: inside the volume mounted over their parent (as runc makes them there), or
    in the upper layer of the overlay over their nearest existing ancestor. So the start script
    has nothing to do but one ``mount --all``. ``layers`` is a fresh directory of the pod's for
    overlay layers and staging paths; ``keep_visible`` are host paths no overlay may cover.
    """
    out = Plan()
    real: list[Mount] = []
    roots: list[Path] = []  # overlay lower directories

    def placeable(target: Path) -> bool:
        """Whether ``target`` exists in the container's view or can be made there."""
        if any(_under(target, Path(m.target)) for m in real) or any(_under(target, r) for r in roots):
            return True
        if os.path.lexists(target):
            return True
        root = _existing_ancestor(target)
        if root in NEVER_OVERLAID or any(_under(k, root) for k in keep_visible) or any(c in f"{root}{layers}" for c in _UNSAFE_IN_OPTIONS):
            return False
        roots[:] = [r for r in roots if not _under(r, root)] + [root]
        return True

    for m in sorted(mounts, key=lambda m: m.target):
        target = Path(m.target)
        covered = any(_under(target, Path(r.target)) for r in real) or any(_under(target, r) for r in roots)
        if not covered and os.path.lexists(target) and target.is_dir() != m.source.is_dir():
            out.rewritten[m.target] = m.source  # a file over a directory or the reverse: not mountable
        elif placeable(target):
            real.append(m)
        else:
            out.rewritten[m.target] = m.source
    out.directories = [d for d in directories if placeable(Path(d))]
    out.real = [m.target for m in real]

    roots.sort()
    uppers = {root: layers / f"upper{i}" for i, root in enumerate(roots)}
    if roots:
        layers.mkdir(parents=True, exist_ok=True)
        for upper in uppers.values():
            upper.mkdir()

    def make(target: Path, is_dir: bool) -> None:
        """Make a mountpoint where the container will see it: in the volume over its parent
        or in its overlay's upper layer; nothing when the host has it (and nothing covers it)."""
        holders = [(Path(m.target), m.source) for m in real if _under(target, Path(m.target)) and Path(m.target) != target]
        holders += [(r, uppers[r]) for r in roots if _under(target, r)]
        if not holders:
            return
        base, host = max(holders, key=lambda h: len(h[0].parts))
        if base in uppers and os.path.lexists(target):
            return  # the lower layer has it
        where = host / target.relative_to(base)
        if os.path.lexists(where):
            return
        if is_dir:
            where.mkdir(parents=True, exist_ok=True)
        else:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.touch()

    for m in real:
        make(Path(m.target), m.source.is_dir())
    for d in out.directories:
        make(Path(d), True)

    fstab = out.fstab
    submounts = [(p, ro) for p, ro in _mountinfo() if any(p != r and _under(p, r) for r in roots)] if roots else []
    restore = []
    for i, (point, ro) in enumerate(submounts):
        stage = _stage_path(layers / f"sub{i}", point)
        fstab.append(_bind(point, stage, False))
        restore.append(_bind(stage, point, ro))
    binds = []
    for i, m in enumerate(real):
        source = m.source
        if any(_under(source, r) for r in roots):
            stage = _stage_path(layers / f"src{i}", source)
            fstab.append(_bind(source, stage, False))
            source = stage
        binds.append(_bind(source, m.target, m.read_only))
    for i, root in enumerate(roots):
        work = layers / f"work{i}"
        work.mkdir()
        fstab.append(f"overlay {_field(root)} overlay lowerdir={root},upperdir={uppers[root]},workdir={work} 0 0")
    fstab += restore  # what the overlays hid, back on top (mountinfo order: parents first)
    fstab += binds  # sorted by mountPath: parents before children
    return out


def _stage_path(path: Path, like: Path) -> Path:
    """A host path to bind ``like`` onto before an overlay covers it: an empty dir or file."""
    if like.is_dir():
        path.mkdir()
    else:
        path.touch()
    return path


# ---- whether this kubelet may ---------------------------------------------------------------


def forced_rewrite() -> bool:
    return os.environ.get(MODE_ENV, "").strip().lower() == "rewrite"


_probed: dict[int, str | None] = {}  # by the state directory's filesystem


def _probe(device: int, scratch_parent: str) -> str | None:
    if device not in _probed:
        _probed[device] = _try_mounts(scratch_parent)
    return _probed[device]


def _try_mounts(scratch_parent: str) -> str | None:
    """None when a private mount namespace here can overlay a directory (layers beside the pod
    directories, in ``scratch_parent``) and bind read-only; else why not."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return "the kubelet does not run as root"
    if not os.access(UNSHARE, os.X_OK) or not shutil.which("mount"):
        return f"{UNSHARE} or mount is missing"
    with tempfile.TemporaryDirectory(prefix="mount-probe-", dir=scratch_parent) as tmp:
        t = Path(tmp)
        for d in ("lower/mnt", "upper", "work", "src"):
            (t / d).mkdir(parents=True)
        (t / "src" / "f").write_text("x")
        (t / "upper" / "made").mkdir()
        (t / "fstab").write_text(
            f"overlay {t}/lower overlay lowerdir={t}/lower,upperdir={t}/upper,workdir={t}/work 0 0\n"
            f"{t}/src {t}/lower/made none bind,ro 0 0\n"
        )
        script = 'mount --all --fstab "$1/fstab" && ! touch "$1/lower/made/g" 2>/dev/null && test "$(cat "$1/lower/made/f")" = x'

        try:
            probe = subprocess.run(
                [UNSHARE, "--mount", "--", "/bin/sh", "-c", script, "probe", tmp], timeout=10, capture_output=True, text=True
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the mount probe did not run: {exc}"
        if probe.returncode != 0:
            return f"the mount probe failed: {probe.stderr.strip()[:200] or probe.returncode}"
        if (t / "lower" / "made").exists():
            return "the mount probe changed the host's filesystem"
    return None


_logged: set[str] = set()


def unavailable(state_dir: Path) -> str | None:
    """Why volumes are not mounted for real in containers started under ``state_dir``, or None."""
    if forced_rewrite():
        return f"{MODE_ENV}=rewrite"
    return _probe(os.stat(state_dir).st_dev, str(state_dir))


def real_mounts(state_dir: Path) -> bool:
    """Whether volumes are mounted for real in containers started under ``state_dir``; the mode
    is logged once."""
    why = unavailable(state_dir)
    message = (
        "volumes are bind-mounted at their mountPath in each container's mount namespace"
        if why is None
        else f"volumes are served by path rewriting ({why})"
    )
    if message not in _logged:
        _logged.add(message)
        log.info("emulated kubelet: %s", message)
    return why is None
