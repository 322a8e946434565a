"""Kubernetes' Pod Security admission, as a namespace's labels ask for it.

A namespace's ``enforce`` level refuses a pod that breaks it; ``warn`` answers the client with a
warning and ``audit`` annotates the API server's audit event (``AUDIT_VIOLATIONS``), each
admitting the pod. GPU kernels and warm pools' pods meet ``restricted``; user servers as z2jh
renders them need ``privileged`` (docs/security.md, "Pod Security levels").
"""

from __future__ import annotations

PREFIX = "pod-security.kubernetes.io/"
PRIVILEGED, BASELINE, RESTRICTED = "privileged", "baseline", "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
MODES = ("enforce", "warn", "audit")
AUDIT_VIOLATIONS = f"{PREFIX}audit-violations"


def namespace_labels(*, enforce: str | None = None, warn: str | None = None, audit: str | None = None) -> dict[str, str]:
    """The labels that set a namespace's levels (a mode left None keeps the cluster's default)."""
    labels = {}
    for mode, level in (("enforce", enforce), ("warn", warn), ("audit", audit)):
        if level is None:
            continue
        if level not in LEVELS:
            raise ValueError(f"Pod Security level {level!r} for {mode}: not one of {', '.join(LEVELS)}")
        labels[f"{PREFIX}{mode}"] = level
    return labels


# A namespace that holds GPU kernels only (a donor's kernel namespace) refuses anything less
KERNEL_NAMESPACE_LABELS = namespace_labels(enforce=RESTRICTED, warn=RESTRICTED, audit=RESTRICTED)
