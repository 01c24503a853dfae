#!/usr/bin/env bash
# Checks a release directory written by hack/release.sh, with jq and tar
# rather than the buildah that wrote it:
#  - SHA256SUMS: every file of the directory listed, every sum right;
#  - the OCI archive: an OCI layout whose index.json names one image index,
#    tagged with the version; every blob's digest and size are its content's;
#  - the index: exactly one image for each of RELEASE_PLATFORMS, and each
#    image's config says that platform, carries the version in its
#    org.opencontainers.image.version label, the entrypoint
#    /csi-node-driver-registrar and GOMAXPROCS=1;
#  - each image's one file, /csi-node-driver-registrar: an ELF executable
#    for that platform's machine, the same bytes as the release's binary for
#    it, with the version in it; and that binary's SBOM beside it.
#
#   hack/check-release.sh DIR      (run by make release and make image-check)
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

dir=${1:?usage: hack/check-release.sh DIR}
version=${VERSION:-$(hack/version.sh)}
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 linux/arm/v7 linux/ppc64le linux/s390x}
name=csi-node-driver-registrar
archive=$dir/$name-$version.oci.tar
install_missing jq jq

# expect WHAT GOT WANT
expect() {
	[[ $2 == "$3" ]] || fail "$1: '$2', want '$3'"
}

[[ -f $dir/SHA256SUMS ]] || fail "$dir/SHA256SUMS is missing"
(cd "$dir" && sha256sum --quiet --strict -c SHA256SUMS) || fail "$dir/SHA256SUMS does not match the files"
listed=$(awk '{ print $2 }' "$dir/SHA256SUMS" | sed 's/^\*//' | sort | tr '\n' ' ')
present=$(find "$dir" -mindepth 1 -maxdepth 1 ! -name SHA256SUMS -printf '%f\n' | sort | tr '\n' ' ')
expect "the files SHA256SUMS lists" "$listed" "$present"
step "ok: SHA256SUMS lists and matches $(wc -l <"$dir/SHA256SUMS") files"
[[ -s $dir/RELEASE-NOTES.md ]] || fail "$dir/RELEASE-NOTES.md is missing or empty"

[[ -f $archive ]] || fail "$archive is missing"
layout=$(mktemp -d /tmp/check-release.XXXXXX)
trap 'rm -rf "$layout"' EXIT
tar -xf "$archive" -C "$layout" || fail "$archive is not a tar archive"
expect "oci-layout's version" "$(jq -r .imageLayoutVersion "$layout/oci-layout")" "1.0.0"

# blob DIGEST [SIZE]: the path of a blob of the layout, after checking that
# its content has that digest (and size).
blob() {
	local path=$layout/blobs/${1/://}
	[[ -f $path ]] || fail "blob $1 is missing from $archive"
	expect "the digest of blob ${1:0:19}..." "sha256:$(sha256sum "$path" | cut -d' ' -f1)" "$1"
	[[ -z ${2:-} ]] || expect "the size of blob ${1:0:19}..." "$(stat -c %s "$path")" "$2"
	echo "$path"
}

expect "the number of entries in index.json" "$(jq '.manifests | length' "$layout/index.json")" 1
entry=$(jq -c '.manifests[0]' "$layout/index.json")
expect "index.json's entry type" "$(jq -r .mediaType <<<"$entry")" "application/vnd.oci.image.index.v1+json"
expect "index.json's tag" "$(jq -r '.annotations["org.opencontainers.image.ref.name"]' <<<"$entry")" "$version"
index=$(blob "$(jq -r .digest <<<"$entry")" "$(jq -r .size <<<"$entry")")
expect "the image index's schema" "$(jq -r '.schemaVersion' "$index")" 2

got=$(jq -r '.manifests[] | .platform | [.os, .architecture, .variant // empty] | join("/")' "$index" | sort | tr '\n' ' ')
want=$(tr ' ' '\n' <<<"$platforms" | grep . | sort | tr '\n' ' ')
expect "the index's platforms" "$got" "$want"
step "ok: $archive: one image index tagged $version, platforms $got"

# ELF identification of each platform: class (1: 32-bit, 2: 64-bit), data
# (1: little-endian, 2: big-endian) and e_machine.
declare -A elf=(
	[linux/amd64]="2 1 62" [linux/arm64]="2 1 183" [linux/arm/v7]="1 1 40"
	[linux/ppc64le]="2 1 21" [linux/s390x]="2 2 22" [linux/386]="1 1 3"
)
for p in $platforms; do
	[[ -n ${elf[$p]:-} ]] || fail "no ELF machine known for $p: add it to hack/check-release.sh"
	desc=$(jq -c --arg p "$p" '.manifests[] | select(([.platform.os, .platform.architecture, .platform.variant // empty] | join("/")) == $p)' "$index")
	expect "$p: the manifest's type" "$(jq -r .mediaType <<<"$desc")" "application/vnd.oci.image.manifest.v1+json"
	manifest=$(blob "$(jq -r .digest <<<"$desc")" "$(jq -r .size <<<"$desc")")
	config=$(blob "$(jq -r .config.digest "$manifest")" "$(jq -r .config.size "$manifest")")
	expect "$p: the config's platform" "$(jq -r '[.os, .architecture, .variant // empty] | join("/")' "$config")" "$p"
	expect "$p: the version label" "$(jq -r '.config.Labels["org.opencontainers.image.version"]' "$config")" "$version"
	expect "$p: the entrypoint" "$(jq -c .config.Entrypoint "$config")" '["/csi-node-driver-registrar"]'
	expect "$p: GOMAXPROCS" "$(jq -r '.config.Env[]? | select(startswith("GOMAXPROCS="))' "$config")" "GOMAXPROCS=1"

	# The image's files: every layer unpacked in order (a scratch base has none
	# of its own; another base brings its files, which are not checked here).
	root=$layout/root-${p//\//-}
	mkdir -p "$root"
	for layer in $(jq -r '.layers[].digest' "$manifest"); do
		tar -xf "$(blob "$layer")" -C "$root" || fail "$p: layer $layer does not unpack"
	done
	bin=$root/$name
	[[ -f $bin && -x $bin ]] || fail "$p: /$name is missing or not executable"
	ident=$(od -An -tu1 -j4 -N2 "$bin" | xargs)
	if [[ ${ident#* } == 2 ]]; then
		machine=$(od -An -tu1 -j18 -N2 "$bin" | awk '{ print $1 * 256 + $2 }')
	else
		machine=$(od -An -tu1 -j18 -N2 "$bin" | awk '{ print $2 * 256 + $1 }')
	fi
	expect "$p: the ELF magic of /$name" "$(head -c4 "$bin" | od -An -c | xargs)" '177 E L F'
	expect "$p: the ELF class, byte order and machine of /$name" "$ident $machine" "${elf[$p]}"
	goarch=${p#linux/}
	goarch=${goarch%/v7}
	release_bin=$dir/$name-linux-$goarch
	cmp -s "$bin" "$release_bin" || fail "$p: /$name is not $release_bin"
	grep -qaF "$version" "$bin" || fail "$p: /$name does not contain the version $version"
	[[ -s $release_bin.cdx.json ]] || fail "$p: the SBOM $release_bin.cdx.json is missing"
	expect "$p: the SBOM's version" "$(jq -r .metadata.component.version "$release_bin.cdx.json")" "$version"
	step "ok: $p: config, labels, entrypoint; /$name is ELF machine $machine, the release's binary, SBOM beside it"
done
step "PASS: $dir holds the $version release: the index, its $(wc -w <<<"$platforms") images, binaries, SBOMs, notes and checksums"
