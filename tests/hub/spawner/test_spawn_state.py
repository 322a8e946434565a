"""What the hub database holds through a spawn: placement from the decision on, options restored
after a refusal, and what a restarted hub makes of a pod it did not start."""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import patch

import pytest
from helpers.spawner import KUBESPAWNER_LABELS, FakeCustomApi, make_spawner, make_tracker, manifest_of
from jupyterhub import orm

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.profiles.options import UserOptionsError
from jupyter_gpuburst.hub.spawner import GPUBurstSpawner


@pytest.fixture
def hub_db(tmp_path):
    """JupyterHub's own ORM on a file, and a second session to read what was committed."""
    url = f"sqlite:///{tmp_path / 'jupyterhub.sqlite'}"
    session = orm.new_session_factory(url)()
    user = orm.User(name="mock")
    session.add(user)
    session.commit()
    orm_spawner = orm.Spawner(user=user, name="")
    session.add(orm_spawner)
    session.commit()
    reader = orm.new_session_factory(url)

    def committed() -> orm.Spawner:
        fresh = reader()
        try:
            row = fresh.query(orm.Spawner).filter_by(id=orm_spawner.id).one()
            return SimpleNamespace(state=row.state, user_options=row.user_options)
        finally:
            fresh.close()

    yield orm_spawner, committed
    session.close()


async def test_placement_is_committed_before_the_pod_is_created(no_cluster, hub_db):
    orm_spawner, committed = hub_db
    spawner = make_spawner(make_tracker(({"origin-gpu": 0},)), {"profile": "gpu1"})
    spawner.orm_spawner = orm_spawner
    created = []

    async def create_pod(pod, timeout):
        # what a hub killed at this instant leaves in its database
        created.append((committed().state or {}).get("gpuburst"))
        return True

    with patch("kubespawner.KubeSpawner._make_create_pod_request", side_effect=create_pod):
        await manifest_of(spawner)
        await spawner._make_create_pod_request(None, 1)
    assert created and created[0]["site"] == "donor-1"
    assert created[0]["resource"] == "nvidia.com/gpu" and created[0]["count"] == 1


async def test_refused_options_are_put_back(no_cluster, hub_db):
    orm_spawner, committed = hub_db
    orm_spawner.user_options = {"profile": "gpu1"}
    spawner = make_spawner(make_tracker(), {"profile": "gpu1"})
    spawner.orm_spawner = orm_spawner
    spawner._gb_saved_options = {"profile": "gpu1"}
    # JupyterHub stores the new options before asking the spawner
    orm_spawner.user_options = {"profile": "nope"}
    spawner.user_options = {"profile": "nope"}
    with pytest.raises(UserOptionsError):
        await spawner._run_apply_user_options({"profile": "nope"})
    assert committed().user_options == {"profile": "gpu1"}
    assert spawner.user_options == {"profile": "gpu1"}
    # accepted ones become the ones to go back to
    await spawner._run_apply_user_options({"profile": "cpu"})
    assert spawner._gb_saved_options == {"profile": "cpu"}


def pod(phase: str, site: str, ready: bool = True) -> dict:
    return {
        "metadata": {
            "name": "jupyter-mock",
            "namespace": "default",
            "labels": {**KUBESPAWNER_LABELS, keys.SITE_LABEL: site, keys.CLUSTER_LABEL: site},
            "annotations": {},
        },
        "spec": {"nodeName": site},
        "status": {
            "phase": phase,
            "podIP": "10.0.0.9" if phase == "Running" else None,
            "containerStatuses": [{"name": "notebook", "ready": ready, "state": {"running": {}}}],
        },
    }


async def inherited_poll(spawner: GPUBurstSpawner, the_pod: dict) -> tuple[int | None, list[bool]]:
    stopped: list[bool] = []

    async def stop(now=False):
        stopped.append(now)

    async def no_watch(*args, **kwargs):
        return None

    reflector = SimpleNamespace(pods={f"{spawner.namespace}/{spawner.pod_name}": the_pod})
    with (
        patch.object(GPUBurstSpawner, "pod_reflector", reflector),
        patch.object(spawner, "_start_watching_pods", no_watch),
        patch.object(spawner, "stop", stop),
    ):
        return await spawner.poll(), stopped


async def test_pod_left_starting_by_a_dead_hub_is_deleted(no_cluster, hub_db):
    orm_spawner, committed = hub_db
    spawner = make_spawner(make_tracker(), {"profile": "gpu1"})
    spawner.orm_spawner = orm_spawner
    spawner.load_state({"pod_name": spawner.pod_name, "gpuburst": {"site": "donor-1", "cluster_id": "donor-1"}})
    status, stopped = await inherited_poll(spawner, pod("Pending", "donor-1"))
    assert status == 1 and stopped == [True]
    assert spawner.gpuburst_placement is None
    assert "gpuburst" not in (committed().state or {})


async def test_running_pod_is_adopted_with_the_placement_its_labels_show(no_cluster, hub_db):
    orm_spawner, committed = hub_db
    spawner = make_spawner(make_tracker(), {"profile": "gpu1"})
    spawner.orm_spawner = orm_spawner
    spawner.load_state({"gpuburst": {"site": "origin", "cluster_id": None, "resource": "nvidia.com/gpu", "count": 1, "reason": "r"}})
    status, stopped = await inherited_poll(spawner, pod("Running", "donor-1"))
    assert status is None and stopped == []
    assert spawner.gpuburst_placement["site"] == "donor-1"
    assert spawner.gpuburst_placement["resource"] == "nvidia.com/gpu"
    assert committed().state["gpuburst"]["site"] == "donor-1"
    # later polls of a server this process knows leave it alone, even while it is not ready
    status, stopped = await inherited_poll(spawner, pod("Running", "donor-1", ready=False))
    assert status is None and stopped == []


async def test_a_429_that_outlasts_the_retries_reaches_the_student_as_one_sentence(no_cluster, caplog):
    """The issue's case: a donor spawn whose NamespaceOffloading create keeps getting 429."""
    import logging

    from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader
    from jupyter_gpuburst.hub.spawner import SpawnRefused

    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, NamespaceOffloader(FakeCustomApi(status=429)))
    with pytest.raises(SpawnRefused) as info, caplog.at_level(logging.WARNING):
        await manifest_of(spawner)
    assert str(info.value) == "The cluster is busy; try again in a minute."
    assert info.value.status_code == 503
    assert "HTTP 429" in caplog.text and "HTTP response headers" not in caplog.text
    assert spawner.gpuburst_key not in tracker.placer.reservations


async def test_a_reflector_whose_first_list_failed_is_started_again(no_cluster):
    import asyncio

    class StubReflector:
        started = 0

        def __init__(self, **kwargs):
            self.first_load_future = asyncio.get_running_loop().create_future()

        async def start(self):
            StubReflector.started += 1
            self.first_load_future.set_result(None)

        async def stop(self):
            pass

    spawner = make_spawner(make_tracker(), {"profile": "gpu1"})
    key = spawner._get_reflector_key("gpuburst-test")
    dead = StubReflector()
    dead.first_load_future.set_exception(RuntimeError("API server away"))
    GPUBurstSpawner.reflectors[key] = dead
    try:
        fresh = await spawner._start_reflector("gpuburst-test", StubReflector)
        assert fresh is not dead and fresh.first_load_future.result() is None
        # a healthy one is shared, as KubeSpawner does
        assert await spawner._start_reflector("gpuburst-test", StubReflector) is fresh
        assert StubReflector.started == 1
    finally:
        GPUBurstSpawner.reflectors.pop(key, None)


async def test_a_pod_status_without_pod_ip_is_not_running_and_not_an_error(no_cluster):
    """KubeSpawner's own test raised KeyError here, failing the spawn and the cleanup after it."""
    spawner = make_spawner(make_tracker(), {"profile": "gpu1"})
    odd = pod("Running", "origin")
    del odd["status"]["podIP"]
    with pytest.raises(KeyError):
        GPUBurstSpawner.__mro__[1].is_pod_running(spawner, odd)  # KubeSpawner's
    assert spawner.is_pod_running(odd) is False
    assert spawner.is_pod_running(pod("Running", "origin")) is True
    assert spawner.is_pod_running(pod("Running", "origin", ready=False)) is False
    spawner._gb_inherited = False
    spawner.server = SimpleNamespace(url="http://10.0.0.9:8888")  # KubeSpawner's poll then checks the pod
    status, stopped = await inherited_poll(spawner, odd)
    assert status is None and stopped == []
    del odd["status"]["containerStatuses"]
    assert spawner.is_pod_running(odd) is False


async def test_a_pod_created_after_its_spawn_failed_is_deleted():
    import asyncio

    from jupyter_gpuburst.hub.spawner import state as spawnstate

    tracker = make_tracker()
    tracker.own_namespace("default")
    deleted: list[str] = []
    wanted = {"again": False}

    async def delete():
        deleted.append("jupyter-late")
        tracker._on_pod_event("DELETED", late_pod())  # as KubeSpawner's stop waits for

    def late_pod():
        p = pod("Pending", "origin")
        p["metadata"]["name"] = "jupyter-late"
        p["metadata"]["annotations"][keys.USER_ANNOTATION] = "late"
        return p

    sweep = asyncio.ensure_future(
        spawnstate.delete_if_it_appears(tracker, "default", "jupyter-late", lambda: not wanted["again"], delete, 1.5)
    )
    await asyncio.sleep(0.2)
    tracker._on_pod_event("ADDED", late_pod())
    await asyncio.sleep(0.2)
    tracker._on_pod_event("ADDED", late_pod())  # a second create that landed even later
    assert await asyncio.wait_for(sweep, 5) is True and deleted == ["jupyter-late", "jupyter-late"]
    deleted.clear()

    # the student started again meanwhile: the pod is theirs, left alone
    wanted["again"] = True
    tracker._on_pod_event("ADDED", late_pod())
    assert await spawnstate.delete_if_it_appears(tracker, "default", "jupyter-late", lambda: not wanted["again"], delete, 1) is False
    # nothing appears within the window
    tracker._on_pod_event("DELETED", late_pod())
    assert await spawnstate.delete_if_it_appears(tracker, "default", "jupyter-late", lambda: True, delete, 0.3) is False
    assert deleted == []


async def test_a_pod_whose_spawn_was_cancelled_is_deleted_when_it_shows_up(no_cluster):
    """The student pressed Cancel after the create was sent and before the watch saw the pod (the
    API server went away between the two): JupyterHub's poll finds no pod and stops nothing."""
    import asyncio

    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "gpu1"})
    created = asyncio.Event()
    stopped: list[bool] = []

    async def kubespawner_start(self):
        await manifest_of(spawner)
        created.set()
        await asyncio.Event().wait()  # waiting for the pod to run

    async def stop(now=False):
        stopped.append(now)
        tracker._on_pod_event("DELETED", cancelled_pod)

    cancelled_pod = pod("Pending", "donor-1")
    cancelled_pod["metadata"]["name"] = spawner.pod_name
    cancelled_pod["metadata"]["annotations"][keys.USER_ANNOTATION] = "mock"
    with patch("kubespawner.KubeSpawner._start", kubespawner_start), patch.object(spawner, "stop", stop):
        spawner._start_future = start = asyncio.ensure_future(spawner._start())
        await asyncio.wait_for(created.wait(), 5)
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        assert stopped == []
        tracker._on_pod_event("ADDED", cancelled_pod)  # the watch is back: the create had landed
        for _ in range(50):
            if stopped:
                break
            await asyncio.sleep(0.05)
    assert stopped == [True]


async def test_a_spawn_cancelled_during_the_first_list_leaves_the_others_waiting(no_cluster):
    """Students waiting for the shared reflector's first list (a hub just restarted): one presses
    Cancel; the others' starts go on and see the list once it arrives."""
    import asyncio

    class SlowReflector:
        def __init__(self, **kwargs):
            self.first_load_future = asyncio.get_running_loop().create_future()

        async def start(self):
            pass  # the first list is still under way

        async def stop(self):
            pass

    first, second, third = (make_spawner(make_tracker(), {"profile": "gpu1"}) for _ in range(3))
    key = first._get_reflector_key("gpuburst-slow")
    GPUBurstSpawner.reflectors.pop(key, None)
    try:
        starts = [asyncio.ensure_future(s._start_reflector("gpuburst-slow", SlowReflector)) for s in (first, second, third)]
        await asyncio.sleep(0.1)
        reflector = GPUBurstSpawner.reflectors[key]
        starts[0].cancel()  # the student who started the reflector
        starts[1].cancel()  # and one who found it loading
        await asyncio.sleep(0.1)
        assert not reflector.first_load_future.cancelled()
        reflector.first_load_future.set_result(None)
        assert await asyncio.wait_for(starts[2], 5) is reflector
        assert starts[0].cancelled() and starts[1].cancelled()
        # the next spawn finds it loaded, not failed, and shares it
        assert await first._start_reflector("gpuburst-slow", SlowReflector) is reflector
    finally:
        GPUBurstSpawner.reflectors.pop(key, None)
