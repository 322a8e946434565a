"""The wheel carries the prebuilt lab extension and the server-extension config, and both show
up enabled after a plain `pip install` of it into a fresh environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180, func_only=True)]

REPO = Path(__file__).resolve().parents[2]
LABEXT = "share/jupyter/labextensions/jupyter-gpuburst"
SERVER_CONFIG = "etc/jupyter/jupyter_server_config.d/jupyter_gpuburst.json"
# The panel draws its charts with plain SVG: a chart library would blow this budget.
BUNDLE_BUDGET_BYTES = 200_000


@pytest.fixture(scope="module")
def wheel(built_wheel: Path) -> Path:
    return built_wheel


def test_wheel_contains_prebuilt_lab_extension_and_server_config(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        data = {n.split(".data/data/", 1)[1]: zf.getinfo(n).file_size for n in zf.namelist() if ".data/data/" in n}
    assert SERVER_CONFIG in data
    for required in ("package.json", "install.json", "static/style.js", "schemas/jupyter-gpuburst/plugin.json"):
        assert f"{LABEXT}/{required}" in data, f"{required} missing from the wheel"
    entries = [n for n in data if re.fullmatch(rf"{LABEXT}/static/remoteEntry\.[0-9a-f]+\.js", n)]
    assert len(entries) == 1, entries
    bundle = sum(size for name, size in data.items() if name.startswith(f"{LABEXT}/static/") and name.endswith(".js"))
    print(f"lab extension bundle: {bundle} bytes of static/*.js")
    assert 0 < bundle < BUNDLE_BUDGET_BYTES


def test_installed_wheel_enables_both_extensions(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    # Dependencies come from the test environment (no download); its .pth files, including the
    # editable install of this package, are not processed from a path entry, so the wheel's copy wins.
    (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True, timeout=120,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))}
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_DATA_DIR=str(tmp_path / "data"))
    run = {"env": env, "cwd": tmp_path, "text": True}  # not the checkout: `python -c` puts cwd first
    origin = subprocess.check_output([python, "-c", "import jupyter_gpuburst; print(jupyter_gpuburst.__file__)"], **run)
    assert origin.startswith(str(env_dir)), f"imported from {origin}, not the fresh environment"

    labext = subprocess.run([python, "-m", "jupyterlab.labextensions", "list"], capture_output=True, timeout=60, **run)
    listing = labext.stdout + labext.stderr
    assert str(env_dir / LABEXT).rsplit("/", 1)[0] in listing, listing
    assert re.search(r"jupyter-gpuburst v[\w.-]+\s+\S*enabled\S*\s+\S*OK", listing), listing

    server = subprocess.run([python, "-m", "jupyter_server.extension.serverextension", "list"], capture_output=True, timeout=60, **run)
    listing = server.stdout + server.stderr
    assert str(env_dir / "etc" / "jupyter") in listing, listing
    assert re.search(r"jupyter_gpuburst\s+\S*enabled", listing), listing
    assert re.search(r"jupyter_gpuburst [\w.]+ \S*OK", listing), listing
