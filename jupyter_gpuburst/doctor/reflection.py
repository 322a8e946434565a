"""What Liqo reflects to the donors: the hub's namespace, and Liqo's policy for Secrets.

Liqo reflects every ConfigMap and Secret of an offloaded namespace to every donor it is offloaded
to, unless told otherwise. Two settings decide whether a secret leaves the origin:

- the hub's namespace must not be offloaded (z2jh's ``hub`` Secret there holds the cookie secret
  and the proxy's token), so user servers run in a namespace of their own;
- Liqo's reflection policy for Secrets, per virtual kubelet template (``VkOptionsTemplate``
  ``spec.reflectorsConfig.secret``): ``DenyList``, the default, reflects every Secret not
  annotated to skip it (``liqo.SKIP_REFLECTION_ANNOTATION``); ``AllowList`` only those annotated
  to allow it (``liqo.ALLOW_REFLECTION_ANNOTATION``: a donor GPU kernel's Secret is, and nothing
  of the hub's).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.doctor.findings import Finding, Status, selects
from jupyter_gpuburst.hub.kernels.manifests import donor_kernel_namespace

AREA = "reflection"
SECRET_REFLECTOR = "secret"  # the key of Liqo's reflectorsConfig (Helm: offloading.reflection.secret)
ALLOW_LIST_FIX = 'liqoctl install ... --set "offloading.reflection.secret.type=AllowList"   # then peer again'


def hub_namespace_of(identity: str | None) -> str | None:
    """The namespace of a service account identity (``system:serviceaccount:<ns>:<name>``)."""
    parts = (identity or "").split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and parts[2]:
        return parts[2]
    return None


def check_hub_namespace(hub_namespace: str | None, user_namespace: str, hub_offloading: Mapping[str, Any] | None) -> list[Finding]:
    """The hub's namespace is not the users' and is not offloaded."""
    if hub_namespace is None:
        return [
            Finding(
                AREA,
                "the hub's namespace",
                Status.WARN,
                "not checked: doctor does not know the hub's namespace (pass --hub-namespace, or --as the hub's service account)",
            )
        ]
    subject = f"hub namespace {hub_namespace}"
    findings: list[Finding] = []
    if hub_namespace == user_namespace:
        findings.append(
            Finding(
                AREA,
                subject,
                Status.WARN,
                "user servers run in the hub's namespace: offloaded for donor servers, it has Liqo reflect the hub's "
                "Secrets (cookie secret, proxy token) to every donor",
                "run user servers in a namespace of their own (KubeSpawner.namespace, docs/install.md)",
            )
        )
    if hub_offloading is not None:
        findings.append(
            Finding(
                AREA,
                subject,
                Status.WARN,
                "offloaded: Liqo reflects the hub's Secrets (cookie secret, proxy token) to the donors",
                f"liqoctl unoffload namespace {shlex.quote(hub_namespace)}",
            )
        )
    return findings or [Finding(AREA, subject, Status.OK, "apart from the user namespace and not offloaded")]


def check_donor_kernel_namespaces(
    namespace: str, donors: Iterable[Mapping[str, Any]], offloadings: Mapping[str, Mapping[str, Any] | None]
) -> list[Finding]:
    """Each donor's kernel namespace, where already offloaded, is offloaded to that donor alone
    (``offloadings``: its NamespaceOffloading, or None, by namespace); the hub offloads one that
    is not yet."""
    donors = list(donors)
    findings = []
    for donor in donors:
        cluster_id = liqo.remote_cluster_id(donor) or ""
        kernels = donor_kernel_namespace(namespace, cluster_id)
        offloading = offloadings.get(kernels)
        if offloading is None:
            continue
        selector = (offloading.get("spec") or {}).get("clusterSelector")
        others = sorted(
            liqo.remote_cluster_id(d) or ""
            for d in donors
            if d is not donor and selects(selector, (d.get("metadata") or {}).get("labels") or {})
        )
        if others:
            findings.append(
                Finding(
                    AREA,
                    f"namespace {kernels}",
                    Status.WARN,
                    f"GPU kernels on donor {cluster_id} keep their keys here, and it is offloaded to {', '.join(others)} too",
                    f"liqoctl unoffload namespace {shlex.quote(kernels)}   # then apply hub_config/donor-kernels.yaml for {cluster_id}",
                )
            )
        else:
            findings.append(Finding(AREA, f"namespace {kernels}", Status.OK, f"offloaded to donor {cluster_id} alone"))
    return findings


def check_secret_reflection(templates: Iterable[Mapping[str, Any]] | None) -> list[Finding]:
    """Liqo's reflection policy for Secrets, as each virtual kubelet template sets it; None: not readable."""
    templates = list(templates) if templates is not None else None
    if not templates:
        why = "cannot be read" if templates is None else "were not found"
        return [
            Finding(
                AREA,
                "Secrets",
                Status.WARN,
                f"not checked: Liqo's virtual kubelet settings ({liqo.VK_OPTIONS_TEMPLATE_PLURAL}.{liqo.OFFLOADING_GROUP}) {why}; "
                "Liqo reflects every Secret of an offloaded namespace unless installed with the AllowList policy",
                ALLOW_LIST_FIX,
            )
        ]
    findings = []
    for template in templates:
        meta = template.get("metadata") or {}
        subject = f"Secrets ({liqo.VK_OPTIONS_TEMPLATE_KIND} {meta.get('namespace', '')}/{meta.get('name', '')})"
        config = ((template.get("spec") or {}).get("reflectorsConfig") or {}).get(SECRET_REFLECTOR) or {}
        policy = config.get("type") or liqo.DEFAULT_REFLECTION_POLICY
        if config.get("workers") == 0:
            findings.append(Finding(AREA, subject, Status.OK, "not reflected (no workers)"))
        elif policy == "AllowList":
            findings.append(
                Finding(AREA, subject, Status.OK, f"reflected only when annotated {liqo.ALLOW_REFLECTION_ANNOTATION} (AllowList)")
            )
        else:
            findings.append(
                Finding(
                    AREA,
                    subject,
                    Status.WARN,
                    f"every Secret of an offloaded namespace is reflected to the donors ({policy}) but those annotated "
                    f"{liqo.SKIP_REFLECTION_ANNOTATION}",
                    ALLOW_LIST_FIX,
                )
            )
    return findings
