# The z2jh hub image plus jupyter-gpuburst (the spawner, capacity page and metrics).
# Build from the repository root after `python -m pip wheel --no-deps -w dist .`:
#   docker build -f hub_config/images/hub.Dockerfile -t registry.example.edu/jupyter-gpuburst/hub:0.1.0 .
# Keep the tag in step with the z2jh chart version you install.
FROM quay.io/jupyterhub/k8s-hub:4.3.1
COPY dist/jupyter_gpuburst-*.whl /tmp/
RUN python3 -m pip install --no-cache-dir /tmp/jupyter_gpuburst-*.whl && rm /tmp/jupyter_gpuburst-*.whl
