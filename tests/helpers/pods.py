"""Pods for the emulated kubelet's tests: containers that run this interpreter, as a real
kubelet would run an image's command."""

from __future__ import annotations

import sys

PY = sys.executable


def pod(name: str, *containers: dict, **spec) -> dict:
    """A bare pod of ``containers`` that stops within a second when deleted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": list(containers), "terminationGracePeriodSeconds": 1, **spec},
    }


def py(name: str, code: str, **extra) -> dict:
    """A container running ``code`` with this interpreter."""
    return {"name": name, "image": "python:3.11", "command": [PY, "-c", code], **extra}
