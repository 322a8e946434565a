# A CUDA notebook image plus jupyter-gpuburst (the server extension and the Lab panel, enabled
# automatically on install). Build from the repository root after
# `python -m pip wheel --no-deps -w dist .`:
#   docker build -f hub_config/images/singleuser.Dockerfile -t registry.example.edu/jupyter-gpuburst/singleuser:0.1.0 .
# Pin the base tag you test with; any image with jupyter_server >= 2.14 works.
FROM quay.io/jupyter/pytorch-notebook:cuda12-latest
COPY dist/jupyter_gpuburst-*.whl /tmp/
RUN python -m pip install --no-cache-dir /tmp/jupyter_gpuburst-*.whl && rm /tmp/jupyter_gpuburst-*.whl
