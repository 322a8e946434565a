"""Messages on the spawn page: our own, and which of KubeSpawner's pod events a student sees.

A message has a *kind*. Kinds in ``HEADLINE_KINDS`` (the decision and what changes it) are
pinned above the progress bar by ``templates/spawn_pending.html`` until the server is ready;
the others are shown as they come, like KubeSpawner's event lines. Other parts of the product
add their own kinds through the spawner's ``_gb_message(text, kind)``.

Container-runtime events (creating, starting a container, an image already on the node) say
nothing a student can act on, and would replace the decision as the page's message, so they are
left out. An image pull is shown: on a node that never ran the image it is most of the wait
(minutes for a CUDA image), and "Pulling image ..." says why.
"""

from __future__ import annotations

import html
import re
from typing import Any

HEADLINE_KINDS = frozenset({"decision", "redirect", "queue"})
# Kubelet event reasons about the container runtime, not about where or whether the server runs.
RUNTIME_NOISE = frozenset({"Created", "Started", "Killing", "SandboxChanged", "AddedInterface"})
PULL_DONE = "Successfully pulled image"  # a Pulled event after a real pull (not "already present")
# The kubelet's wording (pkg/kubelet/images/image_manager.go): 'Successfully pulled image "x" in
# 1.2s (1.2s including waiting). Image size: 123 bytes.' The byte count and the waiting clause
# mean little to a student.
_PULLED = re.compile(
    r'^Successfully pulled image "(?P<image>[^"]*)" in (?P<took>\S+?)(?: \([^)]*\))?\.(?: Image size: (?P<size>\d+) bytes\.)?$'
)


def message(text: str, kind: str = "info", progress: int | None = None) -> dict[str, Any]:
    """A progress event for JupyterHub's spawn page; ``html_message`` carries the kind."""
    headline = "true" if kind in HEADLINE_KINDS else "false"
    event: dict[str, Any] = {
        "message": text,
        "html_message": (
            f'<span class="gpuburst-message" data-kind="{html.escape(kind, quote=True)}" '
            f'data-headline="{headline}">{html.escape(text)}</span>'
        ),
    }
    if progress is not None:
        event["progress"] = progress
    return event


def is_runtime_noise(event: dict[str, Any]) -> bool:
    raw = event.get("raw_event") or {}
    if raw.get("reason") == "Pulled":
        return not (raw.get("message") or "").startswith(PULL_DONE)
    return raw.get("reason") in RUNTIME_NOISE


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def pulled(text: str) -> str:
    """A kubelet's Pulled message in a student's words; any other wording is kept as it is."""
    match = _PULLED.match(text.strip())
    if not match:
        return text
    size = f" ({_size(int(match['size']))})" if match["size"] else ""
    return f'Pulled image "{match["image"]}"{size} in {match["took"]}.'


def pod_event(event: dict[str, Any]) -> dict[str, Any]:
    """KubeSpawner's event line without the timestamp, with scheduling trouble said plainly."""
    raw = event.get("raw_event") or {}
    if not raw:
        return event
    text = raw.get("message") or ""
    if raw.get("reason") == "FailedScheduling":
        text = f"Not scheduled yet: {text}"
    elif raw.get("reason") == "Pulled":
        text = pulled(text)
    elif raw.get("type") == "Warning":
        text = f"Warning: {text}"
    out = {**event, **message(text, kind=f"pod-{(raw.get('reason') or 'event').lower()}")}
    return out
