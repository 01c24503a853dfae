#!/usr/bin/env bash
# Builds Dockerfile and Dockerfile.Windows with buildah, offline and without a
# Docker engine, and checks what they produce:
#  - the Linux image: entrypoint, user, GOMAXPROCS=1, labels, platform, that it holds the
#    binary at /csi-node-driver-registrar and nothing else, and that this
#    binary runs `--version` and the legacy probe mode from the image's own
#    root file system;
#  - the Windows image: entrypoint, user, GOMAXPROCS=1, platform, the .exe and
#    netapi32.dll;
#  - the version: semantic (hack/version.sh), the same in both images' labels
#    and in the Linux binary's --version;
#  - the SBOM make build-all writes beside each binary in bin/: present,
#    CycloneDX JSON, of that binary, naming the main module and its version,
#    and listing the modules linked into it. It is not put in the images;
#  - the release: hack/release.sh writes the OCI image index of every Linux
#    platform, with the binaries, SBOMs and SHA256SUMS, into a temporary
#    directory, and hack/check-release.sh inspects it.
# Base images cannot be pulled here, so the bases are replaced: `scratch`
# for the Linux image, local stand-ins for Nano Server and Server Core. The
# rest of each Dockerfile is built as it is.
#
# buildah and jq are installed with apt-get when missing. Storage (vfs) lives in a
# temporary directory that is removed at the end.
#
#   hack/check-image.sh        (make image-check)
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

# expect WHAT GOT WANT
expect() {
	[[ $2 == "$3" ]] || fail "$1: '$2', want '$3'"
	step "ok: $1: '$2'"
}

install_missing buildah buildah
install_missing jq jq
buildah --version

version=${VERSION:-$(hack/version.sh)}
# hack/version.sh's shape, so that a release tagged by mistake fails here.
[[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
	fail "version '$version' is not a semantic version v<major>.<minor>.<patch>[-<suffix>] (hack/version.sh)"
step "version $version"
arch=$(go env GOARCH)
make build-all PLATFORMS="linux/$arch windows/amd64" VERSION="$version"

module=$(sed -n 's/^module //p' go.mod)
# sbom_check BINARY [VERSION]: the SBOM make build-all wrote beside BINARY is
# CycloneDX JSON of this binary (its SHA-256 and platform), names the main
# module (at VERSION, when given) and lists the same modules as the binary's
# own build information (go version -m), gRPC among them.
sbom_check() {
	local bin=$1 want_version=${2:-} sbom name platform sha version want got
	sbom=${bin%.exe}.cdx.json
	name=${sbom#bin/}
	# same WHAT GOT WANT: one line per SBOM rather than one per check.
	same() { [[ $2 == "$3" ]] || fail "$name: $1: '$2', want '$3'"; }
	property() { jq -r --arg n "$1" '[.metadata.properties[]? | select(.name == $n) | .value] | join(",")' "$sbom"; }
	[[ -s $sbom ]] || fail "$sbom is missing: make build-all writes it beside $bin"
	jq -e . "$sbom" >/dev/null 2>&1 || fail "$sbom does not parse as JSON"
	same "format" "$(jq -r '.bomFormat + " " + .specVersion' "$sbom")" "CycloneDX 1.6"
	same "main module" "$(jq -r .metadata.component.name "$sbom")" "$module"
	version=$(jq -r .metadata.component.version "$sbom")
	[[ -z $want_version ]] || same "main module's version" "$version" "$want_version"
	sha=$(sha256sum "$bin" | cut -d' ' -f1)
	same "the binary's SHA-256" "$(property cdx:gomod:binary:hash:SHA-256)" "$sha"
	platform=${name#csi-node-driver-registrar-}
	platform=${platform%.cdx.json}
	same "platform" "$(property cdx:gomod:build:env:GOOS)-$(property cdx:gomod:build:env:GOARCH)" "$platform"
	want=$(go version -m "$bin" | awk '$1 == "dep" { print $2 "@" $3 }' | sort)
	got=$(jq -r '.components[]? | .name + "@" + .version' "$sbom" | sort)
	[[ $got == "$want" ]] ||
		fail "$name: its modules are not the binary's (go version -m $bin):"$'\n'"$(diff <(echo "$want") <(echo "$got") || true)"
	[[ $'\n'$got == *$'\ngoogle.golang.org/grpc@v'* ]] || fail "$name: google.golang.org/grpc is not among its modules"
	same "the number of modules the main module depends on" \
		"$(jq -r --arg ref "$(jq -r '.metadata.component["bom-ref"]' "$sbom")" \
			'[.dependencies[]? | select(.ref == $ref) | .dependsOn[]] | length' "$sbom")" \
		"$(wc -l <<<"$want")"
	step "ok: $name: CycloneDX of ${bin#bin/} (SHA-256 ${sha:0:12}...), $module $version, $(wc -l <<<"$got") modules as in the binary, $(grep '^google.golang.org/grpc@' <<<"$got") among them"
}
# The binaries just built, at this version; then any other platform's that
# make build-all left in bin/ (all of them in CI), each against its own SBOM.
sbom_check "bin/csi-node-driver-registrar-linux-$arch" "$version"
sbom_check bin/csi-node-driver-registrar-windows-amd64.exe "$version"
for bin in bin/csi-node-driver-registrar-*-*; do
	case $bin in
	*.cdx.json | bin/csi-node-driver-registrar-linux-"$arch" | bin/csi-node-driver-registrar-windows-amd64.exe) ;;
	*) sbom_check "$bin" ;;
	esac
done

buildah_storage check-image

image=localhost/csi-node-driver-registrar:check
step "building Dockerfile for linux/$arch on scratch"
bah bud --platform "linux/$arch" --build-arg BASE_IMAGE=scratch --build-arg VERSION="$version" \
	-f Dockerfile -t "$image" . || fail "buildah could not build Dockerfile"

config() { bah inspect --type image --format "$1" "$image"; }
expect "the entrypoint" "$(config '{{.OCIv1.Config.Entrypoint}}')" '[/csi-node-driver-registrar]'
expect "the number of CMD arguments" "$(config '{{len .OCIv1.Config.Cmd}}')" '0'
expect "the user" "$(config '{{.OCIv1.Config.User}}')" ''
imageenv() { config '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' | grep '^GOMAXPROCS=' || true; }
expect "GOMAXPROCS in the environment" "$(imageenv)" 'GOMAXPROCS=1'
expect "the platform" "$(config '{{.OCIv1.OS}}/{{.OCIv1.Architecture}}')" "linux/$arch"
label_version=$(config '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')
expect "label org.opencontainers.image.version" "$label_version" "$version"
for label in org.opencontainers.image.source org.opencontainers.image.description; do
	value=$(config "{{index .OCIv1.Config.Labels \"$label\"}}")
	[[ -n $value ]] || fail "label $label is missing"
	step "ok: label $label: '$value'"
done

container=$(bah from --pull=false "$image")
root=$(bah mount "$container")
files=$(cd "$root" && find . -mindepth 1 | sort | tr '\n' ' ')
expect "the image's files" "$files" "./csi-node-driver-registrar "
[[ -x $root/csi-node-driver-registrar ]] || fail "/csi-node-driver-registrar is not executable"

# Run the binary with the image's file system as its root: an empty base has
# no libc, so this also proves the binary is static.
if chroot "$root" /csi-node-driver-registrar --version >/dev/null 2>&1; then
	run() { chroot "$root" /csi-node-driver-registrar "$@"; }
	where="chrooted into the image"
else
	run() { "$root/csi-node-driver-registrar" "$@"; }
	where="from the image's files (chroot is not permitted here)"
fi
out=$(run --version) || fail "/csi-node-driver-registrar --version failed: $out"
[[ $out == "/csi-node-driver-registrar "* ]] || fail "--version printed '$out', want '/csi-node-driver-registrar <version>'"
step "ok: --version, run $where, printed '$out'"
expect "the binary's --version, against the image's version label" "${out#* }" "$label_version"
run --mode=kubelet-registration-probe --kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock >/dev/null 2>&1 ||
	fail "the legacy exec probe /csi-node-driver-registrar --mode=kubelet-registration-probe --kubelet-registration-path=... did not exit 0"
step "ok: the legacy exec probe exits 0"
bah umount "$container" >/dev/null

# Dockerfile.Windows: no RUN step, so buildah builds it on Linux. Stand-ins
# for Nano Server (empty) and Server Core (a dummy netapi32.dll) are made
# locally and reached through the Dockerfile's own REGISTRY and OS_VERSION.
step "building Dockerfile.Windows for windows/amd64 on local stand-ins"
standin() { # NAME [FILE]
	local ctr root
	ctr=$(bah from scratch)
	if [[ -n ${2:-} ]]; then
		root=$(bah mount "$ctr")
		mkdir -p "$root/$(dirname "$2")"
		echo "stand-in" >"$root/$2"
		bah umount "$ctr" >/dev/null
	fi
	bah config --os windows --arch amd64 "$ctr"
	bah commit --quiet "$ctr" "localhost/$1:check" >/dev/null
}
standin nanoserver
standin servercore Windows/System32/netapi32.dll
image=localhost/csi-node-driver-registrar:check-windows
bah bud --platform windows/amd64 --pull=false --build-arg REGISTRY=localhost --build-arg OS_VERSION=check \
	--build-arg VERSION="$version" -f Dockerfile.Windows -t "$image" . ||
	fail "buildah could not build Dockerfile.Windows"

expect "the Windows entrypoint" "$(config '{{.OCIv1.Config.Entrypoint}}')" '[/csi-node-driver-registrar.exe]'
expect "the Windows user" "$(config '{{.OCIv1.Config.User}}')" 'ContainerAdministrator'
expect "GOMAXPROCS in the Windows environment" "$(imageenv)" 'GOMAXPROCS=1'
expect "the Windows platform" "$(config '{{.OCIv1.OS}}/{{.OCIv1.Architecture}}')" "windows/amd64"
expect "the Windows image's version label" \
	"$(config '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')" "$version"
container=$(bah from --pull=false "$image")
root=$(bah mount "$container")
files=$(cd "$root" && find . -mindepth 1 -type f | sort | tr '\n' ' ')
expect "the Windows image's files" "$files" "./Windows/System32/netapi32.dll ./csi-node-driver-registrar.exe "
cmp -s "$root/csi-node-driver-registrar.exe" bin/csi-node-driver-registrar-windows-amd64.exe ||
	fail "/csi-node-driver-registrar.exe is not bin/csi-node-driver-registrar-windows-amd64.exe"
[[ $(head -c 2 "$root/csi-node-driver-registrar.exe") == MZ ]] || fail "/csi-node-driver-registrar.exe is not a Windows executable"
step "ok: /csi-node-driver-registrar.exe is the Windows build"
bah umount "$container" >/dev/null

# The release's image index of every Linux platform, written by make
# release's script into a temporary directory and checked by it
# (hack/check-release.sh).
step "make release into $work/release"
VERSION=$version RELEASE_DIR=$work/release hack/release.sh

step "PASS: both images build and hold what the manifests expect; the release's image index holds every Linux platform"
