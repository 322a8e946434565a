"""Fixtures for GPU kernel tests: the spawner tests' federation and hub, with kernels installed."""

from __future__ import annotations

from spawner.conftest import federation, start_hub  # noqa: F401 - fixtures reused as they are
