"""Bounded, jittered retries of Kubernetes API requests that honour Retry-After."""

from __future__ import annotations

import asyncio
import json
import random
import time
from email.utils import formatdate
from types import SimpleNamespace

import aiohttp
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.hub import retry
from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.store import Store


def test_backoff_grows_with_jitter_and_stays_bounded():
    policy = retry.RetryPolicy(base_s=0.1, max_delay_s=2.0, rng=random.Random(1))
    for attempt in range(1, 12):
        ceiling = min(2.0, 0.1 * 2 ** (attempt - 1))
        waits = {policy.backoff(attempt) for _ in range(50)}
        assert all(0.05 <= w <= ceiling for w in waits)
        assert len(waits) > 1  # jitter: retries of many clients do not come back in step
    assert max(policy.backoff(30) for _ in range(100)) <= 2.0


def test_retry_after_is_a_floor_up_to_the_cap():
    policy = retry.RetryPolicy(base_s=0.1, max_delay_s=0.2, max_retry_after_s=5, rng=random.Random(2))
    assert policy.delay(1, 3.0) == 3.0
    assert policy.delay(1, 60.0) == 5.0
    assert policy.delay(1, None) <= 0.2


API_ADDRESS = SimpleNamespace(host="127.0.0.1", port=6443, ssl=True)


async def test_the_default_policy_rides_out_a_ten_second_outage_and_gives_up_at_its_deadline():
    """An API server away 10 s costs a request 10 s, never the request; away for good, the
    request fails at the deadline, not before (with eight tries it gave up after about 10 s)."""
    clock = [0.0]

    async def advancing_sleep(seconds):
        clock[0] += seconds

    def away_until(seconds):
        async def call():
            if clock[0] < seconds:
                raise aiohttp.ClientConnectorError(API_ADDRESS, OSError(111, "Connection refused"))
            return "ok"

        return call

    for seed in range(200):  # the jitter's draws
        policy = retry.RetryPolicy(rng=random.Random(seed))
        clock[0] = 0.0
        result = await retry.call_with_retry(
            away_until(10.0), what="GET /pods", policy=policy, sleep=advancing_sleep, clock=lambda: clock[0]
        )
        assert result == "ok" and 10.0 <= clock[0] <= 10.0 + policy.max_delay_s, seed

        clock[0] = 0.0
        with pytest.raises(aiohttp.ClientConnectorError):
            await retry.call_with_retry(away_until(1e9), what="GET /pods", policy=policy, sleep=advancing_sleep, clock=lambda: clock[0])
        assert policy.deadline_s - policy.max_delay_s <= clock[0] <= policy.deadline_s, seed


def test_retry_after_header_forms():
    assert retry.parse_retry_after("7") == 7.0
    now = time.time()
    assert retry.parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30, abs=1)
    assert retry.parse_retry_after(formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert retry.parse_retry_after("soon") is None and retry.parse_retry_after(None) is None


def _api_error(status, headers=None, body=None):
    exc = ApiException(status=status, reason="x")
    exc.headers = headers
    exc.body = body
    return exc


def test_what_is_transient():
    for status in (429, 500, 502, 503, 504):
        assert retry.is_transient(_api_error(status), "POST")
    for status in (400, 403, 404, 409, 410, 422):
        assert not retry.is_transient(_api_error(status), "GET")
    assert retry.is_transient(aiohttp.ServerDisconnectedError(), "POST")
    assert retry.is_transient(asyncio.TimeoutError(), "GET")
    # a write that timed out may have happened: its caller decides
    assert not retry.is_transient(asyncio.TimeoutError(), "POST")
    assert not retry.is_transient(ValueError("bug"), "GET")


def test_a_pod_in_a_namespace_whose_default_service_account_is_not_made_yet_is_retried():
    """kube-apiserver's ServiceAccount admission, a moment after the namespace was made (seen on
    the real control plane): retried; a missing ServiceAccount a profile names is final."""

    def refused(namespace: str, account: str) -> ApiException:
        message = (
            f'pods "gpuburst-kernel-0123456789ab-1" is forbidden: error looking up service account '
            f'{namespace}/{account}: serviceaccount "{account}" not found'
        )
        return _api_error(403, body=json.dumps({"kind": "Status", "code": 403, "reason": "Forbidden", "message": message}))

    assert retry.is_transient(refused("jhub-users-kernels-a-donor-with-a-long-cluster-id", "default"), "POST")
    assert not retry.is_transient(refused("jhub-users", "notebook-runner"), "POST")
    rbac = 'pods is forbidden: User "system:serviceaccount:jhub:hub" cannot create resource "pods" in the namespace "x"'
    assert not retry.is_transient(_api_error(403, body=json.dumps({"message": rbac})), "POST")


def test_retry_after_from_header_or_status_details():
    assert retry.retry_after_of(_api_error(429, {"Retry-After": "4"})) == 4.0
    body = b'{"kind":"Status","code":429,"details":{"retryAfterSeconds":2}}'
    assert retry.retry_after_of(_api_error(429, {}, body)) == 2.0


async def test_call_with_retry_honours_retry_after_and_gives_up_at_the_deadline():
    slept: list[float] = []
    calls = 0

    async def fake_sleep(seconds):
        slept.append(seconds)

    async def flaky():
        nonlocal calls
        calls += 1
        if calls < 3:
            raise _api_error(429, {"Retry-After": "2"})
        return "ok"

    policy = retry.RetryPolicy(base_s=0.01, max_delay_s=0.02, deadline_s=10)
    assert await retry.call_with_retry(flaky, what="GET /x", policy=policy, sleep=fake_sleep) == "ok"
    assert slept == [2.0, 2.0]

    async def always_busy():
        raise _api_error(503, {"Retry-After": "4"})

    clock = [0.0]

    async def advancing_sleep(seconds):
        clock[0] += seconds

    with pytest.raises(ApiException) as info:
        await retry.call_with_retry(always_busy, what="GET /y", policy=policy, sleep=advancing_sleep, clock=lambda: clock[0])
    assert info.value.status == 503
    assert clock[0] <= 10  # never waits past the deadline

    async def not_found():
        raise _api_error(404)

    with pytest.raises(ApiException):
        await retry.call_with_retry(not_found, what="GET /z", policy=policy, sleep=fake_sleep)


def test_describe_never_dumps_headers_or_bodies():
    exc = _api_error(429, {"Authorization": "Bearer secret-token"}, b'{"message":"Too many requests"}')
    text = retry.describe(exc)
    assert "429" in text and "Too many requests" in text
    assert "secret-token" not in text and "HTTP response headers" not in text


@pytest.fixture
async def flaky_api(tmp_path):
    store = Store()
    server = ApiServer(store, faults=Faults(error_rate_429=0.25, error_rate_500=0.25, seed=13))
    await server.start()
    path = write_kubeconfig(tmp_path / "kubeconfig", {"sim": server.url}, "sim")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    yield store, server, configuration
    await server.stop()


async def test_installed_client_survives_half_the_requests_failing(flaky_api):
    store, server, configuration = flaky_api
    async with client.ApiClient(configuration) as bare:
        failures = 0
        for _ in range(20):
            try:
                await client.CoreV1Api(bare).list_namespace()
            except ApiException as exc:
                assert exc.status in (429, 500)
                failures += 1
        assert failures > 0  # the faults are real: without retries, requests fail

    policy = retry.RetryPolicy(attempts=30, base_s=0.01, max_delay_s=0.05, deadline_s=30, max_retry_after_s=0.05)
    async with client.ApiClient(configuration) as api_client:
        retry.install(api_client, policy)
        assert retry.installed(api_client) is policy
        retry.install(api_client)  # idempotent: keeps the first policy
        assert retry.installed(api_client) is policy
        core = client.CoreV1Api(api_client)
        for i in range(20):
            await core.list_namespace()
            # raw responses (reflectors, watches) are retried too
            raw = await core.list_namespace(_preload_content=False)
            assert raw.status == 200
            body = {"metadata": {"name": f"pod-{i}"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
            await core.create_namespaced_pod("default", body)
    assert len(store.list("pods")[0]) == 20  # every create landed once


def test_public_failure_is_one_sentence_per_kind():
    busy = retry.public_failure(_api_error(429, {"Retry-After": "1"}, b"{}"))
    assert busy[:2] == (503, "The cluster is busy; try again in a minute.")
    assert retry.public_failure(aiohttp.ServerDisconnectedError())[1] == retry.BUSY_MESSAGE
    assert retry.public_failure(asyncio.TimeoutError())[1] == retry.BUSY_MESSAGE
    assert retry.public_failure(_api_error(422))[:2] == (500, retry.ADMIN_MESSAGE)
    assert retry.public_failure(ValueError("a bug")) is None
