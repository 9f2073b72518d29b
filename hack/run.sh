#!/usr/bin/env bash
# make run: start the local cluster (building its binaries on first use) and show it. Later work
# adds the operator and a sample session here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
cd "$root"
hack/cluster/up.sh >/dev/null
source hack/cluster/lib.sh
"$build/bin/telo-operator" --version
echo
kubectl_cmd get nodes
echo
echo "The cluster keeps running. Use it with:"
echo "  export KUBECONFIG=$kubeconfig"
echo "  $k8s_bin/kubectl get nodes"
echo "Stop it with: make cluster-down"
