"""Every write a client made, sent again to a real API server under strict field validation.

The audit log holds the body of each create, update and patch (``controlplane.AUDIT_POLICY``);
``replay`` sends each as a dry run (``dryRun=All``) with ``fieldValidation=Strict``, so an
unknown or duplicated field is an error instead of the warning the API server's default
(``Warn``) gives and every client ignores. Nothing is stored but what a patch needs to land on:
its object, made from the last body created under that name (pods bound to no real node, owners
dropped, so that no kubelet runs them and no garbage collector takes them). A Secret's body is
not in the log; ``check`` sends a body built here the same way.
"""

from __future__ import annotations

import copy
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

STRICT = {"dryRun": "All", "fieldValidation": "Strict"}
SERVICE_ACCOUNT_WAIT_S = 60.0  # kube-controller-manager makes it within a second or two, unloaded
NO_NODE = "gpuburst-replay-no-node"  # binds a patch's target pod where nothing runs it
_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "deletionTimestamp")
_STRATEGIC_GROUPS = {"", "apps", "batch", "policy", "autoscaling"}


@dataclass
class Finding:
    """A write the API server refused or warned about when sent again strictly."""

    what: str
    code: int
    message: str
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        said = "; ".join([self.message, *self.warnings] if self.message else self.warnings)
        return f"{self.what}: {self.code} {said}"


def _patch_type(group: str, body: Any) -> str:
    if isinstance(body, list):
        return "application/json-patch+json"
    # as kubernetes' Python clients send a dict: strategic for built-in types, merge for the rest
    if group in _STRATEGIC_GROUPS or group.endswith(".k8s.io"):
        return "application/strategic-merge-patch+json"
    return "application/merge-patch+json"


def _what(event: dict[str, Any]) -> str:
    ref = event["objectRef"]
    where = f"{ref.get('namespace')}/" if ref.get("namespace") else ""
    name = ref.get("name") or (event["requestObject"].get("metadata") or {}).get("generateName", "") + "*"
    return f"{event['verb']} {ref['resource']} {where}{name}"


def _collection(path: str, ref: dict[str, Any]) -> str:
    """The collection a create or an update's object belongs to (an update's path names it)."""
    if ref.get("name") and path.rstrip("/").endswith(f"/{ref['name']}"):
        return path.rstrip("/")[: -len(ref["name"]) - 1]
    return path


def _as_new(body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    meta = body.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    body.pop("status", None)
    return body


class Replayer:
    """Sends writes to the API server at ``url`` as the admin (``credentials``: CA, certificate, key)."""

    def __init__(self, url: str, credentials: tuple[str, str, str]) -> None:
        ca, cert, key = credentials
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        self.url = url
        self.http = httpx.Client(verify=context, timeout=30.0)
        self._namespaces: set[str] = set()
        self._created: dict[str, dict[str, Any]] = {}  # item path -> the body last created there
        self.sent = 0

    def close(self) -> None:
        self.http.close()

    def _ensure_namespace(self, namespace: str | None) -> None:
        if not namespace or namespace in self._namespaces:
            return
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        response = self.http.post(f"{self.url}/api/v1/namespaces", json=body)
        if response.status_code not in (201, 409):
            raise RuntimeError(f"namespace {namespace} for the replay: {response.status_code} {response.text[:200]}")
        # the ServiceAccount admission refuses a pod until the controllers made the namespace's default one
        deadline = time.monotonic() + SERVICE_ACCOUNT_WAIT_S
        while self.http.get(f"{self.url}/api/v1/namespaces/{namespace}/serviceaccounts/default").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no default ServiceAccount in {namespace} after {SERVICE_ACCOUNT_WAIT_S:.0f} s")
            time.sleep(0.2)
        self._namespaces.add(namespace)

    def _send(self, method: str, path: str, body: Any, content_type: str = "application/json") -> httpx.Response:
        self.sent += 1
        return self.http.request(method, f"{self.url}{path}", params=STRICT, json=body, headers={"Content-Type": content_type})

    def _target(self, item: str, ref: dict[str, Any]) -> None:
        """Make the object a patch at ``item`` applies to, if the replay has none there yet."""
        if self.http.get(f"{self.url}{item}").status_code == 200:
            return
        created = self._created.get(item)
        if created is None:
            raise LookupError("no create of its object in the log to patch")
        body = _as_new(created)
        body["metadata"]["name"] = ref["name"]
        body["metadata"].pop("generateName", None)
        body["metadata"].pop("ownerReferences", None)
        if ref["resource"] == "pods" and not ref.get("apiGroup"):
            body["spec"]["nodeName"] = NO_NODE
        response = self.http.post(f"{self.url}{_collection(item, ref)}", json=body)
        if response.status_code != 201:
            raise LookupError(f"its object could not be made: {response.status_code} {response.text[:200]}")

    def _one(self, event: dict[str, Any]) -> httpx.Response:
        ref, body = event["objectRef"], event["requestObject"]
        path = urlsplit(event["requestURI"]).path
        self._ensure_namespace(ref.get("namespace"))
        if event["verb"] == "patch":
            self._target(path, ref)
            return self._send("PATCH", path, body, _patch_type(ref.get("apiGroup", ""), body))
        new = _as_new(body)
        collection = _collection(path, ref)
        response = self._send("POST", collection, new)
        if response.status_code == 409:  # this replay made one by that name: the same body, named anew
            new["metadata"]["name"] = f"{new['metadata'].get('name', 'replay')[:50]}-replay{self.sent}"
            response = self._send("POST", collection, new)
        name = ref.get("name") or (body.get("metadata") or {}).get("name")
        if name:
            self._created[f"{collection}/{name}"] = body
        return response

    def replay(self, events: Iterable[dict[str, Any]]) -> list[Finding]:
        """Send each write again, strictly; what the API server refused or warned about."""
        findings = []
        for event in events:
            if event["objectRef"].get("subresource"):
                findings.append(Finding(_what(event), 0, "a subresource's write: not replayed"))
                continue
            try:
                response = self._one(event)
            except LookupError as exc:
                findings.append(Finding(_what(event), 0, f"not replayed: {exc}"))
                continue
            findings.extend(_judge(_what(event), response))
        return findings

    def check(self, path: str, body: dict[str, Any]) -> list[Finding]:
        """A body built here (one the log does not hold), created strictly as a dry run at ``path``."""
        self._ensure_namespace((body.get("metadata") or {}).get("namespace"))
        return _judge(f"create {path}", self._send("POST", path, body))


def _judge(what: str, response: httpx.Response) -> list[Finding]:
    warnings = response.headers.get_list("Warning")
    if response.status_code < 300 and not warnings:
        return []
    message = "" if response.status_code < 300 else response.json().get("message", response.text[:300])
    return [Finding(what, response.status_code, message, warnings)]
