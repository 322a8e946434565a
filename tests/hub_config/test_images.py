"""hub_config/images: both Dockerfiles pass the lint, and their install steps work as written.

There is no Docker here, so each image's RUN step is run the nearest way: the same shell script,
as a non-root user, with the freshly built wheel where the bind mount puts it and a virtual
environment standing in for the image's Python. That catches what broke these images before
(a root-owned wheel, `rm` as jovyan, `--user` installs that leave `gpuburst` off PATH).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from . import dockerfile_lint

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "hub_config" / "images"
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile"))
NOBODY = 65534


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_passes_the_lint(path):
    assert dockerfile_lint.problems(path.read_text()) == []


def test_lint_catches_the_mistakes_that_broke_the_images():
    broken = (
        "FROM quay.io/jupyter/pytorch-notebook:cuda12-latest\n"
        "COPY dist/jupyter_gpuburst-*.whl /tmp/\n"
        "RUN python -m pip install --user /tmp/jupyter_gpuburst-*.whl && rm /tmp/jupyter_gpuburst-*.whl\n"
    )
    found = " | ".join(dockerfile_lint.problems(broken))
    for expected in (
        "not pinned",
        "end as the notebook user",
        "switch to USER root",
        "--no-cache-dir",
        "--user",
        "rm as",
        "COPY leaves root-owned",
    ):
        assert expected in found


def test_hub_image_pins_the_chart_release_the_values_use():
    hub = dockerfile_lint.parse((IMAGES / "hub.Dockerfile").read_text())
    assert dockerfile_lint.base_image(hub) == "quay.io/jupyterhub/k8s-hub:4.4.0"
    assert "Tag:      4.4.0" in (REPO / "tests" / "reference" / "z2jh" / "PROVENANCE").read_text()


def test_hub_image_installs_the_hub_extra_and_the_user_image_only_the_base():
    [hub] = dockerfile_lint.pip_commands((IMAGES / "hub.Dockerfile").read_text())
    [user] = dockerfile_lint.pip_commands((IMAGES / "singleuser.Dockerfile").read_text())
    assert any(word.endswith(".whl | sort -V | tail -n 1)[hub]") for word in hub)
    assert not any("[" in word for word in user)


def _nobody_env_dir() -> Path:
    """A directory the unprivileged user owns (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gpuburst-image-"))
    path.chmod(0o755)
    os.chown(path, NOBODY, NOBODY)
    return path


def _wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        [name] = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return HeaderParser().parsestr(zf.read(name).decode()).get_all("Requires-Dist") or []


def _distributions(requirements: list[str], extras: set[str]) -> list[metadata.Distribution]:
    """The test environment's distributions that ``requirements`` (with ``extras``) need, and
    theirs in turn, each with every extra something asks of it, pip included (the RUN step runs
    ``python -m pip``)."""
    found: dict[str, metadata.Distribution] = {}
    asked: dict[str, set[str]] = {}
    todo = [(Requirement(r), {"", *extras}) for r in requirements] + [(Requirement("pip"), {""})]
    while todo:
        req, wanted = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in wanted):
            continue
        name = canonicalize_name(req.name)
        new = {"", *req.extras} - asked.setdefault(name, set())
        if not new:
            continue
        asked[name] |= new
        dist = found.setdefault(name, metadata.distribution(req.name))
        todo += [(Requirement(r), new) for r in dist.requires or []]
    return list(found.values())


def _dependencies_dir(wheel: Path, extras: set[str]) -> Path:
    """The wheel's dependencies, from the test environment, in a directory anyone can read.

    Not the test environment's own site-packages: a checkout in a directory other users cannot
    enter (a ``mktemp -d`` folder, a home of mode 0700) hides it from the unprivileged user. Its
    files are linked (copied across file systems), never chowned: they stay the environment's."""
    deps = Path(tempfile.mkdtemp(prefix="gpuburst-image-deps-"))
    deps.chmod(0o755)
    for dist in _distributions(_wheel_requirements(wheel), extras):
        assert dist.files is not None, f"{dist.metadata['Name']} lists no files; cannot offer it to the install"
        for file in dist.files:
            if file.parts[0] == "..":
                continue  # scripts and data outside site-packages: the install makes its own
            source, target = Path(dist.locate_file(file)), deps / file
            if not source.is_file():
                continue  # a RECORD line for a .pyc never written
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
    return deps


def _runnable_by_anyone(path: Path) -> bool:
    path = path.resolve()
    return all(os.stat(p).st_mode & 0o001 for p in [*reversed(path.parents), path])


def _interpreter() -> str | None:
    """This Python, or the system's of the same version, if an unprivileged user can run it."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (Path(sys.executable), Path("/usr/bin") / version, Path("/usr/local/bin") / version):
        if candidate.exists() and _runnable_by_anyone(candidate):
            return str(candidate)
    return None


@pytest.mark.integration
@pytest.mark.timeout(300, func_only=True)
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root")
@pytest.mark.skipif(_interpreter() is None, reason="no Python of this version that an unprivileged user can run")
@pytest.mark.parametrize("dockerfile", ["hub.Dockerfile", "singleuser.Dockerfile"])
def test_run_step_installs_the_wheel_as_a_non_root_user(dockerfile, built_wheel):
    wheel = built_wheel
    [(user, script)] = dockerfile_lint.run_scripts(dockerfile_lint.parse((IMAGES / dockerfile).read_text()))
    assert user == "root"
    [mount] = dockerfile_lint.mounts(dockerfile_lint.parse((IMAGES / dockerfile).read_text()))
    assert mount["type"] == "bind" and mount["source"] == "dist"
    interpreter = _interpreter()
    extras = {e for group in re.findall(r"\.whl[^\]]*\)\[([\w,-]+)\]", script) for e in group.split(",")}
    deps = _dependencies_dir(wheel, extras)
    try:
        home = _nobody_env_dir()
    except BaseException:
        shutil.rmtree(deps, ignore_errors=True)
        raise
    try:
        dist = home / "dist"
        dist.mkdir()
        shutil.copy(wheel, dist)
        env_dir = home / "env"
        # the image's Python, stood in for by a venv whose interpreter the unprivileged user can run
        subprocess.run([interpreter, "-m", "venv", "--without-pip", str(env_dir)], check=True)
        site = next(env_dir.glob("lib/python*/site-packages"))
        # dependencies (pip too) come from the test environment, so nothing is downloaded
        (site / "test-deps.pth").write_text(f"{deps}\n")
        bin_dir = env_dir / "bin"
        # Docker Stacks' helper: here it only has to exist and get a directory
        (bin_dir / "fix-permissions").write_text('#!/bin/sh\nfor d in "$@"; do test -d "$d" || exit 1; done\n')
        (bin_dir / "fix-permissions").chmod(0o755)
        # the image's `jupyter` command, for the RUN step's own check that the extension is enabled
        (bin_dir / "jupyter").write_text(f'#!/bin/sh\nexec {bin_dir / "python"} -m jupyter "$@"\n')
        (bin_dir / "jupyter").chmod(0o755)
        (bin_dir / "jupyter-server").write_text(f'#!/bin/sh\nexec {bin_dir / "python"} -m jupyter_server "$@"\n')
        (bin_dir / "jupyter-server").chmod(0o755)
        script = script.replace("/tmp/dist", str(dist))
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(home)], check=True)
        env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(home),
            "CONDA_DIR": str(env_dir),
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "JUPYTER_CONFIG_DIR": str(home / "cfg"),
            "JUPYTER_DATA_DIR": str(home / "data"),
        }
        done = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "bash", "-euo", "pipefail", "-c", script],
            env=env, cwd=home, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, f"{dockerfile} RUN step failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        installed = subprocess.run(
            [bin_dir / "python", "-c", "import jupyter_gpuburst; print(jupyter_gpuburst.__file__)"],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            check=True,
        )
        assert installed.stdout.startswith(str(env_dir))
        if dockerfile == "hub.Dockerfile":
            assert (bin_dir / "gpuburst").exists()  # on PATH in the image: `kubectl exec deploy/hub -- gpuburst doctor`
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(deps, ignore_errors=True)
