#!/usr/bin/env bash
# cluster-up.sh — start the throw-away single-node Kubernetes test cluster (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, a private containerd with CRI,
# kubelet) from the binaries scripts/kubernetes-test-env.sh built, with the pause and
# workload images it built imported (no registry). Adapted from ../shared/k8s (run there
# end to end on this machine kind). The Go test harness (cmd/internal/harness/kubernetes.go)
# runs it under its machine-wide lock and always runs cluster-down.sh after it.
#
# Everything lives under $AGENTIC_K8S_STATE (default /tmp/agentic-k8s); sockets and ports are
# private (not the shared recipe's, so the two do not collide on them; they still cannot run
# at once: the kubelet's device-plugin socket path is fixed).
# Afterwards:  export KUBECONFIG=$AGENTIC_K8S_STATE/run/admin.kubeconfig
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
EXP=${AGENTIC_K8S_STATE:-/tmp/agentic-k8s}
OUTD=${AGENTIC_K8S_DIR:-$(cd "$HERE/../.." && pwd)/build/k8s}
BIN=$OUTD/bin
IMAGES=$OUTD/images
RUN=$EXP/run
PKI=$RUN/pki
LOGD=$RUN/log
PIDD=$RUN/pids
NODE_NAME=agentic-k8s-node
ETCD_PORT=22379
ETCD_PEER_PORT=22380
API_PORT=${AGENTIC_K8S_API_PORT:-26443}
KCM_PORT=20357
SCHED_PORT=20359
KUBELET_PORT=20350
KUBELET_HEALTHZ_PORT=20348
CTRD_SOCK=$EXP/containerd.sock
POD_CIDR=10.246.0.0/24
POD_GW=10.246.0.1
SVC_CIDR=10.97.0.0/16
SVC_IP=10.97.0.1
BRIDGE=agk8s0
CGROUP_ROOT=agentic-k8s
SNAPSHOTTER=overlayfs
PAUSE_IMAGE=localhost/agentic-test/pause:1
WORKLOAD_IMAGE=localhost/agentic-test/workload:1
TIMEOUT=${TIMEOUT:-120}
KUBECTL="$BIN/kubectl --kubeconfig=$RUN/admin.kubeconfig"

T0=$(date +%s.%N)
ts() { awk -v a="$T0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[%6.2fs] %s\n", b-a, m}'; }
die() { echo "cluster-up: ERROR: $*" >&2; echo "logs: $LOGD; clean up with cluster-down.sh" >&2; exit 1; }

# wait_for DESC CMD... : poll CMD every 0.2s until success or $TIMEOUT seconds
wait_for() {
  local desc=$1; shift
  local end=$(( $(date +%s) + TIMEOUT ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "timed out waiting for $desc"
    sleep 0.2
  done
  ts "$desc: ok"
}

# start NAME CMD... : run CMD detached in its own session, log to $LOGD/NAME.log, pid to $PIDD/NAME
start() {
  local name=$1; shift
  setsid "$@" </dev/null >"$LOGD/$name.log" 2>&1 &
  echo $! >"$PIDD/$name"
  ts "started $name (pid $!)"
}
alive() { kill -0 "$(cat "$PIDD/$1")" 2>/dev/null || die "$1 exited; see $LOGD/$1.log: $(tail -3 "$LOGD/$1.log")"; }

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [ -x "$BIN/$b" ] || die "missing binary $BIN/$b (run scripts/kubernetes-test-env.sh)"
done
for b in containerd containerd-shim-runc-v2 runc ctr openssl curl ip; do
  command -v "$b" >/dev/null || die "missing host tool $b"
done
[ -x /usr/lib/cni/bridge ] || die "missing CNI plugins (run scripts/kubernetes-test-env.sh)"
if [ -d "$RUN" ] && ls "$PIDD"/* >/dev/null 2>&1; then
  die "$RUN exists with pid files; run cluster-down.sh first"
fi
rm -rf "$RUN"
mkdir -p "$PKI" "$LOGD" "$PIDD" "$RUN/etcd" "$RUN/cni/net.d" "$RUN/cni/ipam" "$RUN/containerd" \
         "$RUN/kubelet/root" "$RUN/pod-logs"
chmod 700 "$RUN/etcd"
NODE_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for(i=1;i<NF;i++) if($i=="src"){print $(i+1); exit}}')
NODE_IP=${NODE_IP:-127.0.0.1}
echo "$NODE_IP" >"$RUN/node-ip"
ts "node ip $NODE_IP"

# ---------------------------------------------------------------- certificates (EC P-256)
(
  cd "$PKI"
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
  openssl req -x509 -new -key ca.key -subj "/CN=agentic-k8s-ca" -days 3650 -out ca.crt 2>/dev/null
  mkcert() { # name CN O EKU [SAN]
    local n=$1 cn=$2 o=$3 eku=$4 san=${5:-}
    openssl ecparam -name prime256v1 -genkey -noout -out "$n.key" 2>/dev/null
    openssl req -new -key "$n.key" -subj "${o:+/O=$o}/CN=$cn" -out "$n.csr" 2>/dev/null
    { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=$eku"; [ -z "$san" ] || echo "subjectAltName=$san"; } >"$n.ext"
    openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
      -extfile "$n.ext" -out "$n.crt" 2>/dev/null
    rm -f "$n.csr" "$n.ext"
  }
  mkcert apiserver kube-apiserver "" serverAuth \
    "IP:127.0.0.1,IP:$SVC_IP,IP:$NODE_IP,IP:$POD_GW,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  mkcert admin admin system:masters clientAuth
  mkcert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
  mkcert controller-manager system:kube-controller-manager "" clientAuth
  mkcert scheduler system:kube-scheduler "" clientAuth
  mkcert kubelet "system:node:$NODE_NAME" system:nodes clientAuth
  openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
  openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
)
mkkubeconfig() { # file user
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentic-k8s
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"}
contexts:
- name: agentic-k8s
  context: {cluster: agentic-k8s, user: $2}
current-context: agentic-k8s
EOF
}
mkkubeconfig "$RUN/admin.kubeconfig" admin
mkkubeconfig "$RUN/controller-manager.kubeconfig" controller-manager
mkkubeconfig "$RUN/scheduler.kubeconfig" scheduler
mkkubeconfig "$RUN/kubelet.kubeconfig" kubelet
ts "certificates and kubeconfigs written"

# ---------------------------------------------------------------- etcd
start etcd "$BIN/etcd" --name agentic-k8s --data-dir "$RUN/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "agentic-k8s=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn

for i in pause workload; do
  [ -s "$IMAGES/$i.tar" ] || die "missing image $IMAGES/$i.tar (run scripts/kubernetes-test-env.sh)"
done

# ---------------------------------------------------------------- containerd (private, CRI)
sysctls="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"
if [ ! -s "$EXP/sysctl.saved" ]; then  # kubelet rewrites these host-wide; cluster-down restores them
  for s in $sysctls; do echo "$s $(cat /proc/sys/$s)"; done >"$EXP/sysctl.saved"
fi
cat >"$RUN/containerd/config.toml" <<EOF
version = 2
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$RUN/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    restrict_oom_score_adj = true
    disable_apparmor = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "$SNAPSHOTTER"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUN/containerd/runc-root"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$RUN/cni/net.d"
      max_conf_num = 1
EOF
# gVisor: the CRI runtime handler "runsc" (what RuntimeClass gvisor names), when
# test/k8s/build-gvisor.sh built runsc and its shim. containerd runs the shim by its
# runtime_type (io.containerd.runsc.v1 → containerd-shim-runsc-v1, found on its PATH: a
# directory holding that one link); the shim runs runsc with the systrap platform (ptrace
# also works; KVM hangs on this machine kind) and, inside the sandbox, the pod's own
# seccomp profile (oci-seccomp: runsc ignores it otherwise).
GVISOR=0
if [ -x "$BIN/runsc" ] && [ -x "$BIN/containerd-shim-runsc-v1" ]; then
  GVISOR=1
  mkdir -p "$RUN/shimbin"
  ln -s "$BIN/containerd-shim-runsc-v1" "$RUN/shimbin/containerd-shim-runsc-v1"
  cat >"$RUN/runsc.toml" <<EOF
binary_name = "$BIN/runsc"
root = "$RUN/containerd/runsc-root"
[runsc_config]
  platform = "${AGENTIC_K8S_RUNSC_PLATFORM:-systrap}"
  oci-seccomp = "true"
EOF
  cat >>"$RUN/containerd/config.toml" <<EOF
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
    TypeUrl = "io.containerd.runsc.v1.options"
    ConfigPath = "$RUN/runsc.toml"
EOF
  ts "gVisor: runtime handler runsc (platform ${AGENTIC_K8S_RUNSC_PLATFORM:-systrap})"
fi
cat >"$RUN/cni/net.d/10-agentic-k8s.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "agentic-k8s",
  "plugins": [
    { "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "dataDir": "$RUN/cni/ipam",
                "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$POD_GW" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } }
  ]
}
EOF
if [ "$SNAPSHOTTER" = overlayfs ]; then  # nested overlayfs can be refused inside some containers
  o=$RUN/containerd/ovl-probe; mkdir -p "$o/l" "$o/u" "$o/w" "$o/m"
  if mount -t overlay overlay -o "lowerdir=$o/l,upperdir=$o/u,workdir=$o/w" "$o/m" 2>/dev/null; then
    umount "$o/m"
  else
    SNAPSHOTTER=native; sed -i 's/snapshotter = "overlayfs"/snapshotter = "native"/' "$RUN/containerd/config.toml"
    ts "overlayfs mount refused: using the native snapshotter"
  fi
  rm -rf "$o"
fi
start containerd env PATH="$RUN/shimbin:$PATH" containerd --config "$RUN/containerd/config.toml" --log-level info
CTR="ctr -a $CTRD_SOCK -n k8s.io"

# ---------------------------------------------------------------- kube-apiserver
wait_for "etcd healthy" curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=0.0.0.0 --secure-port="$API_PORT" --advertise-address="$NODE_IP" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-cluster-ip-range="$SVC_CIDR" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --allow-privileged=true --profiling=false --v=1

# import images while the apiserver starts
wait_for "containerd socket" $CTR version
$CTR images import --snapshotter "$SNAPSHOTTER" "$IMAGES/pause.tar" >/dev/null
$CTR images import --snapshotter "$SNAPSHOTTER" "$IMAGES/workload.tar" >/dev/null
ts "images imported: $($CTR images ls -q | grep -c agentic-test)"

wait_for "kube-apiserver /readyz" $KUBECTL get --raw /readyz
start kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$RUN/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$RUN/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$RUN/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
  --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
  --use-service-account-credentials=true --service-cluster-ip-range="$SVC_CIDR" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --profiling=false --v=1
start kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$RUN/scheduler.kubeconfig" \
  --authentication-kubeconfig="$RUN/scheduler.kubeconfig" \
  --authorization-kubeconfig="$RUN/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false --profiling=false --v=1

# ---------------------------------------------------------------- kubelet
# cgroup v1: create our own cgroup root in every mounted hierarchy (cpuset needs cpus/mems copied)
for d in /sys/fs/cgroup/*/; do
  d=${d%/}; [ "$d" = /sys/fs/cgroup/unified ] && continue
  [ -e "$d/cgroup.procs" ] || continue
  mkdir -p "$d/$CGROUP_ROOT"
done
if [ -e /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$CGROUP_ROOT/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$CGROUP_ROOT/cpuset.mems"
fi
cat >"$RUN/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CTRD_SOCK
imageServiceEndpoint: unix://$CTRD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
podLogsDir: $RUN/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
EOF
alive containerd
start kubelet "$BIN/kubelet" --config="$RUN/kubelet/config.yaml" --kubeconfig="$RUN/kubelet.kubeconfig" \
  --root-dir="$RUN/kubelet/root" --cert-dir="$RUN/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1

node_ready() {
  [ "$($KUBECTL get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for "node $NODE_NAME Ready" node_ready
for p in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet; do alive $p; done
# the default service account must exist before pods can be created in 'default'
sa_ready() { $KUBECTL -n default get serviceaccount default; }
wait_for "serviceaccount default/default" sa_ready
if [ "$GVISOR" = 1 ]; then  # the tier's RuntimeClass (AGENTIC_K8S_RUNTIME_CLASSES=gvisor=gvisor)
  printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n' |
    $KUBECTL apply -f - >/dev/null || die "RuntimeClass gvisor"
  ts "RuntimeClass gvisor (handler runsc)"
fi
ts "cluster up. export KUBECONFIG=$RUN/admin.kubeconfig   (images: $PAUSE_IMAGE, $WORKLOAD_IMAGE)"
