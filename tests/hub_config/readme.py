"""The README's real-cluster guide as commands, so tests run and check exactly what it says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def guide_commands() -> list[str]:
    """Every command line of the guide's bash blocks (continuations joined, comments dropped)."""
    text = README.read_text()
    guide = text[text.index("## Real-cluster guide") : text.index("## Configuration reference")]
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", guide, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line:
                lines.append(line)
    return lines


def command(prefix: str) -> list[str]:
    """The one guide command that starts with ``prefix``, split as the shell would."""
    [line] = [line for line in guide_commands() if line.startswith(prefix)]
    return shlex.split(line)
