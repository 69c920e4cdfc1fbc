#!/usr/bin/env bash
# cluster-down.sh — stop everything cluster-up.sh started and undo its host changes (from
# ../shared/k8s). Only processes recorded in $RUN/pids, or provably belonging to this cluster
# (command line mentions $RUN or our containerd socket, or living in our cgroup subtree), are
# killed — by PID. Safe to run when nothing is up. KEEP=1 keeps $RUN (logs, etcd data).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EXP=${AGENTIC_K8S_STATE:-/tmp/agentic-k8s}
OUTD=${AGENTIC_K8S_DIR:-$(cd "$HERE/../.." && pwd)/build/k8s}
BIN=$OUTD/bin
RUN=$EXP/run
PIDD=$RUN/pids
CTRD_SOCK=$EXP/containerd.sock
BRIDGE=agk8s0
CGROUP_ROOT=agentic-k8s
KUBECTL="$BIN/kubectl --kubeconfig=$RUN/admin.kubeconfig --request-timeout=5s"
CTR="ctr -a $CTRD_SOCK -n k8s.io"
T0=$(date +%s.%N)
ts() { awk -v a="$T0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[%6.2fs] %s\n", b-a, m}'; }

ours() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -qF -e "$RUN" -e "$CTRD_SOCK"; }
stop() { # NAME... : SIGTERM all, wait up to 10 s, then SIGKILL
  local n pid i pids=()
  for n in "$@"; do
    [ -f "$PIDD/$n" ] || continue
    pid=$(cat "$PIDD/$n")
    if kill -0 "$pid" 2>/dev/null && ours "$pid"; then kill -TERM "$pid"; pids+=("$n:$pid"); fi
  done
  for i in $(seq 1 100); do
    local left=0; for n in "${pids[@]}"; do kill -0 "${n#*:}" 2>/dev/null && left=1; done
    [ $left = 0 ] && break; sleep 0.1
  done
  for n in "${pids[@]}"; do kill -0 "${n#*:}" 2>/dev/null && kill -KILL "${n#*:}" && ts "${n%%:*} killed (SIGKILL)"; done
  for n in "$@"; do rm -f "$PIDD/$n"; done
  ts "stopped $*"
}
alive() { [ -f "$PIDD/$1" ] && kill -0 "$(cat "$PIDD/$1")" 2>/dev/null; }

# 1. let the kubelet tear pods down through CRI (stops containers, CNI DEL, removes netns)
if alive kubelet && alive kube-apiserver; then
  $KUBECTL delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1
  for i in $(seq 1 100); do
    n=$($CTR tasks ls -q 2>/dev/null | wc -l); [ "$n" -eq 0 ] && break; sleep 0.2
  done
  ts "pods deleted (running tasks left: $($CTR tasks ls -q 2>/dev/null | wc -l))"
fi
stop kubelet kube-scheduler kube-controller-manager kube-apiserver
# 2. anything left in containerd: remember sandbox netns, kill and delete tasks/containers
NETNS=()
if alive containerd; then
  for c in $($CTR containers ls -q 2>/dev/null); do
    ns=$($CTR containers info "$c" 2>/dev/null | python3 -c 'import json,sys
try:
  for n in json.load(sys.stdin)["Spec"]["linux"]["namespaces"]:
    if n.get("type")=="network" and n.get("path"): print(n["path"])
except Exception: pass')
    [ -n "$ns" ] && NETNS+=("$ns")
    $CTR tasks kill -s SIGKILL "$c" >/dev/null 2>&1
  done
  sleep 0.5
  for c in $($CTR containers ls -q 2>/dev/null); do
    $CTR tasks delete -f "$c" >/dev/null 2>&1; $CTR containers delete "$c" >/dev/null 2>&1
  done
fi
stop containerd etcd
# 3. (after the control plane is stopped) leftover shims / runsc / container processes that are provably ours
ANCESTORS=" "; a=$$; while [ "$a" -gt 1 ] 2>/dev/null; do ANCESTORS+="$a "; a=$(awk '/^PPid:/{print $2}' /proc/$a/status 2>/dev/null || echo 0); done
for p in $(ls /proc | grep -E '^[0-9]+$'); do
  case "$ANCESTORS" in *" $p "*) continue;; esac
  ours "$p" || continue
  ts "killing leftover pid $p: $({ tr '\0' ' ' </proc/$p/cmdline; } 2>/dev/null | cut -c1-100)"; kill -KILL "$p" 2>/dev/null
done
for d in /sys/fs/cgroup/*/"$CGROUP_ROOT"; do
  [ -d "$d" ] || continue
  for p in $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$p" 2>/dev/null && ts "killed pid $p in $d"; done
done
# 4. mounts under $RUN (overlay rootfs, kubelet tmpfs volumes, ...) and our sandbox netns
for i in 1 2 3; do
  mnts=$(awk -v r="$RUN/" 'index($5, r)==1 {print $5}' /proc/self/mountinfo | sort -r)
  [ -z "$mnts" ] && break
  for m in $mnts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
for ns in "${NETNS[@]}"; do
  [ -e "$ns" ] && { umount "$ns" 2>/dev/null; rm -f "$ns"; ts "removed netns $ns"; }
done
# 5. cgroups, bridge, sysctls
for d in /sys/fs/cgroup/*/"$CGROUP_ROOT"; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  [ -d "$d" ] && sleep 0.5 && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  [ -d "$d" ] && echo "cluster-down: WARNING: could not remove $d" >&2
done
ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE" && ts "deleted bridge $BRIDGE"
if [ -s "$EXP/sysctl.saved" ]; then
  while read -r s v; do [ "$(cat /proc/sys/$s)" = "$v" ] || echo "$v" >"/proc/sys/$s"; done <"$EXP/sysctl.saved"
  rm -f "$EXP/sysctl.saved"; ts "restored sysctls"
fi
# 6. files the runtime/kubelet keep at fixed host paths: shim sockets of killed shims
#    (/run/containerd/s/sha256(<our socket>/k8s.io/<id>)), libcni result cache, kubelet device-plugin socket
listening=$(ss -xl 2>/dev/null | awk '{print $5}')
for id in $( { grep -ohE '[0-9a-f]{64}' "$RUN"/log/containerd.log 2>/dev/null; ls "$RUN/containerd/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null; } | sort -u); do
  h=/run/containerd/s/$(printf '%s' "$CTRD_SOCK/k8s.io/$id" | sha256sum | cut -d' ' -f1)
  [ -S "$h" ] && ! grep -qxF "$h" <<<"$listening" && rm -f "$h" && ts "removed stale shim socket $h"
  [ -e "/var/lib/cni/results/agentic-k8s-$id-eth0" ] && rm -f "/var/lib/cni/results/agentic-k8s-$id-eth0" "/var/lib/cni/results/cni-loopback-$id-lo"
done
dp=/var/lib/kubelet/device-plugins/kubelet.sock
[ -S "$dp" ] && ! grep -qxF "$dp" <<<"$listening" && rm -f "$dp"
rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni /run/netns 2>/dev/null
rm -f "$CTRD_SOCK" "$CTRD_SOCK.ttrpc"
[ "${KEEP:-0}" = 1 ] || rm -rf "$RUN"
ts "cluster down"
