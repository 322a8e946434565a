#!/usr/bin/env bash
# KubeSpawner's own test suite, unmodified, against `gpuburst sim`, on the emulator or on the real
# control plane (CONTROL_PLANE=kube, built by `make kube`).
#
# Takes the tests of the KubeSpawner release below (the PyPI sdist ships no tests/): 7.1.0's are
# vendored in tests/reference/kubespawner; another release's come from a local clone named by
# KUBESPAWNER_SOURCE, or from the release tag's archive on GitHub. It installs the runner into a
# virtual environment of its own exactly as KubeSpawner's CI does
# (`jupyterhub-kubespawner[test]` of that release), starts the local federation with the
# project's environment as the pods' "image", points KUBECONFIG at it and runs pytest.
# Prints the pass/fail counts and the machine's load average; exits with pytest's status.
#
# Needs PyPI (the runner's packages; and GitHub for a release neither vendored nor in
# KUBESPAWNER_SOURCE) and the project's virtual environment (`make setup`, or
# `make kubespawner-suite` which checks it).
#
#   CONTROL_PLANE        emulator (default) or kube: each site on its own real control plane
#   KUBESPAWNER_VERSION  release to test (default 7.1.0)
#   KUBESPAWNER_RELEASED install its test dependencies as PyPI held them before this time
#                        (default: the day after 7.1.0 was tagged)
#   KUBESPAWNER_SOURCE   a clone of the KubeSpawner repository (bare or not) holding the tag,
#                        used instead of the vendored tests or the tag archive
#   SUITE_DIR            where the tests, their venv, the federation's state and the log go
#                        (default ${TMPDIR:-/tmp}/gpuburst-kubespawner-suite; reused when present)
#   PYTEST_ARGS          extra pytest arguments (e.g. "-k spawn_start -x")
#   GPUBURST_SIM_NETWORK the pods' network (default: "namespaces" as root, else "shared")
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${KUBESPAWNER_VERSION:-7.1.0}"
CONTROL_PLANE="${CONTROL_PLANE:-emulator}"
# The day after the release: its CI resolved its test dependencies from PyPI as of then.
RELEASED="${KUBESPAWNER_RELEASED:-2026-07-17T00:00:00Z}"
SUITE_DIR="${SUITE_DIR:-${TMPDIR:-/tmp}/gpuburst-kubespawner-suite}"
PROJECT_PY="$REPO/.venv/bin/python"
SRC="$SUITE_DIR/kubespawner-$VERSION"
VENV="$SUITE_DIR/venv-$VERSION"

if [ ! -x "$REPO/.venv/bin/gpuburst" ]; then
    echo "kubespawner-suite: run 'make setup' first (the project's .venv is the pods' image)" >&2
    exit 2
fi
case "$CONTROL_PLANE" in
    emulator) READY_WITHIN=60 ;;
    # each site's etcd, kube-apiserver, controller manager and scheduler: 20-40 s a site under load
    kube) READY_WITHIN=300 ;;
    *) echo "kubespawner-suite: CONTROL_PLANE is emulator or kube, not '$CONTROL_PLANE'" >&2; exit 2 ;;
esac
mkdir -p "$SUITE_DIR"

# 1. The release's tests and pyproject (pytest options, test extras), untouched.
if [ ! -f "$SRC/tests/conftest.py" ]; then
    rm -rf "$SRC" && mkdir -p "$SRC"
    VENDORED="$REPO/tests/reference/kubespawner"
    if [ -z "${KUBESPAWNER_SOURCE:-}" ] && grep -q "^Tag: *$VERSION " "$VENDORED/PROVENANCE"; then
        cp -R "$VENDORED/tests" "$VENDORED/pyproject.toml" "$SRC/"
    elif [ -n "${KUBESPAWNER_SOURCE:-}" ]; then
        git -C "$KUBESPAWNER_SOURCE" archive "$VERSION" tests pyproject.toml | tar -x -C "$SRC"
    else
        url="https://github.com/jupyterhub/kubespawner/archive/refs/tags/$VERSION.tar.gz"
        echo "kubespawner-suite: fetching $url"
        "$PROJECT_PY" - "$url" "$SRC" <<'EOF'
import io, sys, tarfile, urllib.request
url, dest = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=120).read()
with tarfile.open(fileobj=io.BytesIO(data)) as tf:
    members = []
    for m in tf.getmembers():
        top, _, rest = m.name.partition("/")
        if rest == "pyproject.toml" or rest.startswith("tests/"):
            m.name = rest
            members.append(m)
    tf.extractall(dest, members=members, filter="data")
EOF
    fi
fi
test -f "$SRC/tests/conftest.py" || { echo "kubespawner-suite: no tests/ in $SRC" >&2; exit 2; }

# 2. The runner's environment, as KubeSpawner's CI installed it on the release day: the package
# and its test extra, from what PyPI held then. Later releases broke the suite on the client
# side (pytest 9.2 drops what the pinned pytest-asyncio 0.21 uses; kubernetes 37 no longer
# serializes kubernetes_asyncio models; JupyterHub 6 needs a running loop in init_internal_ssl).
if [ ! -x "$VENV/bin/pytest" ]; then
    "$PROJECT_PY" -m venv "$VENV"
    {
        "$VENV/bin/python" -m pip install --upgrade pip \
        && "$VENV/bin/python" -m pip install --uploaded-prior-to "$RELEASED" "jupyterhub-kubespawner[test]==$VERSION"
    } >"$SUITE_DIR/pip.log" 2>&1 || { tail -20 "$SUITE_DIR/pip.log" >&2; rm -rf "$VENV"; exit 1; }
fi
"$VENV/bin/python" -m pip freeze 2>/dev/null | grep -iE "^(jupyterhub|jupyterhub-kubespawner|kubernetes|kubernetes.asyncio|pytest|pytest-asyncio)==" | tr '\n' ' ' | sed 's/^/kubespawner-suite: runner: /;s/$/\n/'

# 3. The federation. Pods run their commands (jupyterhub, jupyterhub-singleuser, python3) from
# the project's environment, as a container would from its image; the hub pod's proxy is npm's
# configurable-http-proxy (from `make setup`), as in the jupyterhub image, not a Python port.
STATE="$SUITE_DIR/state"
rm -rf "$STATE" && mkdir -p "$STATE"
KUBECONFIG_FILE="$SUITE_DIR/kubeconfig"
rm -f "$KUBECONFIG_FILE"
if [ -x "$REPO/node_modules/.bin/configurable-http-proxy" ]; then
    export GPUBURST_SIM_IMAGE_PATH="$REPO/node_modules/.bin"
fi
# A network namespace per pod, as on a cluster, where it can be had (root): the suite's two hub
# pods both run a proxy on :8000 and 127.0.0.1:8001. The runner itself only reaches pod IPs.
if [ -z "${GPUBURST_SIM_NETWORK:-}" ] && [ "$(id -u)" = 0 ]; then
    export GPUBURST_SIM_NETWORK=namespaces
fi
echo "kubespawner-suite: pod network: ${GPUBURST_SIM_NETWORK:-shared}"
SIM_LOG="$SUITE_DIR/sim-$CONTROL_PLANE.log"
LOG="$SUITE_DIR/pytest-$CONTROL_PLANE.log"
"$REPO/.venv/bin/gpuburst" sim --control-plane "$CONTROL_PLANE" --state-dir "$STATE" --kubeconfig-out "$KUBECONFIG_FILE" >"$SIM_LOG" 2>&1 &
SIM_PID=$!
trap 'kill "$SIM_PID" 2>/dev/null; wait "$SIM_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 $((READY_WITHIN * 2))); do
    grep -q "^ready" "$SIM_LOG" 2>/dev/null && break
    kill -0 "$SIM_PID" 2>/dev/null || { cat "$SIM_LOG" >&2; exit 1; }
    sleep 0.5
done
grep -q "^ready" "$SIM_LOG" || { echo "kubespawner-suite: the federation did not start within ${READY_WITHIN} s" >&2; exit 1; }

# 4. The suite, from its own directory so its pyproject's pytest options apply.
echo "kubespawner-suite: KubeSpawner $VERSION tests against gpuburst sim --control-plane $CONTROL_PLANE; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
set +e
(cd "$SRC" && KUBECONFIG="$KUBECONFIG_FILE" "$VENV/bin/python" -m pytest -p no:cacheprovider --color=no ${PYTEST_ARGS:-} tests) >"$LOG" 2>&1
rc=$?
set -e
grep -E "^(FAILED|ERROR) " "$LOG" || true
summary="$(grep -E "^=+ .*(passed|failed|error).* in [0-9.]+s" "$LOG" | tail -1)"
echo "kubespawner-suite: ${summary:-no summary, see $LOG}"
echo "kubespawner-suite: load average after: $(cut -d' ' -f1-3 /proc/loadavg); log: $LOG"
exit $rc
