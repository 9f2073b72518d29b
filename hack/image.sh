#!/usr/bin/env bash
# make image: the operator's OCI image, without a Docker daemon. The rootfs holds
# /usr/bin/telo-operator (and /usr/bin/telo-gateway once it is built), exactly the shared
# libraries they load (their ldd closure), the dynamic loader, the CA certificates and an
# /etc/passwd with the non-root user 65532 the chart runs it as. Nothing else: no shell.
#
#   hack/image.sh [BUILD_DIR]   build build/image/oci (OCI layout) and
#                               build/image/telo-operator.tar (OCI archive); then, when the real
#                               node runs, push to its registry and pull into its containerd
#
# The tag is the version and a hash of the rootfs' contents, so a rebuilt binary gets a new tag
# (the kubelet pulls a changed image only under a new tag); the version alone is tagged too.
# The reference is printed on stdout (and written to build/image/ref).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
# shellcheck source=cluster/lib.sh
source "$root/hack/cluster/lib.sh"

out="$build/image"
layout="$out/oci"
name=telo-operator
version=$(sed -n 's/^project(telo-operator VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")

fail() {
	echo "image: $*" >&2
	exit 1
}

for tool in umoci skopeo ldd; do
	command -v "$tool" >/dev/null || fail "$tool is missing; run hack/install-deps.sh"
done
bins=("$build/bin/telo-operator")
[ -x "${bins[0]}" ] || fail "${bins[0]} is missing; run make build"
[ -x "$build/bin/telo-gateway" ] && bins+=("$build/bin/telo-gateway")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs/usr/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"

# Copies a file to the same path in the rootfs, following symlinks (the soname link's target
# is stored under the soname, which is what the loader asks for).
copy() {
	mkdir -p "$rootfs$(dirname "$1")"
	cp -L "$1" "$rootfs$1"
}

# Every library path ldd resolves for these files, and the loader.
closure() {
	ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u
}

for b in "${bins[@]}"; do
	# Stripped: the image carries no debug info (the build/ binaries keep it).
	strip --strip-unneeded -o "$rootfs/usr/bin/$(basename "$b")" "$b"
done
libs=$(closure "${bins[@]}")
[ -n "$libs" ] || fail "ldd found no libraries for ${bins[*]}"
for lib in $libs; do
	copy "$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/" ||
	fail "/etc/ssl/certs/ca-certificates.crt is missing (Debian package ca-certificates)"
printf 'root:x:0:0:root:/root:/nonexistent\nnonroot:x:65532:65532:nonroot:/nonexistent:/nonexistent\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"

# Every binary must find every library in the rootfs alone: the loader of the rootfs, its
# libraries and nothing of this machine's.
for b in "$rootfs"/usr/bin/*; do
	missing=$(chroot "$rootfs" /lib64/ld-linux-x86-64.so.2 --list "/usr/bin/$(basename "$b")" 2>&1 |
		grep -i "not found" || true)
	[ -z "$missing" ] || fail "$(basename "$b") misses libraries in the image: $missing"
done
for b in "$rootfs"/usr/bin/*; do
	chroot --userspec=65532:65532 "$rootfs" "/usr/bin/$(basename "$b")" --help >/dev/null 2>&1 ||
		fail "$(basename "$b") does not run in the image's rootfs as user 65532"
done

tag="$version-$( (cd "$rootfs" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) |
	sha256sum | cut -c1-12)"
registry="127.0.0.1:$registry_port"
ref="$registry/telo/$name:$tag"

mkdir -p "$out"
if ! { [ -f "$layout/index.json" ] && umoci ls --layout "$layout" 2>/dev/null | grep -qx "$tag"; }; then
	rm -rf "$layout"
	log="$out/build.log"
	{
		umoci init --layout "$layout" &&
			umoci new --image "$layout:$tag" &&
			umoci unpack --rootless --image "$layout:$tag" "$work/bundle" &&
			cp -a "$rootfs/." "$work/bundle/rootfs/" &&
			umoci repack --image "$layout:$tag" "$work/bundle" &&
			umoci config --image "$layout:$tag" --author telo-operator --os linux --architecture amd64 \
				--config.user 65532:65532 --config.entrypoint /usr/bin/telo-operator --config.cmd run \
				--config.env PATH=/usr/bin --config.workingdir / \
				--config.label "org.opencontainers.image.title=telo-operator" \
				--config.label "org.opencontainers.image.version=$version" &&
			umoci tag --image "$layout:$tag" "$version" &&
			umoci gc --layout "$layout"
	} >"$log" 2>&1 || {
		tail -n 20 "$log" >&2
		fail "umoci failed (log: $log)"
	}
	rm -f "$out/$name.tar"
	skopeo copy --quiet --insecure-policy "oci:$layout:$tag" "oci-archive:$out/$name.tar:$tag" ||
		fail "skopeo copy to the OCI archive failed"
fi
echo "$ref" >"$out/ref"
size=$(du -sk "$rootfs" | cut -f1)
echo "image: $name:$tag: $(ls "$rootfs/usr/bin" | tr '\n' ' ')+ $(echo "$libs" | wc -l) libraries, ${size} KiB unpacked; $out/$name.tar" >&2

# The real node, when it runs: its registry, and its containerd's k8s.io namespace.
if curl -fsS -o /dev/null "http://$registry/v2/" 2>/dev/null; then
	for t in "$tag" "$version"; do
		skopeo copy --quiet --insecure-policy --dest-tls-verify=false \
			"oci:$layout:$tag" "docker://$registry/telo/$name:$t" || fail "push to $registry failed"
	done
	echo "image: pushed $ref (and :$version)" >&2
	if [ -S "$containerd_sock" ]; then
		ctr_cmd images pull --plain-http "$ref" >"$out/pull.log" 2>&1 || {
			tail -n 20 "$out/pull.log" >&2
			fail "ctr images pull $ref into the real node's containerd failed"
		}
		echo "image: imported $ref into the real node's containerd (k8s.io)" >&2
	fi
else
	echo "image: no registry at $registry (the real node is not up): built only" >&2
fi
echo "$ref"
