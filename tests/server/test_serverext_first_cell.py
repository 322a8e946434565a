"""A GPU server's activity report says when the first cell of its own kernels began, watched on a
real kernel from the moment jupyter_server watches it: a kernel starting, its info, a completion
and a silent execution are no cell; the first execution the student asks for is."""

from __future__ import annotations

import time

import pytest

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.server.handlers import ACTIVITY_SETTING
from jupyter_gpuburst.sim.testing import wait_until

# nothing listens there: the report fails, as with a hub away; what it would say is read here
REPORTING = {keys.ACTIVITY_URL_ENV: "http://127.0.0.1:9/services/gpuburst/api/activity"}


@pytest.mark.parametrize("gpuburst_env", [REPORTING])
async def test_a_kernel_starting_is_no_cell_and_its_first_cell_is_reported(jp_serverapp):
    reporter = jp_serverapp.web_app.settings[ACTIVITY_SETTING]
    km = jp_serverapp.kernel_manager
    kernel_id = await km.start_kernel(kernel_name="python3")
    client = km.get_kernel(kernel_id).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=30)  # kernel_info, as JupyterLab asks on connecting
        await client.complete("import o", reply=True, timeout=30)
        await client.execute("x = 1", silent=True, reply=True, timeout=30)
        asked = time.monotonic()
        assert (await client.execute("y = 2", reply=True, timeout=30))["content"]["status"] == "ok"

        async def first_cell() -> float | None:
            return (await reporter.body()).get("first_cell_ago_s")

        age = await wait_until(first_cell, 10, "the first cell in the activity report", interval=0.1)
        assert 0 <= age < 5
        # IOPub keeps the kernel's order: had the start, the completion or the silent execution
        # counted, the first cell would have begun before the cell was even sent
        began = reporter.first_cell_at
        assert began >= asked, (began, asked)
        await client.execute("z = 3", reply=True, timeout=30)
        assert reporter.first_cell_at == began  # a second cell leaves it
    finally:
        client.stop_channels()
        await km.shutdown_kernel(kernel_id, now=True)
