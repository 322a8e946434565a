"""`gpuburst bench rush` at small scale, and its checks' ability to fail."""

from __future__ import annotations

import copy
import json
import random

import psutil
import pytest
from traitlets.config import Config

from jupyter_gpuburst.bench import rush, rush_setup
from jupyter_gpuburst.sim.config import parse_config


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_rush_small_runs_every_arm_and_an_impossible_goal_fails_it(capsys, tmp_path):
    # an impossible p95 goal: the run must say so and exit 1, while every other check holds
    code = rush.main(
        [
            "--students",
            "12",
            "--rounds",
            "1",
            "--window",
            "6",
            "--pull-speedup",
            "20",
            "--start-timeout",
            "120",
            "--p95-goal",
            "0.001",
            "--state-dir",
            str(tmp_path),
            "--json",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["ok"] is False
    assert result["checks"] == {
        "kernel_p95_with_pools_within_goal": False,
        "nothing_double_booked": True,
        "every_student_ran_or_refused_with_reason": True,
        "pools_ready_before_rush": True,
    }, result["rounds"]
    # the four arms, interleaved, every student started and timed in each
    assert [r["arm"] for r in result["rounds"]] == ["kernel_pools", "kernel_no_pools", "server_no_pools", "server_pools"]
    for name, arm in result["arms"].items():
        assert arm["ran"] + arm["refused"] == 12 and arm["lost"] == 0, (name, arm)
        assert arm["start_s"]["n"] == arm["ran"] and arm["start_s"]["p50"] <= arm["start_s"]["p95"] <= arm["start_s"]["max"]
    # the pools held GPUs before and during the rush, and the hub's ledger counted them as the pools'
    assert result["arms"]["kernel_pools"]["pool_gpu_hours_held"] > 0
    assert result["arms"]["kernel_no_pools"]["pool_gpu_hours_held"] == 0
    assert result["hub_sqlite"] == "wal"
    assert result["pull_speedup"] == 20 and set(result["scaled"]) == {"real", "stand_ins", "nodes", "federation"}
    # each arm says who used the CPUs during its rush: the hub, the emulator and its pods all worked
    for r in result["rounds"]:
        used = r["cpu"]["cpu_s_by_role"]
        assert used["hub"] > 0 and used["federation"] > 0 and used["pods"] > 0, (r["arm"], r["cpu"])
        assert r["cpu"]["machine_busy_percent"]["periods"] >= 1 and r["cpu"]["window_s"] > 0
    # stopping leaves nothing behind: no arm's proxy outlives its hub (it runs in a session of its own)
    pids = [int(f.read_text()) for f in tmp_path.glob("r0-*/hub/jupyterhub-proxy.pid")]
    assert len(pids) == 4
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def good_result() -> dict:
    arm = {"start_s": {"n": 10, "p95": 4.0}, "double_booked_max": 0, "lost": 0, "ran": 10, "refused": 0}
    return {
        "arms": {name: copy.deepcopy(arm) for name in ("kernel_pools", "kernel_no_pools", "server_pools", "server_no_pools")},
        "rounds": [{"pools": {"ready_before_rush": True}}],
    }


def test_rush_checks_pass_on_a_good_result():
    assert all(rush.checks(good_result(), 10.0).values())


@pytest.mark.parametrize(
    "arm, change, check",
    [
        ("kernel_pools", {"start_s": {"n": 10, "p95": 10.5}}, "kernel_p95_with_pools_within_goal"),
        ("kernel_pools", {"start_s": {"n": 0, "p95": None}}, "kernel_p95_with_pools_within_goal"),
        ("server_no_pools", {"double_booked_max": 1}, "nothing_double_booked"),
        ("kernel_no_pools", {"lost": 1}, "every_student_ran_or_refused_with_reason"),
    ],
)
def test_rush_checks_fail_on_a_bad_arm(arm, change, check):
    result = good_result()
    result["arms"][arm].update(change)
    assert not rush.checks(result, 10.0)[check]


def test_rush_check_fails_when_a_pool_was_not_ready_before_the_rush():
    result = good_result()
    result["rounds"].append({"pools": {"ready_before_rush": False}})
    assert not rush.checks(result, 10.0)["pools_ready_before_rush"]


def test_a_student_refused_without_a_clear_reason_counts_as_lost():
    student = rush.Student("s000", 0.0)
    rush._refused(student, "HTTP response body: {'kind': 'Status'}")
    assert student.outcome == "lost"
    rush._refused(student, "No GPU is free on any site now; try again in a few minutes.")
    assert student.outcome == "refused"


def test_arrivals_follow_the_lab_start_within_the_window():
    times = rush.lab_start_arrivals(500, 60.0, random.Random(1))
    assert len(times) == 500 and times == sorted(times) and 0 <= times[0] and times[-1] < 60.0
    # exponential with a mean of a quarter of the window: most press Start in the first seconds
    assert sum(t < 15.0 for t in times) > 250


def test_arms_alternate_their_order_between_rounds():
    assert rush.arm_order(1) == rush.arm_order(0)[::-1]
    assert {(m, p) for m, p in rush.arm_order(0)} == {("kernel", True), ("kernel", False), ("server", True), ("server", False)}


def test_the_rush_federation_is_rush_yaml_with_nodes_for_the_class():
    shape = rush_setup.Shape.for_students(500)
    assert sum(shape.gpus.values()) >= 550 and shape.cpu_nodes * rush_setup.CPU_SERVERS_PER_NODE >= 500
    config = rush_setup.federation(shape)
    own = parse_config(rush_setup.rush_yaml(), "rush.yaml")
    # the images, their sizes and each site's bandwidth and cold nodes are rush.yaml's own
    assert config.origin.images == own.origin.images
    assert config.donors[0].cluster.images == own.donors[0].cluster.images
    pools = rush_setup.sized_pools(shape, 1.0)
    assert {p["site"]: p["count"] for p in pools} == shape.gpus
    arm = rush_setup.ArmSetup("kernel", pools, extra=("c.GPUKernelSettings.reap_interval_seconds = 5",))
    lines = arm.config_lines()
    assert "c.WarmPools.pools" in lines and "reap_interval_seconds" in lines
    assert "WarmPools" not in rush_setup.ArmSetup("kernel").config_lines()


async def test_a_start_that_failed_after_202_is_refused_with_the_spawn_page_s_reason():
    from aiohttp import ClientSession, web

    events = {
        "ann": [
            {"progress": 50, "message": "Placing"},
            {"progress": 100, "failed": True, "message": "Spawn failed: No GPU is free on any site."},
        ],
        "bob": [{"progress": 100, "failed": True, "message": "Spawn failed"}],
    }

    async def progress(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events[request.match_info["user"]]:
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        return response

    app = web.Application()
    app.router.add_get("/hub/api/users/{user}/server/progress", progress)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    hub = type("Hub", (), {"api": f"http://127.0.0.1:{port}/hub/api", "headers": lambda self: {}})()
    try:
        async with ClientSession() as http:
            assert await rush._failed_progress(hub, http, "ann") == "No GPU is free on any site."
            assert await rush._failed_progress(hub, http, "bob") == ""  # a bare "Spawn failed" is no reason
    finally:
        await runner.cleanup()


def test_the_kernel_arm_with_pools_is_pre_started_kernels_on_every_gpu_and_the_no_pool_arms_are_bare():
    shape = rush_setup.Shape.for_students(40)
    kernel = rush_setup.arm_setup("kernel", True, shape, 1.0)
    # a kernel waits on every GPU of each site; no placeholder beside them (no GPU is left to hold)
    assert {k["site"]: k["count"] for k in kernel.kernels} == shape.gpus and kernel.pools == ()
    assert {k["profile"] for k in kernel.kernels} == {rush_setup.KERNEL_PROFILE} and kernel.warm == sum(shape.gpus.values())
    assert kernel.pulled == (rush_setup.cpu_image(),) and kernel.name == "kernel_pools"
    assert "c.WarmPools.kernels" in kernel.config_lines() and "c.WarmPools.pools" not in kernel.config_lines()
    # the CPU server image is on the origin's nodes from the start (an image puller's work), only there
    config = rush_setup.federation(shape, origin_images=kernel.pulled)
    assert config.origin.images.preloaded == kernel.pulled and config.donors[0].cluster.images.preloaded == ()
    assert kernel.describe() == {
        "placeholders": [],
        "prestarted_kernels": list(kernel.kernels),
        "image_puller_on_origin": list(kernel.pulled),
    }

    server = rush_setup.arm_setup("server", True, shape, 1.0)
    assert server.pools == rush_setup.sized_pools(shape, 1.0) and server.kernels == () and server.pulled == ()
    for mode in ("kernel", "server"):
        bare = rush_setup.arm_setup(mode, False, shape, 1.0)
        assert bare == rush_setup.ArmSetup(mode) and bare.config_lines() == "" and bare.warm == 0
    assert rush_setup.federation(shape).origin.images.preloaded == ()


def test_the_stand_in_kernel_waits_for_its_adopter_s_connection_as_a_pre_started_kernel_does(tmp_path):
    import os
    import secrets
    import socket
    import subprocess

    from jupyter_client.blocking.client import BlockingKernelClient

    from jupyter_gpuburst.core import keys
    from jupyter_gpuburst.hub.ports import free_ports

    ports = dict(zip(("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"), free_ports(5), strict=True))
    env = {
        **{k: v for k, v in os.environ.items() if k != keys.KERNEL_CONNECTION_ENV},
        keys.KERNEL_CONNECTION_DIR_ENV: str(tmp_path),
        keys.KERNEL_POD_IP_ENV: "127.0.0.1",
        keys.KERNEL_READY_PORT_ENV: str(ports["hb_port"]),
    }
    kernel = subprocess.Popen(rush_setup.STANDIN_KERNEL, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert "waiting for its connection" in kernel.stdout.readline()
        # Ready (its probe's port answers) while it holds no key and listens on no channel
        socket.create_connection(("127.0.0.1", ports["hb_port"]), timeout=5).close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", ports["shell_port"]), timeout=1).close()
        key = secrets.token_hex(32)
        connection = {"transport": "tcp", "ip": "0.0.0.0", "key": key, "signature_scheme": "hmac-sha256", **ports}
        (tmp_path / keys.KERNEL_ADOPTER_FILE).write_text(json.dumps({"env": {"JUPYTERHUB_USER": "alice"}}))
        (tmp_path / keys.KERNEL_CONNECTION_FILE).write_text(json.dumps(connection))
        assert "Adopted" in kernel.stdout.readline()
        client = BlockingKernelClient()
        client.load_connection_info({**connection, "ip": "127.0.0.1", "key": key.encode()})
        client.start_channels()
        try:
            msg_id = client.execute("1")
            reply = client.get_shell_msg(timeout=10)
            assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "ok"
        finally:
            client.stop_channels()
    finally:
        kernel.terminate()
        kernel.wait(10)


def test_one_mode_runs_its_two_arms_in_the_same_alternating_order():
    assert rush.arm_order(0, ("kernel",)) == [("kernel", True), ("kernel", False)]
    assert rush.arm_order(1, ("kernel",)) == [("kernel", False), ("kernel", True)]
    assert rush.arm_order(0, ("server",)) == [("server", False), ("server", True)]


def test_the_api_request_timeout_reaches_kubespawner_only_when_asked():
    arm = rush_setup.arm_setup("kernel", True, rush_setup.Shape.for_students(40), 1.0)
    default = rush_setup.hub_config(arm, ["s0"], 600)
    assert "k8s_api_request_timeout" not in default
    config = Config()
    exec(compile(rush_setup.hub_config(arm, ["s0"], 600, 30).replace("install(c)", ""), "hub_config", "exec"), {"c": config})
    assert config.KubeSpawner.k8s_api_request_timeout == 30 and config.KubeSpawner.k8s_api_request_retry_timeout == 300


def test_the_rush_s_hub_keeps_its_database_in_wal_mode_unless_asked_for_the_default_journal():
    arm = rush_setup.arm_setup("kernel", True, rush_setup.Shape.for_students(40), 1.0)
    assert rush_setup.WAL_LINES in rush_setup.hub_config(arm, ["s0"], 600)
    assert "sqlite_wal" not in rush_setup.hub_config(arm, ["s0"], 600, sqlite_wal=False)
