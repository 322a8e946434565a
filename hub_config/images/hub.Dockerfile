# syntax=docker/dockerfile:1
# The z2jh hub image plus jupyter-gpuburst with its hub extra (the spawner, the capacity
# service, metrics, and `gpuburst doctor` on PATH for `kubectl exec deploy/hub -- gpuburst doctor`).
# Build from the repository root after `python -m build --wheel` (BuildKit, Docker >= 23):
#   docker build -f hub_config/images/hub.Dockerfile -t registry.example.edu/jupyter-gpuburst/hub:0.2.0 .
# The base tag is the z2jh chart release that hub_config/values.yaml and docs/install.md (step 4) pin.
ARG BASE_IMAGE=quay.io/jupyterhub/k8s-hub:4.4.0
FROM ${BASE_IMAGE}

# The base image ends as jovyan; its Python lives in /usr/local, owned by root.
USER root
# The wheel is bind-mounted for this step only, so nothing is left behind to clean up.
RUN --mount=type=bind,source=dist,target=/tmp/dist \
    python3 -m pip install --no-cache-dir --no-warn-script-location \
        "$(ls /tmp/dist/jupyter_gpuburst-*.whl | sort -V | tail -n 1)[hub]" \
 && gpuburst --help > /dev/null
USER jovyan
