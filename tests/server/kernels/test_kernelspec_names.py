"""The lab extension tells a GPU kernel by its kernelspec's name: the prefix it reads is the one
the server writes (``core/keys.py``), so a renamed prefix cannot silently hide the start status,
the waiting cells' reasons and the launcher's single GPU kernel cards."""

from __future__ import annotations

import re
from pathlib import Path

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.server.kernels.specs import write_kernelspecs

KERNELFORMAT = Path(__file__).parents[3] / "labextension" / "src" / "kernelformat.ts"


def test_the_lab_extension_reads_the_prefix_the_server_writes(tmp_path):
    (said,) = re.findall(r"export const GPU_KERNEL_PREFIX = '([^']*)';", KERNELFORMAT.read_text())
    assert said == keys.KERNELSPEC_PREFIX
    names = write_kernelspecs(tmp_path, [{"slug": "gpu-1", "display_name": "Python 3 (1 GPU)"}])
    assert names == ["gpuburst-gpu-1"] and all(name.startswith(said) for name in names)
