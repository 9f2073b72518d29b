#!/usr/bin/env bash
# Runs the e2e suite against the local cluster (started by the suite's fixture if needed).
# Extra arguments go to pytest, e.g. hack/e2e.sh -k kube_client.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$("$root/hack/install-deps.sh" --venv)
cd "$root/test/e2e"
# Disruptive tests (restarting components) go last so they cannot disturb the others.
exec "$venv/bin/python" -m pytest -p no:cacheprovider "$@"
