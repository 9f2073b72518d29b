#!/usr/bin/env bash
# Builds the real node's OCI images from a small rootfs (busybox-static, a static pause binary)
# with umoci, pushes them with skopeo to the local registry (127.0.0.1:$TELO_REGISTRY_PORT) and
# pulls them into containerd's k8s.io namespace. No Docker daemon, nothing from the internet.
# Each image is tagged with a hash of its inputs, so it is rebuilt only when they change.
#
#   hack/images/build.sh              build, push and import what is missing (registry and
#                                     containerd of the real node must be running: up.sh does it)
#   hack/images/build.sh --ref NAME   print NAME's reference (no build)
#   hack/images/build.sh --build-only build the OCI layouts only
#   hack/images/build.sh kaniko       build, push and import the named images only (kaniko, the
#                                     image builder, is made only when named: it packs the
#                                     executor `hack/build-tools.sh kaniko` builds)
#
# The references are written to $TELO_CLUSTER_DIR/real-node/images/refs.json (tests read it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"

images=(pause telo-init telo-session-test)
all_images=(pause telo-init telo-session-test kaniko)
out="$real_dir/images"
registry="127.0.0.1:$registry_port"
busybox_bin=${TELO_BUSYBOX:-/bin/busybox}

fail() {
	echo "images: $*" >&2
	exit 1
}

# The tag: a hash of everything the image is made of.
image_tag() { # name
	local name=$1
	{
		# By content, not path: every checkout of the same tree gets the same tag.
		(cd "$here" && sha256sum build.sh)
		(cd "$here/$name" && find . -type f | LC_ALL=C sort | xargs sha256sum)
		case "$name" in
		pause) cc --version 2>/dev/null | head -n 1 ;;
		kaniko) sha256sum "$(kaniko_executor)" "$ca_bundle" ;;
		*) sha256sum "$busybox_bin" ;;
		esac
	} | sha256sum | cut -c1-16
}

# kaniko's executor, built by hack/build-tools.sh kaniko (static, CGO_ENABLED=0).
kaniko_executor() {
	echo "$("$here/../build-tools.sh" --print-dir kaniko)/executor"
}
ca_bundle=${TELO_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

image_ref() { # name
	echo "$registry/telo/$1:$(image_tag "$1")"
}

if [ "${1:-}" = "--ref" ]; then
	image_ref "${2:?--ref needs an image name (${all_images[*]})}"
	exit 0
fi

for tool in umoci skopeo; do
	command -v "$tool" >/dev/null || fail "$tool is missing; run TELO_REAL_NODE=1 hack/install-deps.sh"
done

# A minimal /etc for busybox images: root, the non-root user 1000 the pods run as, nobody.
write_etc() { # rootfs
	mkdir -p "$1/etc" "$1/tmp"
	chmod 1777 "$1/tmp"
	printf 'root:x:0:0:root:/root:/bin/sh\ntelo:x:1000:1000:telo:/home/telo:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$1/etc/passwd"
	printf 'root:x:0:\ntelo:x:1000:\nnogroup:x:65534:\n' >"$1/etc/group"
}

with_busybox() { # rootfs
	[ -x "$busybox_bin" ] || fail "$busybox_bin is missing; run TELO_REAL_NODE=1 hack/install-deps.sh (busybox-static)"
	case "$(ldd "$busybox_bin" 2>&1 || true)" in *"not a dynamic executable"*) ;; *) false ;; esac ||
		fail "$busybox_bin is not statically linked (install busybox-static)"
	mkdir -p "$1/bin" "$1/usr/bin" "$1/usr/local/bin" "$1/home/telo"
	cp "$busybox_bin" "$1/bin/busybox"
	local applet
	for applet in $("$busybox_bin" --list); do
		[ "$applet" = busybox ] || ln -s busybox "$1/bin/$applet"
	done
	write_etc "$1"
	chown 1000:1000 "$1/home/telo"
}

# rootfs_<name> rootfs: fills the image's rootfs; config_<name>: umoci config arguments.
rootfs_pause() {
	cc -static -Os -o "$1/pause" "$here/pause/pause.c" || fail "pause: cc -static failed (is libc6-dev installed?)"
	write_etc "$1"
}

rootfs_telo-init() {
	with_busybox "$1"
	install -m 0755 "$here/telo-init/telo-fetch" "$1/usr/local/bin/telo-fetch"
}

rootfs_telo-session-test() {
	with_busybox "$1"
	install -m 0755 "$here/telo-session-test/telo" "$1/usr/local/bin/telo"
	mkdir -p "$1/usr/lib/telo" "$1/app" "$1/telo-cache"
	install -m 0755 "$here/telo-session-test/http-answer" "$here/telo-session-test/inspect-answer" \
		"$here/telo-session-test/install" "$1/usr/lib/telo/"
	# TELO_CACHE_DIR of the operator's build Dockerfile: `telo install` runs as the image's user
	# (1000), and umoci's rootless repack records every file as root's, so it is world-writable.
	chmod 1777 "$1/telo-cache"
	install -m 0644 "$here/telo-session-test/example.telo" "$1/app/example.telo"
	image_tag telo-session-test >"$1/usr/lib/telo/VERSION"
}

# The layout of kaniko's own images (its deploy/Dockerfile, kaniko-executor): the executor in
# /kaniko, CA certificates in /kaniko/ssl/certs, an empty docker config dir /kaniko/.docker (the
# push Secret is mounted there), /etc/nsswitch.conf, /workspace. No shell: kaniko unpacks the
# base image over this root and runs the RUN steps with the base image's own tools.
rootfs_kaniko() {
	local exe
	exe=$(kaniko_executor)
	[ -x "$exe" ] || fail "kaniko: $exe is missing; run hack/build-tools.sh kaniko"
	case "$(ldd "$exe" 2>&1 || true)" in *"not a dynamic executable"*) ;; *) false ;; esac ||
		fail "kaniko: $exe is not statically linked"
	[ -r "$ca_bundle" ] || fail "kaniko: $ca_bundle is missing (install ca-certificates)"
	mkdir -p "$1/kaniko/ssl/certs" "$1/kaniko/.docker" "$1/etc" "$1/workspace"
	install -m 0755 "$exe" "$1/kaniko/executor"
	install -m 0644 "$ca_bundle" "$1/kaniko/ssl/certs/ca-certificates.crt"
	chmod 0777 "$1/kaniko"
	install -m 0644 "$here/kaniko/nsswitch.conf" "$1/etc/nsswitch.conf"
}

image_config() { # name -> the umoci config arguments in cfg
	case "$1" in
	pause) cfg=(--config.entrypoint /pause --config.user 65535:65535) ;;
	telo-init) cfg=(--config.cmd /bin/sh --config.user 1000:1000 --config.workingdir /home/telo) ;;
	telo-session-test)
		cfg=(--config.entrypoint /usr/local/bin/telo --config.cmd run --config.cmd /app/example.telo
			--config.user 1000:1000 --config.workingdir /app)
		;;
	kaniko)
		cfg=(--config.entrypoint /kaniko/executor --config.user 0:0 --config.workingdir /workspace
			--config.env HOME=/root --config.env USER=root --config.env SSL_CERT_DIR=/kaniko/ssl/certs
			--config.env DOCKER_CONFIG=/kaniko/.docker/)
		;;
	esac
}

image_path() { # name -> PATH of the image
	case "$1" in
	kaniko) echo /usr/local/bin:/kaniko ;;
	*) echo /usr/local/bin:/usr/bin:/bin ;;
	esac
}

build_layout() { # name tag -> OCI layout $out/oci/<name> holding the tag
	local name=$1 tag=$2 layout="$out/oci/$1" work
	if [ -f "$layout/index.json" ] && umoci ls --layout "$layout" 2>/dev/null | grep -qx "$tag"; then
		return 0
	fi
	echo "images: building $name:$tag" >&2
	work=$(mktemp -d "$out/build.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	mkdir -p "$work/rootfs"
	"rootfs_$name" "$work/rootfs"
	rm -rf "$layout"
	mkdir -p "$out/oci"
	local log="$out/build-$name.log" cfg=()
	image_config "$name"
	{
		umoci init --layout "$layout" &&
			umoci new --image "$layout:$tag" &&
			umoci unpack --rootless --image "$layout:$tag" "$work/bundle" &&
			cp -a "$work/rootfs/." "$work/bundle/rootfs/" &&
			umoci repack --image "$layout:$tag" "$work/bundle" &&
			umoci config --image "$layout:$tag" --author telo-operator --os linux --architecture amd64 \
				--config.env "PATH=$(image_path "$name")" "${cfg[@]}" &&
			umoci gc --layout "$layout"
	} >"$log" 2>&1 || {
		tail -n 20 "$log" >&2
		rm -rf "$layout"
		fail "$name: umoci failed (log: $log)"
	}
}

build_only=0
if [ "${1:-}" = "--build-only" ]; then
	build_only=1
	shift
fi
if [ $# -gt 0 ]; then
	for name in "$@"; do
		case " ${all_images[*]} " in
		*" $name "*) ;;
		*) fail "unknown image '$name' (known: ${all_images[*]})" ;;
		esac
	done
	images=("$@")
fi

# A fresh cluster directory has no images directory yet (build_layout makes its work dir there).
mkdir -p "$out"
# refs.json lists the last ref of every image pushed from this cluster directory: what it held
# (from any checkout's build.sh), with this run's images replaced.
declare -A refs_of=()
if [ -f "$out/refs.json" ]; then
	for name in "${all_images[@]}"; do
		old_ref=$(grep -o "\"$name\": \"[^\"]*\"" "$out/refs.json" | sed 's/.*: "\(.*\)"$/\1/' || true)
		[ -z "$old_ref" ] || refs_of[$name]=$old_ref
	done
fi
for name in "${images[@]}"; do
	tag=$(image_tag "$name")
	ref="$registry/telo/$name:$tag"
	build_layout "$name" "$tag"
	[ "$build_only" = 1 ] && continue
	if ! curl -fsS -o /dev/null -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://$registry/v2/telo/$name/manifests/$tag" 2>/dev/null; then
		skopeo copy --quiet --insecure-policy --dest-tls-verify=false \
			"oci:$out/oci/$name:$tag" "docker://$ref" >"$out/push-$name.log" 2>&1 || {
			tail -n 20 "$out/push-$name.log" >&2
			fail "$name: skopeo copy to $ref failed (is the registry up? hack/cluster/status.sh)"
		}
		echo "images: pushed $ref" >&2
	fi
	if ! ctr_cmd images ls -q 2>/dev/null | grep -xF "$ref" >/dev/null; then
		ctr_cmd images pull --plain-http "$ref" >"$out/pull-$name.log" 2>&1 || {
			tail -n 20 "$out/pull-$name.log" >&2
			fail "$name: ctr images pull $ref into containerd's k8s.io namespace failed"
		}
		echo "images: imported $ref into containerd (k8s.io)" >&2
	fi
	refs_of[$name]=$ref
done
refs="{"
sep=""
for name in "${all_images[@]}"; do
	[ -n "${refs_of[$name]:-}" ] || continue
	refs="$refs$sep\"$name\": \"${refs_of[$name]}\""
	sep=", "
done
echo "$refs}" >"$out/refs.json.tmp"
mv "$out/refs.json.tmp" "$out/refs.json"
