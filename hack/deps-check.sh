#!/usr/bin/env bash
# hack/deps-check.sh (make deps-check): how far the product module's
# dependencies are behind what the module proxy serves, in one summary line:
#   - the modules of `go list -m -u all` with a newer version (direct ones
#     named);
#   - the go.mod's Go release against the newest Go toolchain served
#     (golang.org/toolchain's versions); Go supports its two newest major
#     releases, so one two behind is out of support: FAIL;
#   - the k8s.io minor of go.mod (k8s.io/apimachinery) against the newest
#     k8s.io/api release: two or more minors behind: FAIL.
# Anything else only informs. Without the proxy (offline, GOPROXY=off) it
# says so and passes. DEPS_CHECK_TIMEOUT bounds each query (default 60 s).
set -uo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

timeout=${DEPS_CHECK_TIMEOUT:-60}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# versions MODULE: the versions the proxy serves, one a line. Run outside
# any module, so that no go.mod or go.sum is read or written.
versions() {
	(cd "$scratch" && GOFLAGS= timeout "$timeout" go list -m -versions "$1") | tr ' ' '\n' | tail -n +2
}

offline() {
	echo "deps-check: SKIPPED: the module proxy ($(go env GOPROXY)) could not be reached: $*; nothing was checked"
	exit 0
}

# The Go releases served, as toolchain modules v0.0.1-go1.N.P.<os>-<arch>.
toolchains=$(versions golang.org/toolchain 2>"$scratch/err") || offline "$(tail -1 "$scratch/err")"
newest_go=$(grep -o 'go1\.[0-9]*\.[0-9]*' <<<"$toolchains" | sort -uV | tail -1)
[[ -n $newest_go ]] || offline "golang.org/toolchain: no release listed"
k8s_versions=$(versions k8s.io/api 2>"$scratch/err") || offline "$(tail -1 "$scratch/err")"
newest_k8s=$(grep -E '^v0\.[0-9]+\.[0-9]+$' <<<"$k8s_versions" | sort -V | tail -1)
[[ -n $newest_k8s ]] || offline "k8s.io/api: no release listed"

# The product module's modules with a newer version.
updates=$(timeout "$timeout" go list -m -u -f '{{if and .Update (not .Main)}}{{.Path}} {{.Version}} {{.Update.Version}} {{.Indirect}}{{end}}' all 2>"$scratch/err") ||
	offline "go list -m -u all: $(tail -1 "$scratch/err")"
total=$(go list -m all | tail -n +2 | wc -l)
behind=$(grep -c . <<<"$updates")
direct=$(awk '$4 == "false" { printf "%s%s %s→%s", sep, $1, $2, $3; sep = ", " }' <<<"$updates")

failures=()
# Go: the go.mod's release against the newest served.
go_mod=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
go_mod_minor=$(cut -d. -f2 <<<"$go_mod")
newest_go_minor=$(cut -d. -f2 <<<"${newest_go#go}")
go_line="Go: go.mod go $go_mod, newest $newest_go, building with $(go env GOVERSION)"
if ((newest_go_minor - go_mod_minor >= 2)); then
	failures+=("go.mod's Go $go_mod is out of support (Go supports 1.$((newest_go_minor - 1)) and 1.$newest_go_minor): raise its go line")
	go_line+=" (OUT OF SUPPORT)"
elif ((newest_go_minor > go_mod_minor)); then
	go_line+=" (one release behind, still supported)"
fi

# Kubernetes: the k8s.io minor the product builds with.
k8s_mod=$(go list -m -f '{{.Version}}' k8s.io/apimachinery)
k8s_mod_minor=$(cut -d. -f2 <<<"$k8s_mod")
newest_k8s_minor=$(cut -d. -f2 <<<"$newest_k8s")
k8s_line="k8s.io: $k8s_mod (Kubernetes 1.$k8s_mod_minor), newest $newest_k8s"
if ((newest_k8s_minor - k8s_mod_minor >= 2)); then
	failures+=("the k8s.io modules are $((newest_k8s_minor - k8s_mod_minor)) minors behind ($k8s_mod, newest $newest_k8s): move them to 1.$newest_k8s_minor's")
	k8s_line+=" (TWO OR MORE MINORS BEHIND)"
elif ((newest_k8s_minor > k8s_mod_minor)); then
	k8s_line+=" (one minor behind)"
fi

echo "deps-check: $behind of $total modules have a newer version${direct:+ (direct: $direct)}; $go_line; $k8s_line"
if ((${#failures[@]})); then
	for f in "${failures[@]}"; do echo "deps-check: FAIL: $f" >&2; done
	exit 1
fi
