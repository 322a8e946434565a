"""Fixtures for GPU culling tests: the spawner tests' federation and hub."""

from __future__ import annotations

from spawner.conftest import federation, start_hub  # noqa: F401 - fixtures reused as they are
