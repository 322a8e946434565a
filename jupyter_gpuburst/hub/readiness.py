"""Whether a 403 is an API server still starting: one question to its ``/readyz``.

A kube-apiserver serves requests before its RBAC authorizer has read the Roles and bindings.
Restarted under the hub (kube-apiserver 1.35, idle 2-core machine), it answered the hub's
ServiceAccount ``403 pods is forbidden: User "system:serviceaccount:jhub:hub" cannot list
resource "pods" ...`` for 2 s, then allowed it again; under load the window is longer, and the
message may end ``RBAC: [role.rbac.authorization.k8s.io "gpuburst-hub" not found]``. Such a 403
reads like a gap in the hub's grant, so the 403 alone cannot tell. ``/readyz`` can: it was
never 200 during the window. It answered 403 itself first (the binding that lets anyone read it,
``system:public-info-viewer``, not loaded yet), then 500 with
``[-]poststarthook/rbac/bootstrap-roles failed`` until a second after the 403s had stopped.

So a 403 is final only while ``/readyz`` answers 200; any other answer, or none, means the
server is not ready, and the request is retried like one made while it was unreachable.
The question goes through the refused request's own kubernetes_asyncio ``ApiClient`` (its TLS,
credentials and token refresh). 403s of one client share a question: those that come while it
is asked wait for its answer, and a "not ready" holds for ``NOT_READY_HOLDS_S``, so two hundred
spawns retrying through the window ask about once a second, not at each of their retries. A
"ready" is never reused: the next 403 asks again, since the server may have restarted since.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

PATH = "/readyz"
# a server that does not answer this fast is not ready for the hub's requests either
TIMEOUT_S = 5.0
# a server that was not ready a moment ago is taken as still not ready: at worst a genuine 403
# in that moment is retried once more before it is asked about again
NOT_READY_HOLDS_S = 1.0
FORBIDDEN = 403


class Readiness:
    """Asks one client's API server whether it is ready, one question at a time."""

    def __init__(self, api_client: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._api_client = api_client
        self._clock = clock
        self._asking: asyncio.Future[str | None] | None = None
        self._answered_at = 0.0

    async def not_ready(self) -> str | None:
        """None when ``/readyz`` answers 200; else what it answered, for the log."""
        if not self._reusable():
            self._asking = asyncio.ensure_future(self._ask())
        # shielded: one caller cancelled (KubeSpawner's own request timeout) ends no one else's wait
        return await asyncio.shield(self._asking)

    def _reusable(self) -> bool:
        """Whether the last question still answers: still being asked, or a recent "not ready"."""
        asking = self._asking
        if asking is None:
            return False
        if not asking.done():
            return True
        return asking.result() is not None and self._clock() - self._answered_at < NOT_READY_HOLDS_S

    async def _ask(self) -> str | None:
        try:
            await self._api_client.call_api(PATH, "GET", auth_settings=["BearerToken"], _request_timeout=TIMEOUT_S)
        except ApiException as exc:
            return f"{PATH} answered {exc.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
            return f"{PATH} did not answer ({type(exc).__name__})"
        except Exception as exc:  # noqa: BLE001 - the answer is "not known to be ready", never a new error
            return f"{PATH} could not be asked ({type(exc).__name__})"
        finally:
            self._answered_at = self._clock()
        return None

    async def explains(self, exc: BaseException) -> str | None:
        """Why the 403 ``exc`` is not final (the server is not ready), or None: ``exc`` is not a
        403, or the server is ready and the refusal stands."""
        if getattr(exc, "status", None) != FORBIDDEN:
            return None
        return await self.not_ready()
