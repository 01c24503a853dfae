#!/usr/bin/env bash
# Prints the notes of a release: the body of its section of CHANGELOG.md,
# whose heading is `## v<x.y.z> - <date>` once released and
# `## v<x.y.z> - Unreleased` before. Without an argument, the release is
# the tree's version (hack/version.sh, the file VERSION). Fails when the
# section is missing or empty. Headings inside fenced code blocks do not
# count.
#
#   hack/release-notes.sh [v<x.y.z>]     (make release-notes [RELEASE=v<x.y.z>])
#
# CHANGELOG names another file (the tests' changelogs); VERSION_FILE is
# passed on to hack/version.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

changelog=${CHANGELOG:-CHANGELOG.md}
release=${1:-$(hack/version.sh)}
[[ -r $changelog ]] || {
	echo "release-notes: cannot read $changelog" >&2
	exit 1
}

notes=$(awk -v release="$release" '
	/^(```|~~~)/ { fenced = !fenced }
	!fenced && /^## / {
		if (in_section) exit
		heading = substr($0, 4)
		if (heading == release || index(heading, release " ") == 1) { in_section = 1; found = 1; next }
	}
	in_section { print }
	END { if (!found) exit 3 }
' "$changelog") || {
	echo "release-notes: $changelog has no section \"## $release\"" >&2
	exit 1
}
# Without the blank lines around the body.
notes=$(sed -e '/./,$!d' <<<"$notes")
[[ -n $notes ]] || {
	echo "release-notes: the section \"## $release\" of $changelog is empty" >&2
	exit 1
}
printf '%s\n' "$notes"
