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
