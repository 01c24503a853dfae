#!/usr/bin/env bash
# Prints the version make stamps into the binaries (--version) and the
# images' labels: the one line of the file VERSION at the top of the
# repository, a semantic version with a leading v (v0.1.0, v0.2.0-rc.1).
#
# The version comes from the tree, not from git: every clone and every build
# of a commit says the same, with or without tags, history or uncommitted
# changes. Between two releases VERSION holds the version being prepared,
# whose CHANGELOG.md section is dated when it is released. Which commit a
# binary was built from, and whether the tree had uncommitted changes, is not
# in the version: Go records them in the binary's build information when it
# builds in a git checkout without -buildvcs=false (go version -m:
# vcs.revision, vcs.modified).
#
#   hack/version.sh          (make's VERSION; override with make VERSION=...)
#
# VERSION_FILE names another file (the tests').
set -euo pipefail

file=${VERSION_FILE:-$(dirname "$0")/../VERSION}
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'

[[ -r $file ]] || {
	echo "hack/version.sh: cannot read $file: it holds the version, one line such as v0.1.0 (or set VERSION=v<x.y.z>)" >&2
	exit 1
}
lines=$(grep -c . "$file" || true)
version=$(tr -d '[:space:]' <"$file")
[[ $lines == 1 && $version =~ $semver ]] || {
	echo "hack/version.sh: $file must hold one line, a semantic version v<major>.<minor>.<patch>[-<prerelease>] such as v0.1.0; it holds: $(head -c 200 "$file" | tr '\n' ' ')" >&2
	exit 1
}
echo "$version"
