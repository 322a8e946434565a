"""Pre-started GPU kernels on the real control plane, the hub as its ServiceAccount: adoption
patches the waiting pod, which only the deployment's RBAC can allow (the emulator's hub is
system:masters). The same tests as the emulator tier's (tests/hub/pools/)."""

from __future__ import annotations

import pytest
from hub.pools.test_prestarted_integration import (  # noqa: F401 - collected here, on the kube fixtures
    test_a_gpu_server_takes_a_pre_started_kernels_gpu_at_once,
    test_the_next_gpu_kernel_adopts_a_pre_started_one_with_a_key_of_its_own,
)

pytestmark = pytest.mark.kube
