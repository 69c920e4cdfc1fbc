#!/bin/sh
# Try agentic-sandbox's claude path with no API key and no network (the
# README's "Tasks without an API key"; `make claude-standin` runs this):
#
#   scripts/claude-standin.sh                  install and demo-repo, with their defaults
#   scripts/claude-standin.sh install [DIR]    examples/claude-standin/claude as DIR/claude
#                                              (default /usr/local/bin as root, else ~/.local/bin),
#                                              where host agents find it on their PATH
#   scripts/claude-standin.sh demo-repo [DIR]  a small git repository (default /tmp/agentic-demo-repo)
#                                              that anyone may read, which examples/tasks/*.yaml name
#   scripts/claude-standin.sh image            a Docker image, agentic-sandbox/claude-standin, with the
#                                              stand-in on its PATH (for environment.image)
#   scripts/claude-standin.sh uninstall [DIR]  removes DIR/claude if it is the stand-in
#
# It never replaces a `claude` that is not the stand-in.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
standin="$here/examples/claude-standin/claude"
marker="agentic-sandbox claude stand-in"
DEMO_REPO=/tmp/agentic-demo-repo
IMAGE=agentic-sandbox/claude-standin

default_dir() {
	if [ "$(id -u)" = 0 ]; then echo /usr/local/bin; else echo "$HOME/.local/bin"; fi
}

install_standin() {
	dir="${1:-$(default_dir)}"
	mkdir -p "$dir"
	if [ -e "$dir/claude" ] && ! grep -q "$marker" "$dir/claude" 2>/dev/null; then
		echo "claude-standin: $dir/claude is not the stand-in (a real Claude Code?): left alone" >&2
		exit 1
	fi
	cp "$standin" "$dir/claude.standin.$$"
	chmod 755 "$dir/claude.standin.$$"
	mv -f "$dir/claude.standin.$$" "$dir/claude"
	echo "claude-standin: installed $dir/claude (a stand-in, not Claude Code; 'scripts/claude-standin.sh uninstall $dir' removes it)"
	case ":$PATH:" in
	*":$dir:"*) ;;
	*) echo "claude-standin: $dir is not on PATH: start agentic-mgmt with PATH=$dir:\$PATH so its host agents find it" >&2 ;;
	esac
}

uninstall_standin() {
	dir="${1:-$(default_dir)}"
	if [ -e "$dir/claude" ] && grep -q "$marker" "$dir/claude" 2>/dev/null; then
		rm -f "$dir/claude"
		echo "claude-standin: removed $dir/claude"
	fi
}

demo_repo() {
	repo="${1:-$DEMO_REPO}"
	if [ -e "$repo" ]; then
		if [ ! -O "$repo" ] || [ ! -d "$repo/.git" ]; then
			echo "claude-standin: $repo exists and is not a demo repository of yours: left alone" >&2
			exit 1
		fi
		echo "claude-standin: demo repository $repo is there already"
		return
	fi
	mkdir -p "$repo"
	(
		cd "$repo"
		git init -q -b main
		printf '# Demo\n\nA repository for trying agentic-sandbox tasks.\n' >README.md
		printf 'hello\n' >hello.txt
		git add -A
		git -c user.name=agentic-sandbox -c user.email=demo@agentic-sandbox.invalid commit -q -m "demo repository"
	)
	# A server running as root reads local repositories as nobody (see
	# AGENTIC_TASK_REPO_DIRS in the README): everyone may read this one.
	chmod -R a+rX "$repo"
	echo "claude-standin: made demo repository $repo (branch main)"
}

image() {
	command -v docker >/dev/null || { echo "claude-standin: no docker CLI" >&2; exit 1; }
	if ! docker image inspect agentic-sandbox/base:busybox >/dev/null 2>&1; then
		echo "claude-standin: the base image agentic-sandbox/base:busybox is not on this engine yet: create one Docker environment first (agentic-mgmt imports it then)" >&2
		exit 1
	fi
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' EXIT
	cp "$standin" "$ctx/claude"
	printf 'FROM agentic-sandbox/base:busybox\nCOPY claude /usr/local/bin/claude\n' >"$ctx/Dockerfile"
	docker build -q -t "$IMAGE" "$ctx" >/dev/null
	echo "claude-standin: built image $IMAGE (environment: {runtime: docker, image: $IMAGE})"
}

case "${1:-all}" in
all)
	install_standin ""
	demo_repo ""
	echo "next: bin/agenticctl task submit -f examples/tasks/claude-standin.yaml --follow"
	;;
install) install_standin "${2:-}" ;;
uninstall) uninstall_standin "${2:-}" ;;
demo-repo) demo_repo "${2:-}" ;;
image) image ;;
*)
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
	exit 2
	;;
esac
