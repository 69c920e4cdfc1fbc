#!/usr/bin/env bash
# Prepares the Kubernetes test cluster (issue 28): installs containerd, runc and the
# CNI plugins from Debian when missing, builds etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kubectl from the
# k8s.io/kubernetes v1.34 module source (test/k8s/build: a module of its own
# whose staging modules are replaced by their v0.34 releases; the Go build
# cache makes a second run take seconds), and builds the pause and workload
# images as image archives (no registry, no Docker). Nothing is started here:
# the tests start one private cluster per run (cmd/internal/harness/kubernetes.go,
# test/k8s/cluster-up.sh).
#
# The kubernetes runtime's test set-up: `make test-env` runs it (as every
# scripts/*-test-env.sh), and the tests that need the cluster skip without
# what it installs (fail under CI). Idempotent: a second run installs
# nothing and rebuilds from the Go build cache in seconds.
#
# Output: $AGENTIC_K8S_DIR (default <repo>/build/k8s): bin/ (the binaries),
# images/{pause,workload}.tar, build-times.txt (seconds per step, this run).
set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin:/usr/local/go/bin"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${AGENTIC_K8S_DIR:-$ROOT/build/k8s}
K8S_VERSION=v1.34.4     # must match test/k8s/build/go.mod
mkdir -p "$OUT/bin" "$OUT/images"

# ------------------------------------------------------------ Debian packages
need=""
command -v containerd >/dev/null 2>&1 || need="$need containerd"
command -v runc >/dev/null 2>&1 || need="$need runc"
[ -x /usr/lib/cni/bridge ] || need="$need containernetworking-plugins"
dpkg -s busybox-static >/dev/null 2>&1 || need="$need busybox-static"
for t in openssl curl ip:iproute2; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need="$need ${t##*:}"
done
if [ -n "$need" ]; then
  echo "kubernetes-test-env: installing:$need" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  # $need unquoted: one word per package.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need
fi
# Debian starts a system containerd on install; the cluster runs its own private one.

# ------------------------------------------------------------ binaries
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
LDF="-s -w"
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF="$LDF -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=34 -X $v.gitTreeState=clean"
done
times="$OUT/build-times.txt"
: >"$times"
T0=$(now)
cd "$ROOT/test/k8s/build"
t=$(now); go mod download; echo "download $(secs "$t" "$(now)")" >>"$times"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  t=$(now)
  pkg=k8s.io/kubernetes/cmd/$cmd
  go build -trimpath -ldflags "$LDF" -o "$OUT/bin/$cmd" "$pkg"
  echo "$cmd $(secs "$t" "$(now)")" >>"$times"
done
t=$(now); go build -trimpath -ldflags "-s -w" -o "$OUT/bin/etcd" ./etcd; echo "etcd $(secs "$t" "$(now)")" >>"$times"
echo "total $(secs "$T0" "$(now)")" >>"$times"

# ------------------------------------------------------------ images
IMG="$ROOT/test/k8s/images"
t=$(now)
( cd "$IMG" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$OUT/bin/pause" ./pause \
            && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$OUT/bin/probe" ./workload )
python3 "$IMG/mkimage.py" "$OUT/images/pause.tar.tmp" localhost/agentic-test/pause:1 \
  --add "$OUT/bin/pause:/pause" --entrypoint '["/pause"]'
BB=/bin/busybox; [ -x "$BB" ] || BB=$(command -v busybox)
links=(); for a in $("$BB" --list); do [ "$a" = busybox ] || links+=(--link "/bin/$a:busybox"); done
python3 "$IMG/mkimage.py" "$OUT/images/workload.tar.tmp" localhost/agentic-test/workload:1 \
  --add "$BB:/bin/busybox" --add "$OUT/bin/probe:/usr/local/bin/probe" \
  --dir /tmp --dir /etc --dir /root "${links[@]}" --cmd '["sh"]'
mv "$OUT/images/pause.tar.tmp" "$OUT/images/pause.tar"
mv "$OUT/images/workload.tar.tmp" "$OUT/images/workload.tar"
echo "images $(secs "$t" "$(now)")" >>"$times"
echo "kubernetes-test-env: built in $OUT (seconds):" >&2
cat "$times" >&2
# gVisor's runsc and shim (the gvisor tier; cluster-up.sh registers them): times in build-times-gvisor.txt
AGENTIC_K8S_DIR=$OUT "$ROOT/test/k8s/build-gvisor.sh"
