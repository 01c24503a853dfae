#!/usr/bin/env bash
# Prints the version of the git work tree in the current directory, the one
# `make` stamps into the binaries (--version) and the images' labels. It is a
# semantic version with a leading v:
#
#   on a release tag         v0.1.0
#   after it                 v0.1.0-3-g0123456789ab   (git describe: 3 commits after v0.1.0)
#   before any release tag   v0.0.0-20250102150405-0123456789ab   (Go's pseudo-version
#                            shape: the commit's time in UTC and its hash)
#   not in a git work tree   v0.0.0-unknown, with a warning on stderr
#
# and -dirty at the end when tracked files have uncommitted changes. -dirty is
# a prerelease part rather than semver's +dirty build metadata because the
# version is also the image tag, where "+" is not allowed.
#
# Release tags are v<major>.<minor>.<patch>, with an optional prerelease
# (v0.2.0-rc.1); other tags are ignored. A tag that looks like one but is not
# a semantic version (v1.2.3.4) is an error, so that a mistaken tag does not
# give a release binary a version no tool can compare.
#
#   hack/version.sh          (make's VERSION; override with make VERSION=...)
set -euo pipefail

semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "hack/version.sh: not in a git work tree: version v0.0.0-unknown (set VERSION=v<x.y.z> to name it)" >&2
	echo v0.0.0-unknown
	exit 0
fi
if ! git rev-parse --verify --quiet HEAD >/dev/null; then
	echo "hack/version.sh: the repository has no commit yet: version v0.0.0-unknown" >&2
	echo v0.0.0-unknown
	exit 0
fi

# git describe refreshes the index before it looks for changes, so that a
# file touched but not changed is not counted as dirty.
dirty=
if [[ $(git describe --always --dirty=-dirty) == *-dirty ]]; then
	dirty=-dirty
fi

if tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null); then
	[[ $tag =~ $semver ]] || {
		echo "hack/version.sh: tag $tag is not a semantic version v<major>.<minor>.<patch>[-<prerelease>]: delete it, or set VERSION" >&2
		exit 1
	}
	echo "$(git describe --tags --abbrev=12 --match "$tag")$dirty"
	exit 0
fi

# No release tag yet: Go's pseudo-version for a module with no tag.
when=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
echo "v0.0.0-$when-$(git rev-parse --short=12 HEAD)$dirty"
