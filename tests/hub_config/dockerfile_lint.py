"""A small Dockerfile parser and the checks hub_config/images/ must pass.

Not a general linter: it knows the few rules that broke these images before. The base image is
pinned (a tag, not ``latest``); installs run as root and the image ends as the notebook user;
nothing is copied in and left root-owned (the wheel is bind-mounted for the install step); pip
installs with ``--no-cache-dir`` into the image's environment (never ``--user``).

``python tests/hub_config/dockerfile_lint.py FILE...`` prints the problems and exits 1 if any.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT_USERS = {"root", "0"}


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped (parser directives too)."""
    out: list[Instruction] = []
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue  # comments inside a continued instruction are dropped, as Docker does
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1].rstrip())
            continue
        buffer.append(stripped)
        joined = " ".join(part for part in buffer if part)
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip()))
        buffer = []
    if buffer:
        raise ValueError(f"line {start}: instruction continues past the end of the file")
    return out


def build_args(instructions: list[Instruction]) -> dict[str, str]:
    """ARG defaults declared before the first FROM (the ones FROM may use)."""
    args: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "FROM":
            break
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            args[name.strip()] = default.strip().strip('"')
    return args


def _expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), value)


def base_image(instructions: list[Instruction]) -> str:
    [image] = [_expand(i.args.split()[0], build_args(instructions)) for i in instructions if i.keyword == "FROM"][:1] or [""]
    return image


def run_scripts(instructions: list[Instruction]) -> list[tuple[str, str]]:
    """(user, shell script) of each RUN, with BuildKit ``--mount=...`` flags removed."""
    user = "?"  # the base image's own user
    out = []
    for ins in instructions:
        if ins.keyword == "USER":
            user = ins.args.split(":")[0]
        elif ins.keyword == "RUN":
            script = ins.args
            while script.startswith("--"):
                _flag, _, script = script.partition(" ")
                script = script.lstrip()
            out.append((user, script))
    return out


def mounts(instructions: list[Instruction]) -> list[dict[str, str]]:
    found = []
    for ins in instructions:
        if ins.keyword == "RUN":
            for flag in re.findall(r"--mount=(\S+)", ins.args):
                found.append(dict(part.split("=", 1) for part in flag.split(",") if "=" in part))
    return found


def problems(text: str) -> list[str]:
    """Everything wrong with a Dockerfile, by the rules in the module docstring."""
    instructions = parse(text)
    found: list[str] = []
    keywords = [i.keyword for i in instructions]
    if not text.lstrip().startswith("# syntax=docker/dockerfile:1") and mounts(instructions):
        found.append("RUN --mount needs BuildKit: start with '# syntax=docker/dockerfile:1'")
    image = base_image(instructions)
    if not image:
        found.append("no FROM")
    else:
        name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
        if "@sha256:" not in image and (not tag or tag == "latest" or tag.endswith("-latest")):
            found.append(f"base image {image!r} is not pinned (use a release tag or a digest)")
    users = [i for i in instructions if i.keyword == "USER"]
    if not users or users[-1].args.split(":")[0] in ROOT_USERS:
        found.append("the image must end as the notebook user (a final USER that is not root)")
    for user, script in run_scripts(instructions):
        if re.search(r"\bpip install\b", script):
            if user not in ROOT_USERS:
                found.append(f"pip install runs as {user!r}: switch to USER root first (the base image ends as its user)")
            if "--no-cache-dir" not in script:
                found.append("pip install without --no-cache-dir leaves pip's cache in the image")
            if re.search(r"\s--user\b", script):
                found.append("pip install --user puts the package off the image's environment and PATH")
        if re.search(r"\brm\b", script) and user not in ROOT_USERS:
            found.append(f"rm as {user!r}: files COPY made are root-owned and cannot be removed")
    for ins in instructions:
        if ins.keyword in ("COPY", "ADD") and "--chown" not in ins.args:
            found.append(f"line {ins.line}: {ins.keyword} leaves root-owned files; bind-mount build inputs instead")
    if "CMD" in keywords or "ENTRYPOINT" in keywords:
        found.append("CMD/ENTRYPOINT: keep the base image's (z2jh and KubeSpawner rely on them)")
    return found


def pip_commands(text: str) -> list[list[str]]:
    """The argv of every ``pip install`` in the RUN steps (as shell words, unexpanded)."""
    out = []
    for _user, script in run_scripts(parse(text)):
        for part in re.split(r"&&|;", script):
            words = shlex.split(part)
            if "pip" in words and "install" in words:
                out.append(words)
    return out


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    bad = 0
    for path in paths:
        for problem in problems(path.read_text()):
            print(f"{path}: {problem}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
