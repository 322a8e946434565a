"""Pod Security admission's ``enforce`` mode, as kube-apiserver 1.35 applies it to a pod's create.

A namespace labelled ``pod-security.kubernetes.io/enforce`` ``baseline`` or ``restricted`` refuses
a pod that breaks the level with 403 and the API server's own words (check names, details and
their order: the baseline checks, then the restricted ones, each sorted by id, as
k8s.io/pod-security-admission orders them). Unlabelled, the level is ``privileged``: anything goes.

Modelled: the checks the hub's pods and z2jh's servers meet (host namespaces and paths, host
ports, privileged, added capabilities, seccomp, privilege escalation, non-root, uid 0, volume
types). Not modelled: AppArmor, SELinux, procMount, sysctls, host probes, Windows, user
namespaces, and the ``warn`` and ``audit`` modes (the emulator has no audit log, and sends no
warnings).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jupyter_gpuburst.core import podsecurity
from jupyter_gpuburst.sim.errors import forbidden

Pod = dict[str, Any]
Check = Callable[[Pod], "str | None"]  # the detail of a broken check, or None
BASELINE_CAPABILITIES = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID SETPCAP SETUID SYS_CHROOT".split()
)
ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim", "projected", "secret")


def _containers(spec: Pod) -> list[Pod]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []), *(spec.get("ephemeralContainers") or [])]


def _context(container: Pod) -> Pod:
    return container.get("securityContext") or {}


def _quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _named(kind: str, names: list[str]) -> str:
    return f"{_plural(kind, kind + 's', len(names))} {_quote(names)}"


def _capabilities_baseline(spec: Pod) -> str | None:
    bad, added = [], set()
    for c in _containers(spec):
        extra = [cap for cap in (_context(c).get("capabilities") or {}).get("add") or [] if cap not in BASELINE_CAPABILITIES]
        if extra:
            bad.append(c["name"])
            added.update(extra)
    return f"{_named('container', bad)} must not include {_quote(sorted(added))} in securityContext.capabilities.add" if bad else None


def _host_namespaces(spec: Pod) -> str | None:
    used = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return ", ".join(used) or None


def _host_path(spec: Pod) -> str | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    return _named("volume", bad) if bad else None


def _host_ports(spec: Pod) -> str | None:
    bad, ports = [], []
    for c in _containers(spec):
        used = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(c["name"])
            ports += used
    if not bad:
        return None
    ports = sorted(set(ports))
    return (
        f"{_named('container', bad)} {_plural('uses', 'use', len(bad))} {_plural('hostPort', 'hostPorts', len(ports))} {', '.join(ports)}"
    )


def _privileged(spec: Pod) -> str | None:
    bad = [c["name"] for c in _containers(spec) if _context(c).get("privileged")]
    return f"{_named('container', bad)} must not set securityContext.privileged=true" if bad else None


def _seccomp_types(spec: Pod) -> tuple[str | None, list[tuple[str, str | None]]]:
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    return pod, [(c["name"], (_context(c).get("seccompProfile") or {}).get("type")) for c in _containers(spec)]


def _seccomp_baseline(spec: Pod) -> str | None:
    pod, containers = _seccomp_types(spec)
    setters = ["pod"] if pod == "Unconfined" else []
    bad = [name for name, kind in containers if kind == "Unconfined"]
    if bad:
        setters.append(_named("container", bad))
    return f'{" and ".join(setters)} must not set securityContext.seccompProfile.type to "Unconfined"' if setters else None


def _allow_privilege_escalation(spec: Pod) -> str | None:
    bad = [c["name"] for c in _containers(spec) if _context(c).get("allowPrivilegeEscalation") is not False]
    return f"{_named('container', bad)} must set securityContext.allowPrivilegeEscalation=false" if bad else None


def _capabilities_restricted(spec: Pod) -> str | None:
    missing, adding, added = [], [], set()
    for c in _containers(spec):
        caps = _context(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            missing.append(c["name"])
        extra = [cap for cap in caps.get("add") or [] if cap != "NET_BIND_SERVICE"]
        if extra:
            adding.append(c["name"])
            added.update(extra)
    details = []
    if missing:
        details.append(f'{_named("container", missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_named('container', adding)} must not include {_quote(sorted(added))} in securityContext.capabilities.add")
    return "; ".join(details) or None


def _restricted_volumes(spec: Pod) -> str | None:
    bad, kinds = [], set()
    for volume in spec.get("volumes") or []:
        if not any(kind in volume for kind in ALLOWED_VOLUMES):
            bad.append(volume["name"])
            kinds.update(k for k in volume if k != "name")
    if not bad:
        return None
    types = _plural("restricted volume type", "restricted volume types", len(kinds))
    return f"{_named('volume', bad)} {_plural('uses', 'use', len(bad))} {types} {_quote(sorted(kinds))}"


def _explicit_or_implicit(spec: Pod, key: str, good: Callable[[Any], bool], must_not: str, must: str) -> str | None:
    """The shape runAsNonRoot's and seccompProfile's checks share: a value set badly on the pod
    or a container, else a container that inherits none."""
    pod_value = (spec.get("securityContext") or {}).get(key)
    setters = ["pod"] if pod_value is not None and not good(pod_value) else []
    explicit = [c["name"] for c in _containers(spec) if _context(c).get(key) is not None and not good(_context(c)[key])]
    implicit = [c["name"] for c in _containers(spec) if _context(c).get(key) is None and not (pod_value is not None and good(pod_value))]
    if explicit:
        setters.append(_named("container", explicit))
    if setters:
        return f"{' and '.join(setters)} {must_not}"
    return f"pod or {_named('container', implicit)} {must}" if implicit else None


def _run_as_non_root(spec: Pod) -> str | None:
    return _explicit_or_implicit(
        spec, "runAsNonRoot", bool, "must not set securityContext.runAsNonRoot=false", "must set securityContext.runAsNonRoot=true"
    )


def _run_as_user(spec: Pod) -> str | None:
    setters = ["pod"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    bad = [c["name"] for c in _containers(spec) if _context(c).get("runAsUser") == 0]
    if bad:
        setters.append(_named("container", bad))
    return f"{' and '.join(setters)} must not set runAsUser=0" if setters else None


def _seccomp_restricted(spec: Pod) -> str | None:
    pod, containers = _seccomp_types(spec)
    valid = ("RuntimeDefault", "Localhost")
    setters = ["pod"] if pod is not None and pod not in valid else []
    bad = [name for name, kind in containers if kind is not None and kind not in valid]
    values = sorted({kind for _, kind in containers if kind is not None and kind not in valid} | ({pod} if setters else set()))
    if bad:
        setters.append(_named("container", bad))
    if setters:
        return f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {_quote(values)}"  # type: ignore[arg-type]
    implicit = [name for name, kind in containers if kind is None and pod not in valid]
    if implicit:
        return f'pod or {_named("container", implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
    return None


# (reason, check) in the order the API server reports them: baseline's, then restricted's, by id
BASELINE: list[tuple[str, Check]] = [
    ("non-default capabilities", _capabilities_baseline),
    ("host namespaces", _host_namespaces),
    ("hostPath volumes", _host_path),
    ("hostPort", _host_ports),
    ("privileged", _privileged),
    ("seccompProfile", _seccomp_baseline),
]
RESTRICTED: list[tuple[str, Check]] = [
    ("allowPrivilegeEscalation != false", _allow_privilege_escalation),
    ("unrestricted capabilities", _capabilities_restricted),
    ("restricted volume types", _restricted_volumes),
    ("runAsNonRoot != true", _run_as_non_root),
    ("runAsUser=0", _run_as_user),
    ("seccompProfile", _seccomp_restricted),
]
# restricted's capability, volume and seccomp checks stand in for baseline's, which it leaves out
OVERRIDDEN = {_capabilities_baseline, _host_path, _seccomp_baseline}
CHECKS = {
    podsecurity.PRIVILEGED: [],
    podsecurity.BASELINE: BASELINE,
    podsecurity.RESTRICTED: [c for c in BASELINE if c[1] not in OVERRIDDEN] + RESTRICTED,
}


def violations(level: str, pod: Pod) -> list[str]:
    """What ``pod`` breaks of ``level``, each as ``reason (detail)``."""
    spec = pod.get("spec") or {}
    found = []
    for reason, check in CHECKS[level]:
        detail = check(spec)
        if detail is not None:
            found.append(f"{reason} ({detail})" if detail else reason)
    return found


def admit_pod(namespace: Pod | None, pod: Pod) -> None:
    """Refuse, as the API server does (403), a pod that breaks its namespace's enforced level."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(f"{podsecurity.PREFIX}enforce", podsecurity.PRIVILEGED)
    if level not in CHECKS:
        return  # the API server refuses such a label on the namespace; a pod there is judged by the default
    broken = violations(level, pod)
    if broken:
        name = (pod.get("metadata") or {}).get("name", "")
        raise forbidden(f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": {", ".join(broken)}')
