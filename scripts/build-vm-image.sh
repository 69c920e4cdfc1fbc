#!/usr/bin/env bash
# Builds the project's tiny VM image for the libvirt runtime: a Debian kernel
# for direct boot and an initramfs holding busybox, the virtio modules, an
# init and the static agentic-agent.
#
#   scripts/build-vm-image.sh [-o OUT_DIR] [-a AGENT_BINARY] [-c CACHE_DIR]
#
#   OUT_DIR       where the image goes (default: build/vm in the repo; env VM_IMAGE_DIR)
#   AGENT_BINARY  a static agentic-agent (default: built with CGO_ENABLED=0; env AGENT_BINARY)
#   CACHE_DIR     kernel download cache (default: ~/.cache/agentic-sandbox/kernel; env VM_KERNEL_CACHE)
#
# Outputs in OUT_DIR:
#   vmlinux         the kernel, uncompressed ELF: QEMU boots it through its PVH
#                   entry point, which under TCG saves the ~8 s the compressed
#                   kernel spends in real-mode setup and decompression
#   vmlinuz         the same kernel as Debian ships it (for any other loader)
#   initrd.img      the initramfs, an uncompressed newc cpio (gunzip under TCG
#                   costs more boot time than the bigger file costs to load)
#   agent.sha256    sha256 of the agent inside initrd.img: the libvirt adapter
#                   skips appending an identical binary to a domain's initrd
#   kernel-version  the Debian kernel package
#
# Idempotent: the kernel package is downloaded and unpacked once per version
# into the cache; the initramfs is rebuilt every run (a few seconds) and
# every output is replaced atomically. The agent configuration is not in the
# image: the libvirt adapter appends a small cpio archive with
# /etc/agentic-sandbox/agent.env (and the server's agent binary) to a
# per-domain copy of initrd.img; Linux unpacks concatenated archives in order.
#
# Guest layout:
#   /init                       mounts proc/sys/dev, loads the virtio modules, execs busybox init
#   /etc/inittab                runs acpid (ACPI power button -> poweroff), respawns /sbin/agent-run
#   /sbin/agent-run             waits for the agent's virtio-serial port, names it
#                               /dev/virtio-ports/<name> as udev would, runs the agent
#   /usr/local/bin/agentic-agent
#   /etc/agentic-sandbox/agent.env   (from the per-domain archive)
# The agent reaches the server through the virtio-serial port of the domain's
# channel (MANAGEMENT_SERVER=serial:///dev/virtio-ports/io.agentic-sandbox.agent).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${VM_IMAGE_DIR:-$ROOT/build/vm}
AGENT=${AGENT_BINARY:-}
CACHE=${VM_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentic-sandbox/kernel}

while getopts "o:a:c:h" opt; do
	case $opt in
	o) OUT=$OPTARG ;;
	a) AGENT=$OPTARG ;;
	c) CACHE=$OPTARG ;;
	*) sed -n '2,10p' "$0"; exit 2 ;;
	esac
done

# Modules, in load order (no depmod/modprobe in the guest).
MODULES="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_console
virtio-rng failover net_failover virtio_net button evdev"

log() { echo "build-vm-image: $*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
need=""
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || need="$need busybox-static"
command -v cpio >/dev/null 2>&1 || need="$need cpio"
command -v xz >/dev/null 2>&1 || need="$need xz-utils"
if [ -n "$need" ]; then
	log "installing:$need"
	$SUDO apt-get update -qq
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need
fi
BUSYBOX=/bin/busybox

# --- kernel ---------------------------------------------------------------
mkdir -p "$CACHE"
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}' || true)
if [ -z "$kpkg" ]; then
	# Fall back to the newest unpacked kernel in the cache (offline, no apt lists).
	kpkg=$(ls -1 "$CACHE" 2>/dev/null | grep '^linux-image-' | sort -V | tail -1 || true)
fi
if [ -z "$kpkg" ]; then
	log "apt knows no linux-image-amd64; running apt-get update"
	$SUDO apt-get update -qq
	kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
[ -n "$kpkg" ] || { log "no Debian kernel package found"; exit 1; }
KDIR=$CACHE/$kpkg
if [ ! -f "$KDIR/.complete" ]; then
	log "downloading $kpkg into $CACHE"
	tmp=$(mktemp -d "$CACHE/.dl.XXXXXX")
	# _apt cannot write into a private dir: download as the current user.
	(cd "$tmp" && apt-get download -q "$kpkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
	deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1 || true)
	[ -n "$deb" ] || { rm -rf "$tmp"; log "apt-get download $kpkg failed"; exit 1; }
	dpkg-deb -x "$deb" "$tmp/x"
	rm -rf "$KDIR.new" && mkdir -p "$KDIR.new/modules"
	cp "$tmp"/x/boot/vmlinuz-* "$KDIR.new/vmlinuz"
	for m in $MODULES; do
		f=$(find "$tmp"/x/lib/modules -name "$m.ko" -o -name "$m.ko.xz" | head -1)
		[ -n "$f" ] || { rm -rf "$tmp"; log "module $m not in $kpkg"; exit 1; }
		case $f in *.xz) xz -dc "$f" >"$KDIR.new/modules/$m.ko" ;; *) cp "$f" "$KDIR.new/modules/$m.ko" ;; esac
	done
	rm -rf "$tmp" "$KDIR"
	touch "$KDIR.new/.complete"
	mv "$KDIR.new" "$KDIR"
fi

# extract_vmlinux BZIMAGE OUT: the ELF kernel inside a bzImage (its payload
# is xz for Debian; zstd and gzip are tried too).
extract_vmlinux() {
	local magic dec off
	for fmt in xz zstd gzip; do
		case $fmt in
		xz) magic='\xfd7zXZ\x00' dec="xz -dcq --single-stream" ;;
		zstd) magic='\x28\xb5\x2f\xfd' dec="zstd -dcq" ;;
		gzip) magic='\x1f\x8b\x08' dec="gzip -dcq" ;;
		esac
		command -v "${dec%% *}" >/dev/null 2>&1 || continue
		for off in $(LC_ALL=C grep -obUaP "$magic" "$1" | cut -d: -f1 | head -5); do
			# Trailing bytes after the payload make some decoders complain.
			tail -c +$((off + 1)) "$1" | $dec >"$2.tmp" 2>/dev/null || true
			if [ "$(head -c 4 "$2.tmp" | od -An -c | tr -d ' ')" = 177ELF ]; then
				mv "$2.tmp" "$2"
				return 0
			fi
		done
	done
	rm -f "$2.tmp"
	return 1
}

# The uncompressed kernel for PVH boot, once per cached kernel. Without a
# PVH entry (ELF note 0x12) QEMU cannot boot it: keep only vmlinuz then.
if [ ! -f "$KDIR/.vmlinux-done" ]; then
	rm -f "$KDIR/vmlinux"
	if extract_vmlinux "$KDIR/vmlinuz" "$KDIR/vmlinux"; then
		if command -v readelf >/dev/null 2>&1 && ! readelf -n "$KDIR/vmlinux" | grep -q 'Unknown note type: (0x00000012)'; then
			log "$kpkg has no PVH entry point; booting the compressed kernel"
			rm -f "$KDIR/vmlinux"
		fi
	else
		log "could not decompress $kpkg's vmlinuz; booting the compressed kernel"
	fi
	touch "$KDIR/.vmlinux-done"
fi

mkdir -p "$OUT"
STAGE=$(mktemp -d "$OUT/.stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT

# --- agent ----------------------------------------------------------------
if [ -z "$AGENT" ]; then
	AGENT=$STAGE/agentic-agent
	log "building a static agentic-agent"
	# Built as `make build` builds bin/agentic-agent (no -trimpath): the
	# same tree then gives the same binary, and the libvirt adapter, seeing
	# its sha256 in agent.sha256, appends no second copy to each domain's
	# initrd. A second copy costs every VM ~36 MB of guest RAM (in the
	# initrd, then the replaced file in the initramfs), and a hibernated
	# one as much on disk and in the restore (measured: docs/vm-restore.md).
	(cd "$ROOT" && CGO_ENABLED=0 go build -o "$AGENT" ./cmd/agentic-agent)
fi
[ -x "$AGENT" ] || { log "agent binary $AGENT is not executable"; exit 1; }
if ldd "$AGENT" >/dev/null 2>&1; then
	log "$AGENT is dynamically linked; build it with CGO_ENABLED=0"
	exit 1
fi

# --- initramfs ------------------------------------------------------------
R=$STAGE/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc/agentic-sandbox,etc/acpi/PWRF,lib/modules,proc,sys,dev,run,tmp,root,var/log}
chmod 1777 "$R/tmp"
chmod 0700 "$R/root"
cp "$BUSYBOX" "$R/bin/busybox"
for applet in $("$BUSYBOX" --list-full); do
	[ "$applet" = bin/busybox ] && continue
	[ -e "$R/$applet" ] || ln -s /bin/busybox "$R/$applet"
done
install -m 0755 "$AGENT" "$R/usr/local/bin/agentic-agent"
for m in $MODULES; do cp "$KDIR/modules/$m.ko" "$R/lib/modules/"; done
echo "$MODULES" | tr ' ' '\n' | grep . >"$R/lib/modules/load-order"

cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
EOF
cat >"$R/etc/group" <<'EOF'
root:x:0:
EOF
echo "nameserver 10.0.2.3" >"$R/etc/resolv.conf"

cat >"$R/init" <<'EOF'
#!/bin/sh
# agentic-sandbox tiny VM: PID 1 until it hands over to busybox init.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin:/usr/local/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
while read -r m; do
	insmod "/lib/modules/$m.ko" || echo "agentic-init: insmod $m failed"
done </lib/modules/load-order
id=$(sed -n 's/^AGENT_ID=//p' /etc/agentic-sandbox/agent.env 2>/dev/null)
hostname "${id:-agentic-vm}"
ip link set lo up
# QEMU user networking (only when the domain has a NIC): its fixed addresses.
if [ -e /sys/class/net/eth0 ]; then
	ip link set eth0 up
	ip addr add 10.0.2.15/24 dev eth0
	ip route add default via 10.0.2.2
fi
echo "agentic-init: userspace up at $(cut -d' ' -f1 /proc/uptime)s"
exec /sbin/init
EOF
chmod 0755 "$R/init"

cat >"$R/etc/inittab" <<'EOF'
::sysinit:/sbin/acpid -c /etc/acpi -l /dev/null
::respawn:/sbin/agent-run
::ctrlaltdel:/sbin/poweroff
::shutdown:/bin/echo agentic-init: powering off
EOF

cat >"$R/etc/acpi/PWRF/00000080" <<'EOF'
#!/bin/sh
echo "agentic-init: ACPI power button" >/dev/console
exec /sbin/poweroff
EOF
chmod 0755 "$R/etc/acpi/PWRF/00000080"

cat >"$R/sbin/agent-run" <<'EOF'
#!/bin/sh
CONF=/etc/agentic-sandbox/agent.env
export PATH=/sbin:/bin:/usr/sbin:/usr/bin:/usr/local/bin HOME=/root USER=root SHELL=/bin/sh
cd /root
if [ ! -s "$CONF" ]; then
	echo "agentic-init: no $CONF; the agent cannot start"
	sleep 30
	exit 1
fi
# virtio-serial ports come up when the guest handles the host's port-add
# message, which may be after /init ran: wait for the agent's port, naming
# the ports /dev/virtio-ports/<name> as udev would (there is no udev).
port=$(sed -n 's|^MANAGEMENT_SERVER=serial://||p' "$CONF")
i=0
while :; do
	mkdir -p /dev/virtio-ports
	for p in /sys/class/virtio-ports/*; do
		[ -e "$p/name" ] && ln -sfn "/dev/${p##*/}" "/dev/virtio-ports/$(cat "$p/name")"
	done
	if [ -z "$port" ] || [ -e "$port" ] || [ $i -ge 100 ]; then break; fi
	sleep 0.1
	i=$((i + 1))
done
echo "agentic-init: agent starting at $(cut -d' ' -f1 /proc/uptime)s"
/usr/local/bin/agentic-agent
echo "agentic-init: agent exited ($?); restarting"
sleep 1
EOF
chmod 0755 "$R/sbin/agent-run"

# Uncompressed: see the header.
(cd "$R" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet) >"$STAGE/initrd.img"
sha256sum "$R/usr/local/bin/agentic-agent" | cut -d' ' -f1 >"$STAGE/agent.sha256"
echo "$kpkg" >"$STAGE/kernel-version"
cp "$KDIR/vmlinuz" "$STAGE/vmlinuz"
outputs="vmlinuz initrd.img agent.sha256 kernel-version"
if [ -f "$KDIR/vmlinux" ]; then
	cp "$KDIR/vmlinux" "$STAGE/vmlinux"
	outputs="vmlinux $outputs"
else
	rm -f "$OUT/vmlinux"
fi
for f in $outputs; do
	chmod 0644 "$STAGE/$f"
	mv -f "$STAGE/$f" "$OUT/$f"
done
log "$OUT: $outputs ($kpkg; initrd.img $(du -h "$OUT/initrd.img" | cut -f1))"
