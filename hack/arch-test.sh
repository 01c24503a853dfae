#!/usr/bin/env bash
# Runs make build-all's Linux binaries of the other architectures under
# qemu's user emulation, one architecture after the other:
#   1. `--version` of the release binary, which must print its path and
#      VERSION;
#   2. the integration suite (test/integration: the test CSI driver and a
#      gRPC client in kubelet's place, both native) against the release
#      binary, started as `qemu-<arch>-static <binary> <flags>`: the happy
#      path registers, checks GetInfo, /healthz, /readyz, /status and
#      /metrics, and stops with SIGTERM and exit 0;
#   3. the unit tests of the product (cmd, internal, pkg) compiled for the
#      architecture and run with `go test -exec qemu-<arch>-static`.
# The emulator is named on each command line: no binfmt_misc registration
# is needed, or made (it would change the whole machine).
#
# qemu comes from Debian's qemu-user-static package (qemu-user's
# qemu-<arch> does as well), installed with apt-get when missing.
#
#   VERSION=v1.2.3 hack/arch-test.sh [GOARCH...]   (make arch-test)
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

[[ -n ${VERSION:-} ]] || fail "VERSION is not set: run make arch-test, or VERSION=\$(make version) $0"
arches=("$@")
[[ ${#arches[@]} -gt 0 ]] || arches=(arm64 arm ppc64le s390x)
bin=bin/csi-node-driver-registrar
host=$(go env GOARCH)

# qemu's names of the architectures, by GOARCH.
declare -A qemu_names=([arm64]=aarch64 [arm]=arm [ppc64le]=ppc64le [s390x]=s390x [riscv64]=riscv64 [386]=i386 [amd64]=x86_64)

# emulator GOARCH: the command that runs the architecture's binaries here,
# empty for this machine's own.
emulator() {
	[[ $1 != "$host" ]] || return 0
	command -v "qemu-${qemu_names[$1]}-static" || command -v "qemu-${qemu_names[$1]}" || true
}

for arch in "${arches[@]}"; do
	[[ -n ${qemu_names[$arch]:-} ]] || fail "no qemu user emulator known for GOARCH=$arch: use one of ${!qemu_names[*]}"
	[[ -f $bin-linux-$arch ]] || fail "$bin-linux-$arch is missing: run make build-all (or make arch-test, which builds it)"
	if [[ -z $(emulator "$arch") && $arch != "$host" ]]; then
		install_missing "qemu-${qemu_names[$arch]}-static" qemu-user-static --no-install-recommends
	fi
done

results=()
for arch in "${arches[@]}"; do
	start=$SECONDS
	emu=$(emulator "$arch")
	[[ $arch == "$host" || -n $emu ]] || fail "no emulator for linux/$arch after installing qemu-user-static"
	binary=$PWD/$bin-linux-$arch
	run=(${emu:+"$emu"} "$binary")
	if [[ -n $emu ]]; then
		step "linux/$arch: $("$emu" --version | head -1)"
	fi

	out=$("${run[@]}" --version 2>&1) || fail "linux/$arch: ${run[*]} --version exited $?: $out"
	[[ $out == "$binary $VERSION" ]] || fail "linux/$arch: ${run[*]} --version printed \"$out\", want \"$binary $VERSION\""
	step "linux/$arch: ${run[*]} --version: $out"

	step "linux/$arch: the integration suite (test/integration) against ${run[*]}"
	REGISTRAR_BIN=$binary REGISTRAR_VERSION=$VERSION REGISTRAR_EMULATOR=$emu CGO_ENABLED=1 \
		go test -race -count=1 ./test/integration ||
		fail "linux/$arch: the integration suite failed against ${run[*]} (above)"

	step "linux/$arch: the unit tests, built for linux/$arch${emu:+, run under $emu}"
	GOOS=linux GOARCH=$arch GOARM=7 CGO_ENABLED=0 REGISTRAR_EMULATOR=$emu \
		go test -count=1 ${emu:+-exec "$emu"} ./cmd/... ./internal/... ./pkg/... ||
		fail "linux/$arch: the unit tests failed${emu:+ under $emu} (above)"

	results+=("linux/$arch $((SECONDS - start)) s")
done
summary=$(printf '%s, ' "${results[@]}")
step "ok: --version, the integration suite and the unit tests ran on ${summary%, }"
