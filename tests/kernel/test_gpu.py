"""A GPU kernel reports its own GPU use: its pod samples the (simulated) GPU, and the server asks
over the kernel's signed control channel; the figures follow what the kernel does."""

from __future__ import annotations

from jupyter_client.manager import AsyncKernelManager

from jupyter_gpuburst.gpu.simulated import KERNEL_BASE_MEMORY, SimulatedBackend
from jupyter_gpuburst.kernel.gpu import KernelGPUReporter, reporter_from_env
from jupyter_gpuburst.server.kernels.usage import KernelUsageCache, ask_usage, gpu_figures, untrack_probes
from jupyter_gpuburst.sim.testing import wait_until

GiB = 1024**3


def test_the_reporter_follows_busy_time_on_the_simulated_gpu():
    reporter = KernelGPUReporter(SimulatedBackend(1), "k-1")
    idle = reporter.sample(now=100.0)
    assert idle["simulated"] and idle["memory_used_bytes"] == KERNEL_BASE_MEMORY
    assert idle["memory_total_bytes"] == SimulatedBackend(1).model.memory_total_bytes
    reporter.busy = True
    reporter.sample(now=101.0)
    busy = reporter.sample(now=111.0)  # ten busy seconds later
    assert busy["memory_used_bytes"] > idle["memory_used_bytes"] and busy["utilization"] > 0.5
    reporter.busy = False
    settled = reporter.sample(now=112.0)  # the second up to here was still busy
    later = reporter.sample(now=130.0)
    assert later["utilization"] == 0.0 and later["memory_used_bytes"] == settled["memory_used_bytes"]


def test_without_a_gpu_the_reporter_says_why_and_samples_nothing():
    reporter = reporter_from_env({"JUPYTER_GPUBURST_BACKEND": "none"})
    report = reporter.report()
    assert report["memory_used_bytes"] is None and report["reason"]
    reporter.start()
    assert not reporter.running


def test_figures_from_a_kernel_are_checked():
    assert gpu_figures(None) is None and gpu_figures({"gpu": "lots"}) is None
    checked = gpu_figures({"gpu": {"memory_used_bytes": "1e9", "memory_total_bytes": 8, "utilization": True, "backend": "nvml"}})
    assert checked["memory_used_bytes"] is None and checked["memory_total_bytes"] == 8 and checked["utilization"] is None


async def test_a_remote_kernel_answers_its_gpu_use_on_its_control_channel(hub, specs):
    km = AsyncKernelManager(kernel_name="gpuburst-gpu-1", kernel_spec_manager=specs)
    await km.start_kernel()
    try:
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        first = gpu_figures(await ask_usage(km, timeout=10))
        assert first["simulated"] and first["memory_used_bytes"] >= KERNEL_BASE_MEMORY
        # the usage request came from a client of its own: the manager's and this client's
        # replies still reach them (a shared socket identity would divert them)
        msg_id = client.execute("import time; time.sleep(3)")
        reply = await client.get_shell_msg(timeout=60)
        # wait_for_ready asks kernel_info again each second it has no answer: on a loaded machine
        # the answers to the earlier asks come after it returned, before this reply
        while reply["msg_type"] == "kernel_info_reply":
            reply = await client.get_shell_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "ok"

        # the pod sampled while the cell ran: its kernel's memory grew with the busy time. Its
        # samples come once a second from a thread, so a loaded machine may show the growth only
        # in the sample after the cell's end: the report is read until it does
        async def grown() -> dict | None:
            figures = gpu_figures(await ask_usage(km, timeout=10))
            return figures if figures["memory_used_bytes"] > first["memory_used_bytes"] else None

        second = await wait_until(grown, 15, "the kernel's GPU memory to grow with its busy time", interval=0.2)
        client.stop_channels()

        # a request signed with another key is dropped by the kernel: no figures, no error
        good_key = km.session.key
        km.session.key = b"not-the-kernel-key-0123456789"
        try:
            assert await ask_usage(km, timeout=1.5) is None
        finally:
            km.session.key = good_key

        # the cache asks once per TTL
        class Manager:
            def get_kernel(self, kernel_id):
                assert kernel_id == "k"
                return km

        cache = KernelUsageCache(ttl_s=60)
        one = await cache.figures(Manager(), ["k"])
        assert one["k"]["memory_used_bytes"] >= second["memory_used_bytes"]
        assert await cache.figures(Manager(), ["k"]) == one
        assert await cache.figures(Manager(), []) == {}
    finally:
        await km.shutdown_kernel(now=True)


def busy_then_idle(changes: list[tuple[str, object]]) -> bool:
    states = [value for name, value in changes if name == "execution_state"]
    return "busy" in states and "idle" in states[states.index("busy") :]


async def test_the_servers_gpu_probe_is_no_activity_of_the_kernel(hub, specs):
    """The server asks each GPU kernel for its GPU use every second or so. jupyter_server reads
    the kernel's busy status while it answers as activity unless the probe's message types are
    untracked: the culling report then said 0 s idle whenever a probe overlapped it, and the
    kernel's idleness jumped between its true age and 0."""
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

    manager = AsyncMappingKernelManager(kernel_spec_manager=specs)
    kernel_id = await manager.start_kernel(kernel_name="gpuburst-gpu-1")
    kernel = manager.get_kernel(kernel_id)
    # what the server's activity watch changes, in order (both are traits of its kernel manager)
    changes: list[tuple[str, object]] = []
    kernel.observe(lambda change: changes.append((change.name, change.new)), names=["execution_state", "last_activity"])
    client = kernel.client()
    client.start_channels()

    async def run_a_cell() -> None:
        """A cell is tracked activity. Once the server has seen its busy and idle statuses, it has
        seen every message the kernel published before them (one socket, in order): the kernel's
        late "starting" status (ipykernel publishes it after its control channel already answers),
        an earlier probe's statuses, the welcome for this client's subscription."""
        msg_id = client.execute("pass")
        while (await client.get_shell_msg(timeout=60))["parent_header"].get("msg_id") != msg_id:
            pass
        await wait_until(lambda: busy_then_idle(changes), 15, "the cell's statuses seen by the server")

    try:
        await client.wait_for_ready(timeout=60)
        changes.clear()
        await run_a_cell()

        # tracked, as jupyter_server has it by default: the probe is activity (what the test
        # would miss if it could not see it)
        changes.clear()
        assert gpu_figures(await ask_usage(kernel, timeout=10)) is not None
        await wait_until(lambda: busy_then_idle(changes), 15, "the probe seen as activity")

        untrack_probes(manager)
        untrack_probes(manager)
        assert manager.untracked_message_types.count("usage_request") == 1
        changes.clear()
        for _ in range(5):
            assert gpu_figures(await ask_usage(kernel, timeout=10)) is not None
        await run_a_cell()
        # all the server saw was the cell: its busy status (activity, then busy), its input and
        # idle status (activity), then idle; a counted probe would come first
        assert [name for name, _ in changes[:2]] == ["last_activity", "execution_state"], changes
        assert [value for name, value in changes if name == "execution_state"] == ["busy", "idle"], changes
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(kernel_id, now=True)
