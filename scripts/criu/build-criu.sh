#!/bin/sh
# Builds criu 4.1.1 (Debian trixie's source, pool/main/c/criu) into a private
# prefix, once per machine: bookworm's criu 3.17 cannot dump on kernels >= 6.13
# ("vdso: Unexpected rt vDSO area bounds") and trixie's binary needs libc 2.38.
# Nothing goes over the system: runc finds this criu through the PATH of the
# dockerd that is to use it (PATH=$CRIU_PREFIX/sbin:$PATH dockerd --experimental ...).
#
#   build-criu.sh [CACHE_DIR]    (default /var/cache/agentic-criu)
#
# Prints the prefix's sbin directory. POSIX sh; root or sudo.
#
# make test-env runs it (scripts/docker-test-env.sh); the tests' dockerd is
# started with it (cmd/internal/harness, CheckpointDockerd). What else
# memory hibernation on Docker needs (dockerd --experimental and
# --init-path, the agent's link ended before the dump) is in
# adapters/docker/criu.go and docs/benchmarks.md, "CRIU 4.1.1 tried".
set -eu

cache=${1:-/var/cache/agentic-criu}
version=4.1.1
sha256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
# -p2: with the two patches beside this script: a root without
# CAP_SYS_RESOURCE can dump (criu-rlimits-...), and a TCP listener dumps on
# kernels >= 6.16, where SO_PASSCRED is refused on it (criu-sockopt-...).
prefix="$cache/$version-p2"
here=$(cd "$(dirname "$0")" && pwd)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

if [ -x "$prefix/sbin/criu" ] && "$prefix/sbin/criu" --version 2>/dev/null | grep -q "Version: $version"; then
	echo "$prefix/sbin"
	exit 0
fi

# Debian's Build-Depends for the binary (no docs, no python), those missing;
# a new machine's apt knows no package lists yet.
need=""
for p in curl xz-utils gcc make pkgconf libbsd-dev libcap-dev libgnutls28-dev \
	libnet1-dev libnftables-dev libnl-3-dev libprotobuf-c-dev libprotobuf-dev \
	protobuf-c-compiler protobuf-compiler uuid-dev; do
	dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
	echo "build-criu: installing:$need" >&2
	$SUDO apt-get update -qq >&2
	# $need unquoted: one word per package.
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >&2
fi

$SUDO mkdir -p "$cache/src"
tarball="$cache/src/criu_$version.orig.tar.xz"
if ! echo "$sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
	$SUDO curl -sSf -o "$tarball.tmp" "http://deb.debian.org/debian/pool/main/c/criu/criu_$version.orig.tar.xz"
	echo "$sha256  $tarball.tmp" | sha256sum -c --status || { echo "build-criu: $tarball: checksum mismatch" >&2; exit 1; }
	$SUDO mv "$tarball.tmp" "$tarball"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xf "$tarball"
for p in "$here"/criu-*.patch; do
	(cd "$work/criu-$version" && patch -s -p1 <"$p")
done
echo "build-criu: building criu $version (make criu, $(nproc) jobs)" >&2
make -s -C "$work/criu-$version" -j"$(nproc)" criu >&2
$SUDO make -s -C "$work/criu-$version" install-criu PREFIX="$prefix" >&2
"$prefix/sbin/criu" --version >&2
echo "$prefix/sbin"
