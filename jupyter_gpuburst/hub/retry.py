"""Bounded retries of Kubernetes API requests: 429, 5xx, timeouts and dropped connections.

A busy API server answers 429 (API priority and fairness) or 5xx for a moment, and a rolling
restart drops connections; one such answer must not fail a student's spawn. The retry sits in
the REST layer of the kubernetes_asyncio ``ApiClient`` (:func:`install`), not around individual
calls, because that one place covers every request the hub makes through that client:
KubeSpawner's pod and PVC creates, its reflectors' lists and watches, its deletes, and our own
NamespaceOffloading and capacity watches. Wrapping KubeSpawner's methods one by one would miss
the ones it adds next release; replacing the class method would change every client in the
process, including ones this product does not own. ``install`` wraps one client instance, and
KubeSpawner's ``shared_client`` hands the same instance to the spawner and its reflectors.

What is retried, and why it is safe:

* 429 and 503 mean the request was not processed (kube-apiserver sends ``Retry-After``); any
  verb is retried, after the server's ``Retry-After`` when it gives one.
* 500, 502, 504 and dropped connections are retried for every verb too. A create that did go
  through before the error comes back as 409 AlreadyExists on the retry, which every caller of
  creates in this product and in KubeSpawner already treats (existing NamespaceOffloading kept;
  KubeSpawner replaces a pod of the same name, so one server never has two pods).
* A client-side timeout is retried for reads only: a write that timed out may have happened,
  and KubeSpawner retries its own writes after a timeout with the same 409 handling.
* 403 while the API server's ``/readyz`` says it is not ready: a kube-apiserver just started
  refuses what RBAC allows until its authorizer has read the roles (``readiness``). Nothing was
  processed, so any verb is retried; a 403 from a ready server is final at once.
* 403 ``error looking up service account NS/default: serviceaccount "default" not found``: a pod
  created in a namespace made a moment before, whose ``default`` ServiceAccount
  kube-controller-manager has not made yet (the ServiceAccount admission refuses the pod; the
  real control plane showed it, a pod created just after its namespace). Nothing was stored.
  Only ``default``, which the controller makes in every namespace: a missing ServiceAccount a
  profile names is a mistake to report at once.

The delay is exponential with full jitter (so 200 spawns do not come back in step), never below
the server's ``Retry-After``, and the whole retry has a deadline: after it the last error is
raised, for the caller to turn into a sentence for the student. Time bounds the retry, not the
count of tries: an API server away for 10 s (a control-plane restart) must cost the requests
made meanwhile 10 s, not fail them. Eight tries with full jitter gave up after about 10 s, so a
10 s outage failed every spawn waiting on a reflector's first list; the cap on tries is only a
guard against a policy whose delays are tiny.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.hub.readiness import PATH as READYZ_PATH
from jupyter_gpuburst.hub.readiness import Readiness

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# answers that say the request was not processed: safe to repeat for any verb
NOT_PROCESSED = frozenset({429, 503})
# the ServiceAccount admission's refusal while a new namespace has no default ServiceAccount yet
_DEFAULT_SERVICE_ACCOUNT_NOT_YET = re.compile(r'error looking up service account [^/\s]+/default: serviceaccount "default" not found')
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_MARK = "_gpuburst_retry_policy"


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry one request."""

    attempts: int = 40
    base_s: float = 0.2
    max_delay_s: float = 8.0
    deadline_s: float = 45.0
    # the server's Retry-After is honoured up to this many seconds
    max_retry_after_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.base_s <= 0 or self.max_delay_s < self.base_s:
            raise ValueError("RetryPolicy needs 0 < base_s <= max_delay_s")
        if self.deadline_s <= 0:
            raise ValueError(f"RetryPolicy.deadline_s must be > 0, got {self.deadline_s}")

    def backoff(self, attempt: int) -> float:
        """Full-jitter exponential delay before retry number ``attempt`` (1-based)."""
        ceiling = min(self.max_delay_s, self.base_s * (2 ** (attempt - 1)))
        return self.rng.uniform(self.base_s / 2, ceiling)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """The wait before retry ``attempt``: the backoff, but never less than Retry-After."""
        wait = self.backoff(attempt)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after_s))
        return wait


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: delta-seconds or an HTTP date (RFC 9110)."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _status_body(body: Any) -> Mapping[str, Any]:
    """A Kubernetes Status body as a mapping (empty when it is not one)."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return {}
    return body if isinstance(body, Mapping) else {}


def _status_retry_after(body: Any) -> float | None:
    """``details.retryAfterSeconds`` of a Kubernetes Status body, when the header is absent."""
    seconds = (_status_body(body).get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else None


def _header(headers: Any, name: str) -> str | None:
    if not headers:
        return None
    try:
        return headers.get(name)
    except AttributeError:
        return None


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a kubernetes client error, None for anything else."""
    if isinstance(exc, (ApiException, _RetryableResponse)) and isinstance(exc.status, int):
        return exc.status
    return None


def is_transient(exc: BaseException, method: str = "GET") -> bool:
    """Whether ``exc`` from a ``method`` request is worth retrying (see the module doc)."""
    status = api_status(exc)
    if status == 403:
        message = str(_status_body(getattr(exc, "body", None)).get("message") or "")
        return _DEFAULT_SERVICE_ACCOUNT_NOT_YET.search(message) is not None
    if status is not None:
        return status in RETRY_STATUSES
    if isinstance(exc, aiohttp.ClientConnectorError):
        return True  # never reached the server
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError)):
        return True
    if isinstance(exc, asyncio.TimeoutError):
        return method.upper() in READ_METHODS
    return False


def retry_after_of(exc: BaseException) -> float | None:
    header = _header(getattr(exc, "headers", None), "Retry-After")
    seconds = parse_retry_after(header)
    if seconds is None:
        seconds = _status_retry_after(getattr(exc, "body", None))
    return seconds


def describe(exc: BaseException, not_ready: str | None = None) -> str:
    """One log line about an API error: status and reason, never headers or bodies; with
    ``not_ready``, why a 403 was not taken as final."""
    status = api_status(exc)
    if status is not None:
        reason = str(getattr(exc, "reason", "") or "").splitlines()[0][:120] if getattr(exc, "reason", None) else ""
        message = _status_message(getattr(exc, "body", None))
        line = f"HTTP {status} {reason}{': ' + message if message else ''}".strip()
        return f"{line} (the API server is not ready: {not_ready})" if not_ready else line
    return f"{type(exc).__name__}: {str(exc)[:160]}" if str(exc) else type(exc).__name__


def _status_message(body: Any) -> str:
    return str(_status_body(body).get("message") or "")[:160]


def next_wait(
    policy: RetryPolicy, attempt: int, exc: BaseException, method: str, remaining: float, transient: bool | None = None
) -> float | None:
    """Seconds to wait before retrying after ``exc`` on try ``attempt``; None to give up.

    ``transient`` overrides ``is_transient`` where the caller knows more (a 403 of a server
    that is not ready)."""
    if not (is_transient(exc, method) if transient is None else transient) or attempt >= policy.attempts:
        return None
    wait = policy.delay(attempt, retry_after_of(exc))
    return wait if wait <= remaining else None


async def call_with_retry(
    fn: Callable[[], Awaitable[T]],
    *,
    what: str,
    method: str = "GET",
    policy: RetryPolicy | None = None,
    logger: logging.Logger | None = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Await ``fn()`` until it succeeds, retrying transient errors within ``policy``'s bounds."""
    policy = policy or RetryPolicy()
    logger = logger or log
    deadline = clock() + policy.deadline_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return await fn()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            wait = next_wait(policy, attempt, exc, method, deadline - clock())
            if wait is None:
                if is_transient(exc, method):
                    logger.warning("Giving up on %s after %d attempt(s): %s", what, attempt, describe(exc))
                raise
            logger.info("Retrying %s in %.2fs (attempt %d): %s", what, wait, attempt, describe(exc))
            await sleep(wait)


class _RetryableResponse(Exception):
    """A raw (``_preload_content=False``) response with a retryable status."""

    def __init__(self, response: Any) -> None:
        super().__init__(f"HTTP {response.status} {response.reason}")
        self.response = response
        self.status = response.status
        self.reason = response.reason or ""
        self.headers = response.headers
        self.body = None


def install(api_client: Any, policy: RetryPolicy | None = None, logger: logging.Logger | None = None) -> Any:
    """Make every request of a kubernetes_asyncio ``ApiClient`` retry transient failures.

    Idempotent: a client already wrapped keeps its first policy. Returns ``api_client``.
    """
    rest = api_client.rest_client
    if getattr(rest, _MARK, None) is not None:
        return api_client
    policy = policy or RetryPolicy()
    logger = logger or log
    original = rest.request
    readiness = Readiness(api_client)

    async def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        raw = not kwargs.get("_preload_content", True)
        headers = kwargs.get("headers")
        path = "/" + url.split("?", 1)[0].split("://", 1)[-1].partition("/")[2]
        if path == READYZ_PATH:
            return await original(method, url, *args, **kwargs)  # the question a 403 asks: answered as it comes
        what = f"{method.upper()} {path}"
        deadline = time.monotonic() + policy.deadline_s
        attempt = 0
        while True:
            attempt += 1
            # the REST layer adds a Content-Type header in place: give each try a fresh copy
            if headers is not None:
                kwargs["headers"] = dict(headers)
            try:
                response = await original(method, url, *args, **kwargs)
                if raw and getattr(response, "status", 200) in (*RETRY_STATUSES, 403):
                    raise _RetryableResponse(response)
                return response
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                not_ready = await readiness.explains(exc)
                wait = next_wait(policy, attempt, exc, method, deadline - time.monotonic(), True if not_ready else None)
                if isinstance(exc, _RetryableResponse):
                    if wait is None:
                        # final, or out of tries: the caller reads the error status itself, as without us
                        if is_transient(exc, method) or not_ready:
                            logger.warning("Giving up on %s after %d attempt(s): %s", what, attempt, describe(exc, not_ready))
                        return exc.response
                    exc.response.release()
                elif wait is None:
                    if is_transient(exc, method) or not_ready:
                        logger.warning("Giving up on %s after %d attempt(s): %s", what, attempt, describe(exc, not_ready))
                    raise
                logger.info("Retrying %s in %.2fs (attempt %d): %s", what, wait, attempt, describe(exc, not_ready))
                await asyncio.sleep(wait)

    setattr(rest, _MARK, policy)
    rest.request = request
    return api_client


def installed(api_client: Any) -> RetryPolicy | None:
    """The policy ``install`` put on ``api_client``, or None."""
    return getattr(api_client.rest_client, _MARK, None)


# What a student reads when the API server stays unavailable past the retries: one sentence,
# never the client's dump of status, headers and body (those go to the hub log, via describe()).
BUSY_MESSAGE = "The cluster is busy; try again in a minute."


def is_api_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the API server failing (an error status or no answer at all)."""
    if api_status(exc) is not None:
        return True
    return isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError))


# What a student reads when the server could not be created for a reason an admin must fix.
ADMIN_MESSAGE = "The server could not be created; an administrator has been told."


def public_failure(exc: BaseException) -> tuple[int, str, int] | None:
    """(HTTP status, the sentence for the student, log level for the detail) for an API failure.

    None when ``exc`` is not the API server failing: it is then a bug or a refusal of its own.
    """
    if not is_api_failure(exc):
        return None
    if api_status(exc) in (None, *RETRY_STATUSES):
        return 503, BUSY_MESSAGE, logging.WARNING
    return 500, ADMIN_MESSAGE, logging.ERROR
