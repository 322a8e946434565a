"""The provisioner with jupyter_client's own kernel manager, against a stand-in for the hub's API."""

from __future__ import annotations

import asyncio
import queue
import time
from types import SimpleNamespace

import pytest
from helpers.fake_hub import TOKEN
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from jupyter_gpuburst.server.kernels.provisioner import DIALOG_COLUMNS, GPUBurstProvisioner, KernelPlacementError, remote_kernels
from jupyter_gpuburst.server.kernels.specs import install_kernelspecs
from jupyter_gpuburst.sim.testing import wait_until


async def run(client, code: str) -> dict:
    """Execute and collect stdout, the result, or the error name."""
    out = {"stdout": "", "result": None, "error": None}

    def output(msg):
        kind, content = msg["header"]["msg_type"], msg["content"]
        if kind == "stream":
            out["stdout"] += content["text"]
        elif kind == "execute_result":
            out["result"] = content["data"]["text/plain"]
        elif kind == "error":
            out["error"] = content["ename"]

    await client.execute_interactive(code, output_hook=output, timeout=60)
    return out


async def test_gpu_kernel_lifecycle_through_the_hub_api(hub, specs):
    km = AsyncKernelManager(kernel_name="gpuburst-gpu-1", kernel_spec_manager=specs)
    await km.start_kernel()
    try:
        assert isinstance(km.provisioner, GPUBurstProvisioner)
        assert km.kernel_spec.interrupt_mode == "message"
        (post,) = hub.posts
        assert post["profile"] == "gpu-1" and post["key"] == km.session.key.decode()
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)

        first = await run(client, "import os; os.environ['JUPYTER_GPUBURST_SITE']")
        assert first["result"] == "'origin'"
        assert "scratch space" in first["stdout"]  # said on the first run...
        second = await run(client, "1 + 1")
        assert second["stdout"] == "" and second["result"] == "2"  # ...and only then
        # the key is in no file the kernel left behind, nor in its environment
        leftover = await run(
            client,
            "import os, ipykernel.kernelapp as k; "
            "(os.path.exists(k.IPKernelApp.instance().abs_connection_file), "
            "'JUPYTER_GPUBURST_KERNEL_CONNECTION' in os.environ)",
        )
        assert leftover["result"] == "(False, False)"
        assert await km.is_alive()

        # interrupt travels on the control channel, like for any kernel with interrupt_mode message
        reply = await interrupt_the_running_cell(client, km, hub)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"

        # restart: the old pod goes, and the hub (not the server) says where the new one goes
        old = km.provisioner.placement_id
        client.stop_channels()
        await km.restart_kernel()
        assert hub.deleted == [old]
        assert "prefer_site" not in hub.posts[-1] and hub.posts[-1]["kernel_id"] == hub.posts[0]["kernel_id"]
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        assert (await run(client, "40 + 2"))["result"] == "42"
        client.stop_channels()

        info = await km.provisioner.get_provisioner_info()
        assert info["placement"]["site"] == "origin"
        assert km.provisioner.public_placement()["site"] == "origin"
    finally:
        await km.shutdown_kernel(now=False)
    assert len(hub.deleted) == 2 and hub.kernels == {}
    assert not await km.is_alive()
    # the key went to the hub once per start, and never came back
    assert all(km.session.key.decode() not in text for text in hub.responses)


async def interrupt_the_running_cell(client, km, hub) -> dict:
    """Run a cell that sleeps, interrupt it once its own code runs; the cell's reply."""
    msg_id = client.execute("import time; print('sleeping', flush=True); time.sleep(60)")
    # interrupt once the cell's own code runs: a SIGINT that lands while ipykernel is still
    # between execute_input and the cell ends its message handler, and no reply ever comes.
    # The cell's own output says so; another stream of the cell (the kernel's note, on its
    # first cell) comes before its code runs
    seen = []  # what the kernel published, for a failure to say how far the interrupt got
    while True:
        msg = await client.get_iopub_msg(timeout=30)
        seen.append(msg)
        if msg["header"]["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == msg_id and "sleeping" in msg["content"]["text"]:
            break
    await km.interrupt_kernel()
    deadline = time.monotonic() + 30
    while True:
        try:
            reply = await client.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
        except queue.Empty:
            published = await iopub_story(client, seen)
            signals = hub.signal_report()  # before the second interrupt changes it
            # for the report only (the test fails either way): whether a second interrupt gets
            # through tells a lost SIGINT from a kernel whose main thread no longer takes one
            await km.interrupt_kernel()
            try:
                answer = await client.get_shell_msg(timeout=15)
                second = f"{answer['msg_type']} {answer['content'].get('status')}"
            except queue.Empty:
                second = "none"
            raise AssertionError(
                f"no reply to the interrupted cell (to a second interrupt: {second}); the kernel published:\n{published}\n"
                f"its SIGINT, thread by thread:\n{signals}\nits pod said:\n{hub.pod_logs()}"
            ) from None
        # wait_for_ready asks again each second the kernel is slow to answer: skip those replies
        if reply["msg_type"] != "kernel_info_reply":
            assert reply["parent_header"]["msg_id"] == msg_id
            return reply


async def iopub_story(client, seen: list[dict]) -> str:
    """Each IOPub message since the cell was sent, one a line: its type, what it answers (the
    interrupt_request's busy and idle say the kernel handled it) and, for an error, its name (an
    interrupt IPython swallowed still publishes its traceback)."""
    while True:
        try:
            seen.append(await client.get_iopub_msg(timeout=0.5))
        except queue.Empty:
            break
    lines = []
    for msg in seen:
        content = msg["content"]
        detail = content.get("execution_state") or content.get("ename") or " ".join(content.get("text", "").split())[:60]
        lines.append(f"  {msg['header']['msg_type']} ({msg['parent_header'].get('msg_type')}): {detail}")
    return "\n".join(lines)


@pytest.mark.parametrize("start", ["start", "restart"])
async def test_an_interrupt_while_the_kernel_starts_leaves_later_ones_working(hub, specs, monkeypatch, start):
    """A student may press interrupt while a GPU kernel waits for its pod (a queue, an image
    pull): jupyter_client then connects its control socket to the address it knows, none yet
    or the previous pod's. Later interrupts must still reach the kernel once it runs."""
    held = asyncio.Event()  # set: the hub reports the new pod pending, however far it got
    state = hub.state

    def held_state(record):
        out = state(record)
        return {**out, "state": "pending", "connection": None} if held.is_set() and out["state"] == "running" else out

    monkeypatch.setattr(hub, "state", held_state)
    km = AsyncKernelManager(kernel_name="gpuburst-gpu-1", kernel_spec_manager=specs)
    try:
        if start == "restart":
            await km.start_kernel()
        held.set()
        starting = asyncio.ensure_future(km.start_kernel() if start == "start" else km.restart_kernel())
        posts = 1 if start == "start" else 2
        await wait_until(
            lambda: len(hub.posts) == posts and (km.provisioner.placement or {}).get("state") == "pending", 30, "a pending kernel"
        )
        await km.interrupt_kernel()
        held.clear()
        await starting
        client = km.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            reply = await interrupt_the_running_cell(client, km, hub)
            assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        finally:
            client.stop_channels()
    finally:
        await km.shutdown_kernel(now=True)
    assert hub.kernels == {}


async def test_restart_goes_elsewhere_when_the_site_is_full(hub, specs):
    km = AsyncKernelManager(kernel_name="gpuburst-gpu-1", kernel_spec_manager=specs)
    await km.start_kernel()
    try:
        assert km.provisioner.placement["site"] == "origin"
        hub.full_sites.add("origin")
        await km.restart_kernel()
        assert km.provisioner.placement["site"] == "donor-1"
    finally:
        await km.shutdown_kernel(now=True)
    assert hub.kernels == {}


async def test_a_kernel_the_hub_cannot_place_fails_at_once_with_the_reason(hub, specs):
    hub.full_reason = "No site can start 1 × nvidia.com/gpu now: origin 0 of 2 free."
    km = AsyncKernelManager(kernel_name="gpuburst-gpu-1", kernel_spec_manager=specs)
    with pytest.raises(KernelPlacementError) as info:
        await km.start_kernel()
    assert info.value.status_code == 503
    # in lines that fit JupyterLab's error dialog, the words as the hub wrote them
    assert " ".join(str(info.value).split()) == f"No GPU kernel: {hub.full_reason}"
    assert max(len(line) for line in str(info.value).splitlines()) <= DIALOG_COLUMNS
    assert hub.kernels == {}
    # the GPU panel lists it by the name the launcher offered, as failed and why, never by an id
    (kernel,) = remote_kernels(SimpleNamespace(list_kernel_ids=lambda: ["k-1"], get_kernel=lambda kernel_id: km))
    assert kernel["display_name"] == "Python 3 (1 GPU)"
    assert kernel["profile"] == "gpu-1"
    assert kernel["state"] == "failed"
    assert " ".join(kernel["error"].split()) == f"No GPU kernel: {hub.full_reason}"
    assert kernel["site"] is None and kernel["id"] is None


async def test_kernelspecs_name_the_provisioner_and_profile(hub, tmp_path):
    ksm = KernelSpecManager(kernel_dirs=[])
    env = {"JUPYTER_GPUBURST_KERNELS_URL": hub.kernels_url, "JUPYTERHUB_API_TOKEN": TOKEN}
    names = await asyncio.to_thread(install_kernelspecs, ksm, str(tmp_path), env)
    assert names == ["gpuburst-gpu-1"]
    spec = ksm.get_kernel_spec("gpuburst-gpu-1")
    assert spec.display_name == "Python 3 (1 GPU)"
    assert spec.metadata["kernel_provisioner"] == {"provisioner_name": "gpuburst", "config": {"profile": "gpu-1"}}


async def test_without_the_scope_no_gpu_kernels_are_offered(hub, tmp_path):
    ksm = KernelSpecManager(kernel_dirs=[])
    env = {"JUPYTER_GPUBURST_KERNELS_URL": hub.kernels_url, "JUPYTERHUB_API_TOKEN": "someone-elses"}
    assert await asyncio.to_thread(install_kernelspecs, ksm, str(tmp_path), env) == []
    assert ksm.kernel_dirs == []
    assert "gpuburst-gpu-1" not in ksm.find_kernel_specs()


async def test_idle_culling_gives_the_gpu_back(hub, specs):
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

    mkm = AsyncMappingKernelManager(kernel_spec_manager=specs, cull_idle_timeout=1, cull_interval=1)
    kernel_id = await mkm.start_kernel(kernel_name="gpuburst-gpu-1")
    # (on a loaded machine the culler may act before this line: read nothing off the kernel)
    try:
        for _ in range(300):
            # the pod is deleted first, then jupyter_server forgets the kernel
            if hub.deleted and kernel_id not in mkm.list_kernel_ids():
                break
            await asyncio.sleep(0.1)
        assert len(hub.posts) == 1 and len(hub.deleted) == 1 and hub.kernels == {}
        assert kernel_id not in mkm.list_kernel_ids()
    finally:
        await mkm.shutdown_all(now=True)


async def test_a_restarted_kernel_is_told_apart_by_its_ports(hub, specs, tmp_path):
    """A restart moves the kernel to a new pod at a new address; jupyter_server tells that by the
    ports alone. A websocket that reconnects after the restart must get sockets on the new pod,
    and the activity watch (which the culler reads) must follow the kernel there, after every
    restart, whichever way the websocket reconnected before."""
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

    kernels = AsyncMappingKernelManager(kernel_spec_manager=specs, root_dir=str(tmp_path))
    kernel_id = await kernels.start_kernel(kernel_name="gpuburst-gpu-1")
    km = kernels.get_kernel(kernel_id)
    old_channels = []
    try:
        # restart 2 reconnects without the buffer (the new websocket came before the old one's
        # close was handled), so jupyter_server does not learn the ports of restart 1's pod
        for restart, reconnect_restores in enumerate([True, False, True, True], start=1):
            before = (km.ip, km.ports)
            channels = {"shell": km.connect_shell(), "iopub": km.connect_iopub()}
            old_channels += channels.values()
            await kernels.restart_kernel(kernel_id)
            assert km.ip != before[0] and km.ports != before[1], f"restart {restart}: same ports at a new address"
            assert hub.posts[-1]["port_set"] == restart % 2
            if reconnect_restores:
                # JupyterLab reconnects after a restart: the old websocket's close buffers its
                # sockets, the new one with the same session takes them back unless the ports changed
                kernels.start_buffering(kernel_id, "session-1", channels)
                assert kernels.get_buffer(kernel_id, "session-1") is not None
                assert kernels.ports_changed(kernel_id), f"restart {restart}: the old pod's sockets would be reused"
            # the activity watch listens on the new pod: running code there is activity
            seen = km.last_activity
            client = km.client()
            client.start_channels()
            try:
                await client.wait_for_ready(timeout=60)
                assert (await run(client, f"{restart} * 2"))["result"] == str(restart * 2)
            finally:
                client.stop_channels()
            for _ in range(50):
                if km.last_activity > seen:
                    break
                await asyncio.sleep(0.1)
            assert km.last_activity > seen, f"restart {restart}: activity is watched on the old pod"
    finally:
        for stream in old_channels:
            stream.close()
        await kernels.shutdown_kernel(kernel_id, now=True)
