"""The product's own label and annotation keys on the pods it creates."""

GROUP = "gpuburst.jupyter.org"

SITE_LABEL = f"{GROUP}/site"
CLUSTER_LABEL = f"{GROUP}/cluster"
REASON_ANNOTATION = f"{GROUP}/reason"
# Usernames and group names are not valid label values in general, so the owner of a pod is
# kept in annotations; the inventory reads them to enforce per-user and per-group donor caps.
USER_ANNOTATION = f"{GROUP}/user"
GROUPS_ANNOTATION = f"{GROUP}/groups"
ATTEMPTS_ANNOTATION = f"{GROUP}/attempts"

ORIGIN_SITE = "origin"
