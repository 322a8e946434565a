"""Fixtures for GPU culling tests: the spawner tests' federation and hub."""

from __future__ import annotations

from spawner.conftest import federation, start_hub  # noqa: F401 - fixtures reused as they are
from browser.conftest import artifacts, browser_context_args, browser_type_launch_args  # noqa: F401,E402 - chromium setup
