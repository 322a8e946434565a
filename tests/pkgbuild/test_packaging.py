"""Packaging as an admin meets it: sdist and wheel build without Node once the lab extension is
built, one version for both halves, LICENSE shipped, a small base install for user images, and
`gpuburst demo` working from the installed wheel alone."""

from __future__ import annotations

import email
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300, func_only=True)]

REPO = Path(__file__).resolve().parents[2]
# What only the hub, the emulator or the demo need: none of it may reach a user image.
HUB_SIDE = (
    "jupyterhub",
    "jupyterhub-kubespawner",
    "kubernetes",
    "kubernetes-asyncio",
    "prometheus-client",
    "aiohttp",
    "jupyterlab",
    "immutables",
)
# (not yaml or prometheus_client: jupyter_server itself needs those)
HUB_MODULES = ("jupyterhub", "kubespawner", "kubernetes", "kubernetes_asyncio", "aiohttp", "immutables", "jsonpatch")


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        [name] = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(zf.read(name))


def requirement_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower()


@pytest.fixture(scope="module")
def sdist_and_wheel(built_dists: tuple[Path, Path]) -> tuple[Path, Path]:
    """Built by tests/conftest.py with npm and node failing if anything calls them."""
    return built_dists


def test_sdist_and_wheel_build_without_node_and_ship_the_license(sdist_and_wheel):
    sdist, wheel = sdist_and_wheel
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for required in (
        "LICENSE",
        "jupyter_gpuburst/labextension/package.json",
        "jupyter_gpuburst/_version.py",
        "jupyter_gpuburst/demo_config.py",
        "tests/reference/liqo-crds/PROVENANCE",
    ):
        assert required in names, required
    with zipfile.ZipFile(wheel) as zf:
        licenses = [n for n in zf.namelist() if re.search(r"\.dist-info/licen[cs]es/LICENSE$", n)]
        assert licenses, "LICENSE missing from the wheel"
        assert b"jupyter-gpuburst contributors" in zf.read(licenses[0])
        assert "jupyter_gpuburst/demo_config.py" in zf.namelist()


def test_one_version_for_the_python_package_and_the_lab_extension(sdist_and_wheel):
    _sdist, wheel = sdist_and_wheel
    labext = json.loads((REPO / "labextension" / "package.json").read_text())
    meta = metadata(wheel)
    python_version = str(Version(labext["version"]))  # npm's 0.3.0-dev.0 is Python's 0.3.0.dev0
    assert meta["Version"] == python_version
    with zipfile.ZipFile(wheel) as zf:
        assert f"__version__ = VERSION = '{python_version}'" in zf.read("jupyter_gpuburst/_version.py").decode()
        [built] = [n for n in zf.namelist() if n.endswith("labextensions/jupyter-gpuburst/package.json")]
        assert json.loads(zf.read(built))["version"] == labext["version"]


def test_metadata_has_urls_license_and_the_extras(sdist_and_wheel):
    _sdist, wheel = sdist_and_wheel
    meta = metadata(wheel)
    assert meta["License"] == "BSD-3-Clause" or "BSD-3-Clause" in (meta.get("License-Expression") or "")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls and all(u.startswith("https://") for u in urls.values()), urls
    assert set(meta.get_all("Provides-Extra")) >= {"hub", "demo", "test"}


def test_base_install_carries_no_hub_kubernetes_or_emulator_packages(sdist_and_wheel):
    _sdist, wheel = sdist_and_wheel
    base = [requirement_name(r) for r in metadata(wheel).get_all("Requires-Dist") if "extra ==" not in r]
    assert set(base) == {"jupyter-server", "traitlets", "tornado", "nvidia-ml-py", "psutil"}
    assert not set(base) & set(HUB_SIDE)
    hub = [requirement_name(r) for r in metadata(wheel).get_all("Requires-Dist") if 'extra == "hub"' in r or "extra == 'hub'" in r]
    assert {"jupyterhub", "jupyterhub-kubespawner", "kubernetes", "kubernetes-asyncio", "prometheus-client"} <= set(hub)


def test_readme_images_render_on_pypi():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (REPO / "README.md").read_text())
    assert images
    for url in images:
        assert url.startswith("https://"), f"{url}: PyPI renders only absolute image URLs"


@pytest.fixture(scope="module")
def installed(sdist_and_wheel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with the wheel installed; dependencies come from the test environment."""
    _sdist, wheel = sdist_and_wheel
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    site = next(env_dir.glob("lib/python*/site-packages"))
    (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env_dir / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=120,
    )
    return env_dir


def run_installed(env_dir: Path, args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON", "GPUBURST"))}
    clean["PATH"] = f"{env_dir / 'bin'}:{clean['PATH']}"
    return subprocess.run(args, env={**clean, **env}, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_the_server_extension_imports_without_any_hub_side_package(installed, tmp_path):
    blocker = (
        "import sys\n"
        f"BLOCKED = {HUB_MODULES!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'{name} is not in a base install', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import jupyter_gpuburst\n"
        "from jupyter_gpuburst.server import GPUBurstServerExtension\n"
        "from jupyter_gpuburst.server.placement import placement_from_env\n"
        "print(jupyter_gpuburst.__file__, GPUBurstServerExtension.name, placement_from_env({})['site'])\n"
    )
    done = run_installed(installed, [str(installed / "bin" / "python"), "-c", blocker], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(str(installed)) and done.stdout.split()[-1] == "standalone"


def test_gpuburst_demo_help_and_its_config_load_from_the_installed_wheel(installed, tmp_path):
    done = run_installed(installed, [str(installed / "bin" / "gpuburst"), "demo", "--help"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--origin-gpus" in done.stdout
    load = (
        "from importlib.resources import files\n"
        "from traitlets.config.loader import PyFileConfigLoader\n"
        "path = files('jupyter_gpuburst') / 'demo_config.py'\n"
        "c = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()\n"
        "print(path, c.JupyterHub.spawner_class)\n"
    )
    env = {
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "GPUBURST_DEMO_PORT": "1",
        "GPUBURST_DEMO_HUB_PORT": "2",
        "GPUBURST_DEMO_PROXY_API_PORT": "3",
        "GPUBURST_DEMO_STATE_DIR": str(tmp_path),
        "GPUBURST_DEMO_PASSWORD": "x",
        "GPUBURST_DEMO_ADMIN_PASSWORD": "a" * 32,
        "GPUBURST_DEMO_NAMESPACE": "jhub",
    }
    done = run_installed(installed, [str(installed / "bin" / "python"), "-c", load], tmp_path, **env)
    assert done.returncode == 0, done.stderr[-3000:]
    path, spawner = done.stdout.split()
    assert path.startswith(str(installed)) and spawner in ("gpuburst", "jupyter_gpuburst.hub.spawner.GPUBurstSpawner")
