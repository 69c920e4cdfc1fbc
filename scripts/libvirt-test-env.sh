#!/usr/bin/env bash
# Sets up libvirt + QEMU for the libvirt runtime tests, idempotently:
# installs the Debian packages only when missing, then starts virtlogd and
# libvirtd (there is no systemd here) unless they run, and waits for the
# daemon's socket. Must run as root (or with sudo available).
set -euo pipefail

SOCK=/var/run/libvirt/libvirt-sock
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

need=""
command -v libvirtd >/dev/null 2>&1 || [ -x /usr/sbin/libvirtd ] || need="$need libvirt-daemon-system"
command -v virsh >/dev/null 2>&1 || need="$need libvirt-clients"
command -v qemu-system-x86_64 >/dev/null 2>&1 || need="$need qemu-system-x86"
command -v qemu-img >/dev/null 2>&1 || need="$need qemu-utils"
command -v cpio >/dev/null 2>&1 || need="$need cpio"
# Cloud-init seed ISOs for disk images (the tiny image needs none).
command -v genisoimage >/dev/null 2>&1 || need="$need genisoimage"
if [ -n "$need" ]; then
	echo "libvirt-test-env: installing:$need" >&2
	$SUDO apt-get update -qq
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need
fi

export PATH="$PATH:/usr/sbin:/sbin"

# Debian's udev rule makes /dev/kvm root:kvm 0660; without udev it stays
# root-only 0600. libvirtd then finds KVM "not available now" for the QEMU
# user although its capability probe saw it, throws its capabilities cache
# away and re-probes QEMU on every define and start (about 30 s each). The
# adapter itself never uses KVM where it hangs (see Config.Accel).
if [ -c /dev/kvm ] && getent group kvm >/dev/null && [ "$(stat -c %G:%a /dev/kvm)" != kvm:660 ]; then
	$SUDO chgrp kvm /dev/kvm
	$SUDO chmod 0660 /dev/kvm
fi

running() { pgrep -x "$1" >/dev/null 2>&1; }

if ! running virtlogd; then
	$SUDO virtlogd -d
fi
if ! running libvirtd; then
	$SUDO libvirtd -d
fi

for _ in $(seq 1 100); do
	if [ -S "$SOCK" ]; then
		exit 0
	fi
	sleep 0.1
done
echo "libvirt-test-env: $SOCK did not appear" >&2
exit 1
