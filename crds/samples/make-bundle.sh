#!/usr/bin/env bash
# Regenerates crds/samples/hello.yaml (the hello-bundle ConfigMap plus the TeloSession that runs
# it) from crds/samples/hello-app/, packed as app/ so the session's entry is app/telo.yaml.
# The tar is deterministic (sorted names, mtime 0, uid/gid 0, fixed modes, gzip without name or
# time), so the same directory always gives the same bytes and the same sha256, which is also
# written into url-bundle.yaml (the same bundle, hosted at a URL).
#   make-bundle.sh            rewrite hello.yaml
#   make-bundle.sh --tgz OUT  also write the .tar.gz to OUT (to host it for url-bundle.yaml)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tgz_out=""
if [[ "${1:-}" == "--tgz" ]]; then
  tgz_out=${2:?--tgz needs a file name}
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar --create --file=- --directory="$here" \
    --transform='s,^hello-app,app,' \
    --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --mode='u+rwX,go+rX,go-w' --format=gnu \
    hello-app | gzip -n -9 >"$tmp/bundle.tgz"

size=$(stat -c %s "$tmp/bundle.tgz")
# A ConfigMap holds at most 1 MiB in total; leave room for the object's own fields.
if (( size > 1000000 )); then
  echo "make-bundle: bundle is $size bytes, too big for a ConfigMap; host it and use url-bundle.yaml" >&2
  exit 1
fi
sha=$(sha256sum "$tmp/bundle.tgz" | cut -d' ' -f1)

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
  bundle.tgz: $(base64 -w0 "$tmp/bundle.tgz")
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

sed -i -E "s/^(      sha256: )[0-9a-f]{64}\$/\\1$sha/" "$here/url-bundle.yaml"

if [[ -n "$tgz_out" ]]; then
  cp "$tmp/bundle.tgz" "$tgz_out"
fi
echo "wrote $here/hello.yaml (bundle.tgz: $size bytes, sha256 $sha)"
