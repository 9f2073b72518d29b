#!/usr/bin/env bash
# Regenerates crds/samples/hello.yaml (the hello-bundle ConfigMap plus the TeloSession that runs
# it) from crds/samples/hello-app/, packed as app/ so the session's entry is app/telo.yaml, and
# likewise crds/samples/hello-standin.yaml from crds/samples/hello-standin-app/ (the sample for
# the stand-in CLI, which make run applies on the local real node).
# The tar is deterministic (sorted names, mtime 0, uid/gid 0, fixed modes, gzip without name or
# time), so the same directory always gives the same bytes and the same sha256, which is also
# written into url-bundle.yaml (the same bundle, hosted at a URL).
#   make-bundle.sh            rewrite hello.yaml and hello-standin.yaml
#   make-bundle.sh --tgz OUT  also write the .tar.gz to OUT (to host it for url-bundle.yaml)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tgz_out=""
if [[ "${1:-}" == "--tgz" ]]; then
  tgz_out=${2:?--tgz needs a file name}
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# pack APP_DIR: $tmp/APP_DIR.tgz from crds/samples/APP_DIR, packed as app/; sets size and sha.
pack() {
  local app=$1
  tar --create --file=- --directory="$here" \
      --transform="s,^$app,app," \
      --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
      --mode='u+rwX,go+rX,go-w' --format=gnu \
      "$app" | gzip -n -9 >"$tmp/$app.tgz"
  size=$(stat -c %s "$tmp/$app.tgz")
  # A ConfigMap holds at most 1 MiB in total; leave room for the object's own fields.
  if (( size > 1000000 )); then
    echo "make-bundle: bundle is $size bytes, too big for a ConfigMap; host it and use url-bundle.yaml" >&2
    exit 1
  fi
  sha=$(sha256sum "$tmp/$app.tgz" | cut -d' ' -f1)
}

pack hello-app
{
  cat <<YAML
# A runnable TeloSession: the hello-app directory, packed by make-bundle.sh into the ConfigMap
# below (do not edit the base64 by hand; run crds/samples/make-bundle.sh), and a session that runs
# app/telo.yaml from it with one HTTP port.
#   kubectl apply -f crds/samples/hello.yaml
#   kubectl wait --for=condition=Ready ts/hello
#   kubectl get ts hello -o wide
# bundle.tgz sha256: $sha
apiVersion: v1
kind: ConfigMap
metadata:
  name: hello-bundle
  labels:
    app.kubernetes.io/part-of: telo-samples
binaryData:
  bundle.tgz: $(base64 -w0 "$tmp/hello-app.tgz")
---
apiVersion: telo.run/v1alpha1
kind: TeloSession
metadata:
  name: hello
spec:
  entry: app/telo.yaml
  bundle:
    configMap:
      name: hello-bundle
  ports:
    - port: 8080
      protocol: TCP
      name: http
YAML
} >"$here/hello.yaml"
hello_size=$size hello_sha=$sha

# The same shape for the stand-in CLI (hack/images/telo-session-test), which make run's real node
# runs: its app answers HTTP on 8080 with a text that says it is the stand-in.
pack hello-standin-app
{
  cat <<YAML
# The hello sample for the stand-in CLI telo-session-test (hack/images/README.md), which the local
# real node runs in place of the Telo image: make run applies it there. The hello-standin-app
# directory, packed by make-bundle.sh into the ConfigMap below (do not edit the base64 by hand;
# run crds/samples/make-bundle.sh), and a session that runs app/telo.yaml from it with one HTTP
# port whose answer says it comes from the stand-in. With the real Telo image, use hello.yaml.
#   kubectl apply -f crds/samples/hello-standin.yaml
#   kubectl wait --for=condition=Ready ts/hello-standin
#   kubectl get --raw /api/v1/namespaces/NS/services/telo-run-hello-standin:p8080/proxy/
# bundle.tgz sha256: $sha
apiVersion: v1
kind: ConfigMap
metadata:
  name: hello-standin-bundle
  labels:
    app.kubernetes.io/part-of: telo-samples
binaryData:
  bundle.tgz: $(base64 -w0 "$tmp/hello-standin-app.tgz")
---
apiVersion: telo.run/v1alpha1
kind: TeloSession
metadata:
  name: hello-standin
spec:
  entry: app/telo.yaml
  bundle:
    configMap:
      name: hello-standin-bundle
  ports:
    - port: 8080
      protocol: TCP
      name: http
YAML
} >"$here/hello-standin.yaml"
standin_size=$size standin_sha=$sha
size=$hello_size sha=$hello_sha

sed -i -E "s/^(      sha256: )[0-9a-f]{64}\$/\\1$sha/" "$here/url-bundle.yaml"

if [[ -n "$tgz_out" ]]; then
  cp "$tmp/hello-app.tgz" "$tgz_out"
fi
echo "wrote $here/hello.yaml (bundle.tgz: $size bytes, sha256 $sha)"
echo "wrote $here/hello-standin.yaml (bundle.tgz: $standin_size bytes, sha256 $standin_sha)"
