#!/usr/bin/env bash
# test/k8s/build-gvisor.sh — gVisor for the Kubernetes test cluster (issue 28:
# the `gvisor` isolation tier). Builds runsc and containerd-shim-runsc-v1 from
# the gvisor.dev/gvisor Go module (the proxy's pseudo-version of gVisor's
# Go-buildable branch, pinned with its whole graph in test/k8s/gvisor/go.mod and
# go.sum) into $AGENTIC_K8S_DIR/bin (default <repo>/build/k8s/bin), where
# test/k8s/cluster-up.sh finds them and registers the CRI runtime handler
# `runsc` (platform systrap). Debian's runsc (2022) has no systrap and fails in
# pods; the KVM platform hangs on this machine kind.
#
# Two changes to the module's source, made in a vendored copy (`go mod
# vendor` of that module under $AGENTIC_K8S_DIR/gvisor-src, remade on every
# run from the checksummed module cache; the Go build cache still caches
# everything, so a second run takes seconds):
#   1. gvisor pkg/shim/v1/manager.go: the shim lowers the sandbox's
#      oom_score_adj, which needs CAP_SYS_RESOURCE; where that is refused
#      (EPERM/EACCES, an unprivileged or nested container) it goes on, as
#      containerd's own runc shim does.
#   2. containerd/v2 pkg/shim/shim.go: `start` prints the bare ttrpc address
#      instead of containerd 2's JSON bootstrap parameters. containerd 1.6
#      (Debian's) reads the address verbatim; 1.7 and 2.x take a bare address
#      as a ttrpc one, so the shim works with all of them.
# A patch that no longer applies (a new pinned version) fails the build.
#
# Idempotent; run by scripts/kubernetes-test-env.sh. Seconds per step go to
# $AGENTIC_K8S_DIR/build-times-gvisor.txt.
set -euo pipefail

export PATH="$PATH:/usr/local/go/bin"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${AGENTIC_K8S_DIR:-$ROOT/build/k8s}
MOD=$ROOT/test/k8s/gvisor
mkdir -p "$OUT/bin"

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
times=$OUT/build-times-gvisor.txt
: >"$times"
T0=$(now)

# The build module: test/k8s/gvisor's go.mod, go.sum and tools.go, vendored.
SRC=$OUT/gvisor-src
rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
cp "$MOD/go.mod" "$MOD/go.sum" "$MOD/tools.go" "$SRC.tmp/"
cd "$SRC.tmp"
t=$(now); go mod download && go mod vendor; echo "download+vendor $(secs "$t" "$(now)")" >>"$times"
GVISOR_VERSION=$(go list -mod=mod -m -f '{{.Version}}' gvisor.dev/gvisor)

# patch FILE OLD NEW: the one line OLD of FILE becomes NEW.
patch() {
  local f=$1 old=$2 new=$3
  [ "$(grep -cxF -- "$old" "$f")" = 1 ] || { echo "build-gvisor: $f: no single line '$old' to patch" >&2; exit 1; }
  awk -v old="$old" -v new="$new" '$0 == old { print new; next } { print }' "$f" >"$f.new"
  mv "$f.new" "$f"
}
patch vendor/gvisor.dev/gvisor/pkg/shim/v1/manager.go \
  $'\tif err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {' \
  $'\tif err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil && !os.IsPermission(err) {'
patch vendor/github.com/containerd/containerd/v2/pkg/shim/shim.go \
  $'\t\tdata, err := json.Marshal(&params)' \
  $'\t\tdata, err := []byte(params.Address), error(nil); _ = json.Marshal'
rm -rf "$SRC" && mv "$SRC.tmp" "$SRC" && cd "$SRC"

# build PKG NAME: a static binary, replaced atomically (a running cluster's
# containerd may be executing the old one).
build() {
  local t; t=$(now)
  CGO_ENABLED=0 go build -mod=vendor -trimpath \
    -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" \
    -o "$OUT/bin/$2.tmp" "$1"
  mv "$OUT/bin/$2.tmp" "$OUT/bin/$2"
  echo "$2 $(secs "$t" "$(now)")" >>"$times"
}
build gvisor.dev/gvisor/runsc runsc
build gvisor.dev/gvisor/shim containerd-shim-runsc-v1
echo "total $(secs "$T0" "$(now)")" >>"$times"

# sed reads it all: head would close the pipe early, and pipefail would
# fail the build on runsc's SIGPIPE whenever it wrote more in time.
"$OUT/bin/runsc" --version | sed -n 1p >&2
echo "build-gvisor: runsc and containerd-shim-runsc-v1 in $OUT/bin (seconds):" >&2
cat "$times" >&2
