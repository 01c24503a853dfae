#!/usr/bin/env bash
# make selinux-test: the registrar, the test CSI driver and kubelet's plugin
# manager (test/kubelet's fakekubelet, as /bin/kubelet) as real processes in a
# qemu VM whose Linux kernel enforces a small SELinux policy
# (test/selinuxvm/policy.cil): the registration works where the policy allows
# it, and where it denies kubelet or the registrar, the registrar fails the
# way it says. See test/selinuxvm/README.md.
#
#   1. installs qemu-system-x86, secilc and cpio with apt-get when missing;
#   2. downloads Debian's kernel package (the version linux-image-amd64
#      depends on) with apt-get download into $SELINUX_VM_CACHE (default
#      ${XDG_CACHE_HOME:-~/.cache}/registrar-selinux-vm) and keeps only its
#      vmlinuz: nothing is installed; SELINUX_VM_KERNEL=/path/to/bzImage
#      uses another kernel;
#   3. builds static binaries (CGO_ENABLED=0) of the registrar (or takes the
#      one SELINUX_VM_REGISTRAR names), the driver, fakekubelet and the
#      guest's /init (the test binary of test/selinuxvm/guest), runs that
#      package's host-side tests, compiles the policy with secilc, and packs
#      them into an initramfs (cpio newc, gzip);
#   4. boots it with lsm=...,selinux, and fails unless the guest printed
#      "SELINUXVM: PASS". The guest's output is printed as it comes.
#
# Accelerator: KVM when /dev/kvm can be opened for reading and writing and
# the CPU advertises virtualisation (vmx or svm; a VM whose nested KVM lacks
# them may hang while booting), TCG otherwise; SELINUX_VM_ACCEL=kvm or tcg
# chooses. The VM is given SELINUX_VM_TIMEOUT seconds (default 300 with
# KVM, 900 with TCG). Under KVM, a guest whose /init says nothing within
# SELINUX_VM_BOOT_WAIT s (default 60) is booted again with TCG.
# SELINUX_VM_RUN=<regexp> runs only the matching tests (go test's -run, e.g.
# SELINUX_VM_RUN=TestScenarios/C).
#
# Where the tools cannot be installed (not root, no apt-get, a failed
# apt-get, not amd64) it says SKIPPED and why, and exits 0; with CI set in
# the environment (other than false or 0) a skip fails (exit 1), as CI must
# run it.
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

skip() {
	echo "$script: SKIPPED: $*" >&2
	if [[ -n ${CI:-} && ${CI:-} != false && ${CI:-} != 0 ]]; then
		echo "$script: CI is set: a skipped suite fails the run" >&2
		exit 1
	fi
	exit 0
}

# need COMMAND PACKAGE: installs Debian's PACKAGE when COMMAND is missing,
# or skips saying why it could not.
apt_updated=''
need() {
	command -v "$1" >/dev/null 2>&1 && return
	[[ $(id -u) == 0 ]] || skip "$1 is missing and installing Debian's $2 needs root (apt-get install $2)"
	command -v apt-get >/dev/null 2>&1 || skip "$1 is missing and there is no apt-get to install $2"
	step "$1 is missing: installing Debian's $2 package with apt-get"
	if [[ -z $apt_updated ]]; then
		apt-get update -q || skip "apt-get update failed (above), so $2 cannot be installed"
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2" ||
		skip "apt-get install $2 failed (above)"
	command -v "$1" >/dev/null 2>&1 || skip "$1 is still missing after apt-get install $2"
}

[[ $(go env GOARCH) == amd64 ]] || skip "the VM runs Debian's amd64 kernel: this machine is $(go env GOARCH)"
need qemu-system-x86_64 qemu-system-x86
need secilc secilc
need cpio cpio

cache=${SELINUX_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/registrar-selinux-vm}
kernel=${SELINUX_VM_KERNEL:-}
if [[ -z $kernel ]]; then
	mkdir -p "$cache"
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	if [[ -z $pkg ]]; then
		[[ $(id -u) == 0 ]] || skip "apt knows no linux-image-amd64 and apt-get update needs root"
		apt-get update -q >/dev/null || skip "apt-get update failed, so apt knows no kernel package"
		pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
		[[ -n $pkg ]] || skip "apt knows no linux-image-amd64 package (not Debian?); set SELINUX_VM_KERNEL to a kernel with SELinux"
	fi
	kernel=$cache/vmlinuz-${pkg#linux-image-}
	if [[ ! -f $kernel ]]; then
		step "downloading Debian's $pkg-unsigned into $cache (its vmlinuz is kept, the package removed)"
		tmp=$(mktemp -d "$cache/download.XXXXXX")
		(cd "$tmp" && apt-get download -q "$pkg-unsigned" >/dev/null 2>&1) ||
			(cd "$tmp" && apt-get download -q "$pkg") ||
			skip "apt-get download $pkg-unsigned (or $pkg) failed"
		dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" ./boot
		grep -qx 'CONFIG_SECURITY_SELINUX=y' "$tmp"/boot/config-* ||
			fail "$pkg's kernel is built without SELinux (CONFIG_SECURITY_SELINUX)"
		mv "$tmp"/boot/vmlinuz-* "$kernel"
		rm -rf "$tmp"
	fi
fi
[[ -f $kernel ]] || fail "no kernel at $kernel"

out=$PWD/bin/selinuxvm
rm -rf "$out"
root=$out/root
mkdir -p "$root/bin" "$root/var/lib/kubelet"
start=$SECONDS
step "building the registrar, mockdriver, fakekubelet (as /bin/kubelet) and the guest's /init (CGO_ENABLED=0)"
export CGO_ENABLED=0
if [[ -n ${SELINUX_VM_REGISTRAR:-} ]]; then
	[[ -f $SELINUX_VM_REGISTRAR ]] || fail "SELINUX_VM_REGISTRAR=$SELINUX_VM_REGISTRAR: no such file"
	file=$(od -An -c -N4 "$SELINUX_VM_REGISTRAR" | tr -d ' ')
	[[ $file == 177ELF ]] || fail "SELINUX_VM_REGISTRAR=$SELINUX_VM_REGISTRAR is not an ELF binary"
	step "the registrar is $SELINUX_VM_REGISTRAR (SELINUX_VM_REGISTRAR): it must be static, built with CGO_ENABLED=0"
	cp "$SELINUX_VM_REGISTRAR" "$root/bin/registrar"
else
	go build -trimpath -o "$root/bin/registrar" ./cmd/registrar
fi
go build -trimpath -o "$root/bin/mockdriver" ./test/mockdriver
(cd test/kubelet/v1.37 && go build -trimpath -o "$root/bin/kubelet" .)
(cd test/selinuxvm && go test -c -trimpath -o "$root/init" ./guest)
secilc -o "$root/policy.bin" -f /dev/null test/selinuxvm/policy.cil ||
	fail "secilc could not compile test/selinuxvm/policy.cil (above)"
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$out/initramfs.cpio.gz"
step "built in $((SECONDS - start)) s: $out/initramfs.cpio.gz ($(du -h "$out/initramfs.cpio.gz" | cut -f1))"

accel=${SELINUX_VM_ACCEL:-}
if [[ -z $accel ]]; then
	accel=tcg
	why="no /dev/kvm open for reading and writing"
	if [[ -r /dev/kvm && -w /dev/kvm ]]; then
		if grep -qwE 'vmx|svm' /proc/cpuinfo; then
			accel=kvm
		else
			why="/dev/kvm is there but the CPU advertises no vmx or svm (nested KVM without them hangs)"
		fi
	fi
	[[ $accel == kvm ]] || step "TCG (software emulation): $why; SELINUX_VM_ACCEL=kvm forces KVM"
fi
# The kernel's LSM list with SELinux as its major module: Debian's
# CONFIG_LSM puts AppArmor first, and only one of them can be active.
lsm=landlock,lockdown,yama,integrity,selinux,bpf
log=$out/console.log

# run_vm ACCEL TIMEOUT: boots the VM, its console into $log and onto
# stdout. Returns qemu's exit status, or 125 when KVM was chosen and the
# guest's /init did not speak within $boot_wait s (a nested KVM that hangs).
boot_wait=${SELINUX_VM_BOOT_WAIT:-60}
qemu='' tailer=''
trap '[[ -z $qemu ]] || kill $qemu 2>/dev/null || true; [[ -z $tailer ]] || kill $tailer 2>/dev/null || true' EXIT
run_vm() {
	local cpu=(-cpu max) rc=0
	[[ $1 == kvm ]] && cpu=(-cpu host)
	: >"$log"
	# The guest's tests get a minute less than the VM, so that a test that
	# hangs is reported by go test (with every goroutine's stack).
	timeout -k 10 "$2" qemu-system-x86_64 -accel "$1" "${cpu[@]}" -m 1536 -smp 2 \
		-nographic -no-reboot -nic none -kernel "$kernel" -initrd "$out/initramfs.cpio.gz" \
		-append "console=ttyS0 panic=-1 loglevel=4 lsm=$lsm -- -test.v -test.timeout=$(($2 - 60))s -test.run=${SELINUX_VM_RUN:-.}" \
		</dev/null >"$log" 2>&1 &
	qemu=$!
	tail -n +1 -f --pid=$qemu "$log" &
	tailer=$!
	if [[ $1 == kvm ]]; then
		local waited=0
		until grep -q 'active LSMs:' "$log" || ! kill -0 $qemu 2>/dev/null || ((waited >= boot_wait)); do
			sleep 1
			waited=$((waited + 1))
		done
		if ! grep -q 'active LSMs:' "$log" && kill -0 $qemu 2>/dev/null; then
			kill $qemu
			wait $qemu || true
			wait $tailer || true
			return 125
		fi
	fi
	wait $qemu || rc=$?
	wait $tailer || true
	return $rc
}

case $accel in
kvm) timeout=${SELINUX_VM_TIMEOUT:-300} ;;
tcg) timeout=${SELINUX_VM_TIMEOUT:-900} ;;
*) fail "SELINUX_VM_ACCEL=$accel: use kvm or tcg" ;;
esac
step "booting $(basename "$kernel") with $accel (at most $timeout s): the guest's output follows"
start=$SECONDS
rc=0
run_vm "$accel" "$timeout" || rc=$?
if ((rc == 125)); then
	step "the guest's /init printed nothing in $boot_wait s under KVM (a nested KVM that hangs?): booting again with TCG"
	accel=tcg timeout=${SELINUX_VM_TIMEOUT:-900} rc=0 start=$SECONDS
	run_vm tcg "$timeout" || rc=$?
fi
took=$((SECONDS - start))
if grep -q '^SELINUXVM: PASS' "$log"; then
	step "ok: the SELinux scenarios passed in a VM ($accel, $took s)"
	exit 0
fi
if grep -q '^SELINUXVM: FAIL' "$log"; then
	fail "the guest's tests failed ($accel, $took s): see its output above ($log)"
fi
fail "the guest printed no verdict (qemu exit $rc after $took s; 124: the $timeout s timeout): see its output above ($log)"
