"""The kube tier's own files: always on the real control plane (tests/helpers/kubetier.py),
skipped with the reason where it is not built."""

from __future__ import annotations

import pytest
from helpers.kubetier import kube_federation


@pytest.fixture
async def federation(tmp_path, tmp_path_factory, kube_federation_pool, request):
    async with kube_federation(tmp_path, tmp_path_factory, kube_federation_pool, request) as fed:
        yield fed
