# syntax=docker/dockerfile:1
# A CUDA notebook image plus jupyter-gpuburst's base install: the server extension and the Lab
# panel, both enabled on install. No hub or Kubernetes packages go into the user image.
# Build from the repository root after `python -m build --wheel` (BuildKit, Docker >= 23):
#   docker build -f hub_config/images/singleuser.Dockerfile -t registry.example.edu/jupyter-gpuburst/singleuser:0.2.0 .
# Pin the base image you tested (a dated tag, or better its digest); any Jupyter Docker Stacks
# image with jupyter_server >= 2.14 works.
ARG BASE_IMAGE=quay.io/jupyter/pytorch-notebook:cuda12-pytorch-2.5.1
FROM ${BASE_IMAGE}

# The base image ends as ${NB_USER}; install as root, then give the conda environment back to
# ${NB_USER} the way Jupyter Docker Stacks do (fix-permissions), so users can still pip install.
USER root
# The wheel is bind-mounted for this step only, so nothing is left behind to clean up.
RUN --mount=type=bind,source=dist,target=/tmp/dist \
    python -m pip install --no-cache-dir \
        "$(ls /tmp/dist/jupyter_gpuburst-*.whl | sort -V | tail -n 1)" \
 && fix-permissions "${CONDA_DIR}" \
 && jupyter server extension list 2>&1 | grep -q "jupyter_gpuburst.*enabled"
USER ${NB_USER}
