#!/bin/sh
# `make docker`: a private dockerd for `make run`, living in STATE_DIR/docker
# (its socket docker.sock, images and containers, log dockerd.log), started
# without touching the host network (no iptables rules, no bridge: containers
# have no network by default). No image is pulled: the docker runtime
# imports its own busybox base image. `make run` uses it (DOCKER_HOST) when
# no system dockerd is there; a server already running finds it within 15 s.
#
#   scripts/docker.sh STATE_DIR start|stop|status
#
# Installs dockerd and busybox-static first when missing
# (scripts/docker-test-env.sh). Needs root, or sudo. POSIX sh.
set -eu

state=${1:?usage: docker.sh STATE_DIR start|stop|status}
action=${2:-start}
dir="$state/docker"
host="unix://$dir/docker.sock"
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$PATH:/usr/sbin:/sbin"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

# The exec root holds containerd's sockets, whose paths must stay short:
# under /run, named after this state dir.
id=$(printf %s "$dir" | cksum | cut -d' ' -f1)
exec_root="/run/agentic-dockerd-$id"

answers() { $SUDO docker -H "$1" version >/dev/null 2>&1; }
running() { [ -f "$dir/pid" ] && $SUDO kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

case "$action" in
stop)
	if ! running; then
		echo "docker: no private dockerd runs in $dir"
		exit 0
	fi
	pid=$(cat "$dir/pid")
	$SUDO kill -TERM "$pid"
	i=0
	while $SUDO kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		[ "$i" -lt 300 ] || { echo "docker: dockerd ($pid) did not stop within 30 s" >&2; exit 1; }
		sleep 0.1
	done
	$SUDO rm -rf "$exec_root"
	echo "docker: the private dockerd ($pid) stopped; its images stay in $dir/root"
	exit 0
	;;
status)
	if running && answers "$host"; then echo "docker: running, DOCKER_HOST=$host"; exit 0; fi
	echo "docker: not running (make docker starts it)"
	exit 1
	;;
start) ;;
*)
	echo "usage: docker.sh STATE_DIR start|stop|status" >&2
	exit 2
	;;
esac

if [ -z "${DOCKER_HOST:-}" ] && [ -S /var/run/docker.sock ] && answers unix:///var/run/docker.sock; then
	echo "docker: this machine's dockerd answers on /var/run/docker.sock; make run uses it, no private one is started"
	exit 0
fi
if running && answers "$host"; then
	echo "docker: the private dockerd already runs"
else
	"$here/docker-test-env.sh"
	mkdir -p "$dir"
	group=""
	[ "$(id -u)" = 0 ] || group="-G $(id -gn)"
	# Checkpoints (the docker runtime's memory hibernation) where make
	# test-env built criu 4.1.1: dockerd's experimental checkpoints, that
	# criu first in its PATH, and --init-path at the real tini (Debian's
	# docker-init is a symlink a restore cannot remount). Else the runtime
	# hibernates keeping the filesystem only.
	# Such a dockerd gets a mount namespace of its own: a restore mounts a
	# cgroup yard for a moment, which a libvirtd on this machine would take
	# for the cgroup root and refuse to start or restore a VM.
	criu_sbin=/var/cache/agentic-criu/4.1.1-p2/sbin
	checkpoint=""
	path_env=""
	own_mounts=""
	if [ -x "$criu_sbin/criu" ] && init=$(command -v docker-init) && init=$(readlink -f "$init"); then
		checkpoint="--experimental --init-path '$init'"
		path_env="PATH='$criu_sbin':\$PATH"
		own_mounts="unshare --mount --propagation slave"
		echo "docker: criu found ($criu_sbin): dockerd checkpoints, environments hibernate with their memory"
	fi
	# $group and $checkpoint unquoted: empty, or flags and their values.
	$SUDO sh -c "$path_env nohup $own_mounts dockerd --iptables=false --bridge=none --log-level=warn -H '$host' $group $checkpoint \
		--data-root '$dir/root' --exec-root '$exec_root' --pidfile '$dir/pid' \
		--containerd-namespace agentic-$id --containerd-plugins-namespace agentic-$id-plugins \
		>'$dir/dockerd.log' 2>&1 &"
	i=0
	until answers "$host"; do
		i=$((i + 1))
		if [ "$i" -ge 300 ]; then
			echo "docker: dockerd did not answer within 30 s; its log, $dir/dockerd.log:" >&2
			tail -n 20 "$dir/dockerd.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "docker: a private dockerd runs (data and log in $dir)"
fi
if [ -n "${DOCKER_HOST:-}" ] && [ "$DOCKER_HOST" != "$host" ]; then
	echo "  note: DOCKER_HOST is set ($DOCKER_HOST): make run uses that one, not this; unset it to use this one"
fi
cat <<MSG
  make run uses it; a server already running offers the docker runtime within 15 s
  (GET /api/v1/runtimes, or 'agenticctl env runtimes', checks at once). Elsewhere:
    export DOCKER_HOST=$host
  then: bin/agenticctl env create --runtime docker dev-1
  stop it: make docker-stop
MSG
