#!/usr/bin/env bash
# Writes a release of the tree, offline, into RELEASE_DIR (default
# _output/release):
#
#   csi-node-driver-registrar-<version>.oci.tar   one OCI image index (an OCI
#       layout in a tar, tagged <version>) of the Linux image for every
#       platform of RELEASE_PLATFORMS, built from Dockerfile with buildah;
#   csi-node-driver-registrar-<os>-<arch>[.exe]    make build-all's binaries,
#   csi-node-driver-registrar-<os>-<arch>.cdx.json and their CycloneDX SBOMs;
#   RELEASE-NOTES.md   the CHANGELOG.md section of the version;
#   SHA256SUMS         the SHA-256 of each of those files.
#
# It then checks what it wrote with hack/check-release.sh. The version is
# hack/version.sh's (VERSION overrides it), and CHANGELOG.md must have its
# section. The base image is RELEASE_BASE_IMAGE, `scratch` by default since
# nothing can be pulled offline; a release machine with a registry sets the
# Dockerfile's own base, pinned by digest. The Windows image is not in the
# index: its Nano Server base cannot be had offline (make image-windows).
# buildah and jq are installed with apt-get when missing; buildah's storage
# (vfs) lives in a temporary directory removed at the end.
#
#   hack/release.sh        (make release)
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

version=${VERSION:-$(hack/version.sh)}
out=${RELEASE_DIR:-_output/release}
base=${RELEASE_BASE_IMAGE:-scratch}
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 linux/arm/v7 linux/ppc64le linux/s390x}
name=csi-node-driver-registrar
archive=$name-$version.oci.tar

install_missing buildah buildah
install_missing jq jq

notes=$(hack/release-notes.sh "$version") ||
	fail "CHANGELOG.md has no section for $version: add '## $version - <date>' (or '- Unreleased') with its changes"
step "version $version, base image $base, platforms $platforms"

# make build-all's GOOS/GOARCH for each image platform (arm/v7 is GOARM=7),
# and Windows, whose binary is published beside the index.
build_platforms=windows/amd64
for p in $platforms; do
	p=${p%/v7}
	build_platforms+=" $p"
done
make build-all PLATFORMS="$build_platforms" VERSION="$version"

buildah_storage release

list=localhost/$name:$version
bah manifest create "$list" >/dev/null
for p in $platforms; do
	step "building Dockerfile for $p on $base"
	bah bud --quiet --format oci --platform "$p" --pull=false --build-arg BASE_IMAGE="$base" \
		--build-arg VERSION="$version" --manifest "$list" -f Dockerfile . >/dev/null ||
		fail "buildah could not build Dockerfile for $p"
done

rm -rf "$out"
mkdir -p "$out"
bah manifest push --quiet --all --format oci "$list" "oci-archive:$out/$archive:$version" ||
	fail "buildah could not write the image index to $out/$archive"
for p in $build_platforms; do
	os=${p%/*} arch=${p#*/}
	bin=bin/$name-$os-$arch
	if [[ $os == windows ]]; then bin+=.exe; fi
	cp "$bin" "$out/"
	cp "${bin%.exe}.cdx.json" "$out/"
done
printf '%s\n' "$notes" >"$out/RELEASE-NOTES.md"
(cd "$out" && sha256sum -- * >SHA256SUMS)
step "wrote $out: $(find "$out" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')"

VERSION=$version RELEASE_PLATFORMS=$platforms hack/check-release.sh "$out"
