#!/bin/sh
# Installs what the docker runtime and its tests need (dockerd, a static
# busybox for the default image, and gVisor's runsc for the gvisor isolation
# tier), only when missing. The tests start their own private dockerd;
# nothing is started here. POSIX sh: root's bash startup files may stall.
set -eu

export PATH="$PATH:/usr/sbin:/sbin"
need=""
command -v dockerd >/dev/null 2>&1 || need="$need docker.io"
# The default image needs busybox-static: Debian's plain busybox is dynamic.
dpkg -s busybox-static >/dev/null 2>&1 || need="$need busybox-static"
# The gvisor tier's runtime (TestDockerTier registers it with its dockerd).
command -v runsc >/dev/null 2>&1 || need="$need runsc"

if [ -n "$need" ]; then
	echo "docker-test-env: installing:$need" >&2
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	# $need unquoted: one word per package.
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need
fi

# criu 4.1.1 for hibernation with the memory (the tests' checkpointing
# dockerd, and make docker's): built once into /var/cache/agentic-criu, a
# no-op after (scripts/criu/build-criu.sh). Not fatal here: without it
# docker environments hibernate keeping the filesystem, and the memory
# tests say what is missing (in CI they fail).
here=$(cd "$(dirname "$0")" && pwd)
"$here/criu/build-criu.sh" >/dev/null ||
	echo "docker-test-env: criu 4.1.1 was not built; docker environments hibernate keeping the filesystem only" >&2
