"""Where a user's server's idle signal comes from: it measures its GPUs and kernels itself, reports
an age rather than a time, numbers its reports, and says "no reading" rather than "idle" without
a GPU."""

from __future__ import annotations

import time

from helpers.activity import Kernels, Sampler

from jupyter_gpuburst.server.activity import ActivityReporter

MiB = 2**20


async def test_a_server_reports_an_age_numbered_and_no_gpu_as_null():
    gpus = [{"uuid": "GPU-0", "utilization": 0.0, "memory_used_bytes": MiB}]
    reporter = ActivityReporter("http://hub/activity", "secret", "", Sampler(gpus), Kernels({"a": "idle"}))
    await reporter.sample()
    reporter.busy_at = time.monotonic() - 42
    await reporter.sample()
    first = await reporter.body()
    assert 42 <= first["gpu_idle_s"] < 44 and first["basis"] == "utilization" and first["seq"] == 1
    # a kernel executing is activity, an open panel is not
    busy = ActivityReporter("http://hub/activity", "secret", "", Sampler(gpus), Kernels({"a": "busy"}))
    busy.busy_at = time.monotonic() - 42
    await busy.sample()
    assert (await busy.body())["gpu_idle_s"] < 1
    second = await reporter.body()
    assert second["seq"] == 2 and second["boot"] == first["boot"]
    # no GPU visible: "no reading", never "idle"
    cpu = ActivityReporter("http://hub/activity", "secret", "", Sampler([]), Kernels({}))
    await cpu.sample()
    assert (await cpu.body())["gpu_idle_s"] is None
    assert "secret" not in str(await reporter.body())


async def test_idleness_counts_from_the_first_sample_that_finds_the_gpu_idle_never_earlier():
    # the GPU went idle somewhere between two samples: counting from the last busy one would let a
    # stop come up to a sample before its timeout; counting from the first idle one makes it late
    gpus = [{"uuid": "GPU-0", "utilization": 0.9, "memory_used_bytes": MiB}]
    reporter = ActivityReporter("http://hub/activity", "secret", "", Sampler(gpus), Kernels({}))
    await reporter.sample()
    reporter.busy_at = time.monotonic() - 5  # the busy sample was taken 5 s ago
    gpus[0]["utilization"] = 0.0
    await reporter.sample()
    assert (await reporter.body())["gpu_idle_s"] < 1
    reporter.busy_at = time.monotonic() - 5
    await reporter.sample()  # idle twice running: the age grows from the first idle sample
    assert 5 <= (await reporter.body())["gpu_idle_s"] < 7


class Stream:
    def __init__(self):
        self.callback = None
        self.closed = False

    def on_recv(self, callback):
        self.callback = callback

    def close(self):
        self.closed = True


async def test_a_cell_shorter_than_a_sample_still_counts_and_an_info_request_does_not():
    from jupyter_client.session import Session

    session = Session(key=b"kernel-key")
    stream = Stream()
    kernels = Kernels({"a": "idle"})
    kernels.kernels["a"].session = session
    kernels.kernels["a"].connect_iopub = lambda: stream
    gpus = [{"uuid": "GPU-0", "utilization": 0.0, "memory_used_bytes": MiB}]
    reporter = ActivityReporter("http://hub/activity", "secret", "", Sampler(gpus), kernels)
    await reporter.sample()
    assert stream.callback is not None

    def status(state: str, parent: str) -> list[bytes]:
        msg = session.msg("status", {"execution_state": state}, parent=session.msg(parent, {}))
        return session.serialize(msg)

    reporter.busy_at = time.monotonic() - 100
    stream.callback(status("busy", "kernel_info_request"))  # the panel or a reconnect: no GPU work
    await reporter.sample()
    assert (await reporter.body())["gpu_idle_s"] >= 100
    # a 1 s cell, begun and ended between two samples: execution_state reads "idle" at both
    stream.callback(status("busy", "execute_request"))
    stream.callback(status("idle", "execute_request"))
    await reporter.sample()
    assert (await reporter.body())["gpu_idle_s"] < 1
    # the kernel is gone: its stream is closed
    del kernels.kernels["a"]
    await reporter.sample()
    assert stream.closed


class Manager(Kernels):
    """A kernel manager that, as jupyter_server's, begins watching a kernel once it is ready."""

    def __init__(self, states):
        super().__init__(states)
        self.watched: list[str] = []

    def start_watching_activity(self, kernel_id):
        self.watched.append(kernel_id)


def iopub_kernel(manager: Manager, kernel_id: str):
    from jupyter_client.session import Session

    session, stream = Session(key=b"kernel-key"), Stream()
    manager.kernels[kernel_id].session = session
    manager.kernels[kernel_id].connect_iopub = lambda: stream

    def send(msg_type: str, parent: str, content: dict | None = None) -> None:
        stream.callback(session.serialize(session.msg(msg_type, content or {}, parent=session.msg(parent, {}))))

    return send


async def test_the_first_cell_of_the_servers_own_kernels_is_reported_as_an_age_and_a_start_is_no_cell():
    from jupyter_gpuburst.server.activity import FIRST_CELL_TOLD_S

    manager = Manager({"a": "idle", "late": "idle"})
    send = iopub_kernel(manager, "a")
    send_late = iopub_kernel(manager, "late")
    gpus = [{"uuid": "GPU-0", "utilization": 0.0, "memory_used_bytes": MiB}]
    reporter = ActivityReporter("http://hub/activity", "secret", "", Sampler(gpus), manager)
    # "late" was running before the reporter watched kernel starts: cells it ran then are unknown
    await reporter.sample()
    reporter.follow_kernel_starts()
    manager.start_watching_activity("a")
    assert manager.watched == ["a"]  # jupyter_server's own watch still runs
    # the kernel starting, the notebook asking its info, a completion, an extension's silent
    # execution (no execute_input): no cell
    send("status", "kernel_info_request", {"execution_state": "busy"})
    send("status", "complete_request", {"execution_state": "busy"})
    send("status", "execute_request", {"execution_state": "busy"})
    send("status", "execute_request", {"execution_state": "idle"})
    send_late("execute_input", "execute_request", {"code": "x", "execution_count": 7})
    assert "first_cell_ago_s" not in await reporter.body()
    send("execute_input", "execute_request", {"code": "import torch", "execution_count": 1})
    reporter.first_cell_at -= 90  # as if it began 90 s ago
    send("execute_input", "execute_request", {"code": "x", "execution_count": 2})  # a second cell leaves it
    assert 90 <= (await reporter.body())["first_cell_ago_s"] < 92
    # an age the hub has no use for is no longer told (it would refuse one over 30 days)
    reporter.first_cell_at -= FIRST_CELL_TOLD_S
    assert "first_cell_ago_s" not in await reporter.body()
