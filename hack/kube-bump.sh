#!/usr/bin/env bash
# hack/kube-bump.sh [--node] v1.X.Y (make kube-bump VERSION=v1.X.Y): adds the
# Kubernetes release v1.X.Y to the kubelets make e2e tests, or moves its
# minor to that patch release.
#
#   1. Writes test/kubelet/v1.X/go.mod: k8s.io/kubernetes v1.X.Y, and each of
#      its staging modules (the ones its own go.mod replaces with
#      ./staging/src/k8s.io/...) replaced with v0.X.Y.
#   2. A new minor's main.go is copied from the nearest existing minor (the
#      newest one for a new release); an existing main.go is kept.
#   3. go mod tidy (through the module proxy; a module it refuses is pinned
#      to an older version it serves, or left out when only tests of
#      dependencies import it, or stops the script: see below), then
#      compares kubelet's Go API that main.go implements (the plugin
#      handler, the plugin manager, the volume host) between the two
#      releases and prints what changed.
#   4. go build ./... of the module; on failure it stops, with the build's
#      errors and the API differences: adapt main.go, then run it again.
#   5. Writes the release into test/kubelet/MINORS, the one list of the
#      kubelets tested, unless it is a prerelease (v1.38.0-beta.0), which
#      is run by hand, and prints what to look at before committing.
#
# A release whose go.mod needs a newer Go than the template's gives the
# module its go line: export GOTOOLCHAIN=go1.NN.P to run this and build it.
#
# With --node it does the same for make e2e-node: test/node/kubernetes/v1.X,
# pinning the release whose kubelet and control plane make e2e-node
# KUBE_VERSION=v1.X.Y builds (its tools.go copied from the nearest one); the
# components themselves are built by make e2e-node (about 10 min cold).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

usage() { echo "usage: hack/kube-bump.sh [--node] v1.X.Y (e.g. v1.36.3, v1.38.0-beta.0)" >&2; exit 2; }
node=false
if [[ ${1:-} == --node ]]; then node=true; shift; fi
[[ $# == 1 ]] || usage
version=$1
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$ ]] || usage
minor=v1.${BASH_REMATCH[1]}
staging_version=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}${BASH_REMATCH[3]}
minor_number=${BASH_REMATCH[1]}
prerelease=${BASH_REMATCH[3]}

if $node; then
	parent=test/node/kubernetes
	module_path=github.com/csi-registrar/node-driver-registrar/test/node/kubernetes/$minor
	code=tools.go
else
	parent=test/kubelet
	module_path=github.com/csi-registrar/node-driver-registrar/test/kubelet/$minor
	code=main.go
fi
dir=$parent/$minor
minors_file=test/kubelet/MINORS

# The module proxy's copy of the release: its go.mod names the staging
# modules, its source the API compared below.
step "downloading k8s.io/kubernetes $version through the module proxy"
kube_mod_file=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -n $kube_mod_file ]] || fail "go mod download k8s.io/kubernetes@$version gave no go.mod: is $version released? (go list -m -versions k8s.io/kubernetes)"
kube_dir=$(go env GOMODCACHE)/k8s.io/kubernetes@$version
staging=$(sed -n 's|^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/k8s\.io/.*$|\1|p' "$kube_mod_file" | sort -u)
[[ -n $staging ]] || fail "k8s.io/kubernetes $version's go.mod replaces no staging module: its layout changed; write $dir/go.mod by hand"
kube_go=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kube_mod_file")

# The template: the other module nearest to the minor, the newer one on a
# tie. The API is compared with the release the module pinned before (a
# patch release), else with the template's.
template=
best=
for d in "$parent"/v1.*/; do
	d=${d%/}
	[[ -f $d/$code && $d != "$dir" ]] || continue
	n=${d##*/v1.}
	distance=$((n > minor_number ? n - minor_number : minor_number - n))
	if [[ -z $best ]] || ((distance < best || (distance == best && n > ${template##*/v1.}))); then
		best=$distance
		template=$d
	fi
done
[[ -n $template ]] || fail "no module in $parent/v1.*/ to start from"
# The release a module pins: its require line, on its own or in a block
# (go mod tidy of Go 1.27 merges the direct requirements into one).
pinned_release() { sed -nE 's/^(require )?[[:space:]]*k8s\.io\/kubernetes (v[^ ]*)$/\2/p' "$1"; }
template_version=$(pinned_release "$template/go.mod")
created=false
compare_version=$template_version
pinned_before=
if [[ -d $dir ]]; then
	pinned_before=$(pinned_release "$dir/go.mod" 2>/dev/null || true)
	[[ -z $pinned_before || $pinned_before == "$version" ]] || compare_version=$pinned_before
	step "$dir exists (k8s.io/kubernetes ${pinned_before:-none}): pinning $version, keeping its $code"
else
	step "creating $dir from $template (k8s.io/kubernetes $template_version)"
	mkdir -p "$dir"
	created=true
	cp "$template/$code" "$dir/$code"
fi

# The go directive: the project's (go.mod at the root), or the release's when
# it needs a newer Go; not the template's, which may be a newer release's.
go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
if [[ -n $kube_go ]] && [[ $(printf '%s\n%s\n' "$go_directive" "$kube_go" | sort -V | tail -1) != "$go_directive" ]]; then
	step "k8s.io/kubernetes $version needs go $kube_go (the project's go.mod has $go_directive): export GOTOOLCHAIN=go$kube_go or newer to build it"
	go_directive=$kube_go
fi
{
	echo "module $module_path"
	echo
	echo "go $go_directive"
	echo
	echo "require k8s.io/kubernetes $version"
	if ! $node; then
		echo
		echo "require github.com/csi-registrar/node-driver-registrar/test/kubelet v0.0.0"
	fi
	echo
	echo "// k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them"
	echo "// with ./staging in its own go.mod; a consumer pins them to the same release."
	echo "replace ("
	$node || echo "	github.com/csi-registrar/node-driver-registrar/test/kubelet => ../"
	for m in $staging; do echo "	$m => $m $staging_version"; done
	echo ")"
} >"$dir/go.mod"
rm -f "$dir/go.sum"

# What go mod tidy could not download because the module proxy refused it,
# one "<module> <version> <build|test> <package>" a line: "test" when every
# chain to it goes through a dependency's tests (go mod tidy reads those,
# a build does not), <package> the first one imported from this module.
refused() {
	awk '
		/^go: .* imports$/ { test = 0; top = ""; next }
		/^\t/ && top == "" { top = $1 }
		/ tested by$/ { test = 1 }
		match($0, /[^ \t]+@v[^: ]+: reading [^ ]+: 40[34]/) {
			m = substr($0, RSTART, RLENGTH); sub(/: reading.*/, "", m); split(m, a, "@")
			print a[1], a[2], (test ? "test" : "build"), top
		}' "$1" | sort -k1,1 -k3,3 | awk '$1 != last { print; last = $1 }'
}

# A module the proxy does not serve at the version the release requires
# (it happens: 1.32.13's k8s.io/endpointslice, 1.38.0-beta.0's
# structured-merge-diff v7.0.1) is pinned to the newest older version it
# serves, of the same minor for a staging module (v0.X), of the same major
# otherwise, and said so. A module refused only for a dependency's tests is
# left out (go mod tidy -e): the build does not need it. Anything else stops
# here: nothing is changed without asking.
pinned=()
test_only=()
tidy_flags=
for attempt in 1 2 3 4; do
	step "go mod tidy${tidy_flags:+ $tidy_flags} in $dir"
	if (cd "$dir" && go mod tidy $tidy_flags) 2>&1 | tee "$dir/.tidy.log" | grep -v '^go: downloading'; [[ ${PIPESTATUS[0]} == 0 ]]; then
		rm -f "$dir/.tidy.log"
		break
	fi
	refusals=$(refused "$dir/.tidy.log")
	rm -f "$dir/.tidy.log"
	[[ -n $refusals && $attempt != 4 ]] || fail "go mod tidy in $dir failed (above); is the module proxy reachable? (go env GOPROXY: $(go env GOPROXY))"
	build_refused=$(awk '$3 == "build"' <<<"$refusals")
	if [[ -z $build_refused ]]; then
		mapfile -t test_only < <(awk '{ print $1 " " $2 ", which only tests of " $4 " or of its dependencies import" }' <<<"$refusals")
		step "the module proxy refuses $(awk '{ print $1 "@" $2 }' <<<"$refusals" | tr '\n' ' ')only for dependencies' tests: go mod tidy -e"
		tidy_flags=-e
		continue
	fi
	unavailable=()
	while read -r m want _ importer; do
		[[ $want == v0.* ]] && series=$(cut -d. -f1-2 <<<"$want"). || series=${want%%.*}.
		if ! served=$( (cd / && go list -m -versions "$m") 2>/dev/null); then
			unavailable+=("$m (every version refused; $want needed by $importer)")
			continue
		fi
		older=$( { tr ' ' '\n' <<<"${served#"$m"}" | grep "^${series//./\\.}" || true; } |
			{ cat; echo "$want"; } | sort -uV | grep -B1 -xF "$want" | grep -vxF "$want" || true)
		if [[ -z $older ]]; then
			unavailable+=("$m $want (no older ${series%.}.x served; needed by $importer)")
			continue
		fi
		if grep -q "^\t$m => $m $want\$" "$dir/go.mod"; then
			sed -i "s|^\t$m => $m $want\$|\t$m => $m $older // $want is not served by the module proxy|" "$dir/go.mod"
		else
			sed -i "s|^replace (\$|replace (\n\t$m => $m $older // $want is not served by the module proxy|" "$dir/go.mod"
		fi
		pinned+=("$m $older (the proxy does not serve $want)")
		step "the module proxy does not serve $m $want: pinned to $older, the newest older ${series%.}.x it serves"
	done <<<"$build_refused"
	if ((${#unavailable[@]})); then
		printf '  %s\n' "${unavailable[@]}" >&2
		# A module that cannot be built is not left behind for make to find.
		if $created; then rm -rf "$dir"; fi
		fail "the module proxy refuses these modules, which k8s.io/kubernetes $version's build needs (above): $dir cannot be built from it$($created && echo ", and is removed"). Run this again once the proxy serves them (go list -m -versions MODULE), or pin a version that builds by hand in go.mod"
	fi
done

# kubelet's Go API that the module implements or calls, as one line per
# declaration, so that two releases compare with diff.
api() {
	local src=$1
	{
		awk '/^type PluginHandler interface/,/^}/' "$src/pkg/kubelet/pluginmanager/cache/types.go"
		awk '/^func NewPluginManager\(/,/\) PluginManager \{/' "$src/pkg/kubelet/pluginmanager/plugin_manager.go"
		grep -h '^func (pm \*pluginManager) Run' "$src/pkg/kubelet/pluginmanager/plugin_manager.go"
		grep -h '^type SourcesReadyFn\|^func NewSourcesReady' "$src/pkg/kubelet/config/sources.go"
		awk '/^type (VolumeHost|KubeletVolumeHost) interface/,/^}/' "$src/pkg/volume/plugins.go"
	} | grep -v '^[[:space:]]*//' | sed 's/^[[:space:]]*//' | grep -v '^$'
}
compare_src=$(go env GOMODCACHE)/k8s.io/kubernetes@$compare_version
api_changed=false
if [[ $compare_version != "$version" ]]; then
	[[ -d $compare_src ]] || go mod download "k8s.io/kubernetes@$compare_version"
	if ! api_diff=$(diff <(api "$compare_src") <(api "$kube_dir")); then
		api_changed=true
		echo
		echo "kube-bump: kubelet's Go API used by $dir/$code differs between $compare_version ('<') and $version ('>'):"
		echo "$api_diff" | sed 's/^/    /'
		if $created || [[ $compare_version == "$pinned_before" ]]; then
			echo "kube-bump: $dir/$code must follow these changes (kube-bump does not rewrite code; see how the other minors' $code differ)."
		else
			echo "kube-bump: (compared with $template, the nearest other minor; $dir/$code is kept as it is.)"
		fi
		echo
	else
		step "kubelet's Go API used by $code is the same in $compare_version and $version"
	fi
fi

if $node; then
	step "resolving the components' packages in $dir (make e2e-node KUBE_VERSION=$version builds them)"
	commands=$(cd "$dir" && go list -e -tags tools -f '{{join .Imports " "}}' .)
	# shellcheck disable=SC2086 # one argument per package
	(cd "$dir" && go list -deps $commands >/dev/null) || fail "the packages of $dir/tools.go do not resolve (above)"
else
	step "go build ./... in $dir (kubelet's plugin manager: 4-8 min from an empty build cache)"
	if ! hack/progress.sh "building $dir" go build -C "$dir" -o /dev/null ./...; then
		echo >&2
		if $api_changed; then
			fail "$dir does not build: adapt $dir/$code to the API changes listed above (see how the other minors' main.go differ), then run hack/kube-bump.sh $version again"
		fi
		fail "$dir does not build (above), though the API that $code uses did not change: read the errors, fix $dir/$code, then run hack/kube-bump.sh $version again"
	fi
	(cd "$dir" && go vet ./...) || fail "go vet in $dir failed (above)"

	# test/kubelet/MINORS: one release a line, newest first. A prerelease
	# stays out of it: CI runs what MINORS lists, and a beta's module is run
	# by hand until its release replaces it.
	if [[ -n $prerelease ]]; then
		step "$version is a prerelease: not written into $minors_file (CI's matrix); make e2e KUBELET_MINORS=$minor runs it"
	else
		{
			grep -v "^${minor//./\\.}\." "$minors_file" | grep '^v' || true
			echo "$version"
		} | sort -t. -k2,2nr -k3,3nr >"$minors_file.new"
		{ grep -v '^v' "$minors_file"; cat "$minors_file.new"; } >"$minors_file.tmp"
		mv "$minors_file.tmp" "$minors_file"
		rm -f "$minors_file.new"
		step "$minors_file: $(grep '^v' "$minors_file" | tr '\n' ' ')"
	fi
fi

# What a person reads before committing.
previous_dir=$compare_src
cat <<EOF

kube-bump: $dir pins k8s.io/kubernetes $version. Before committing:
$($created && echo "  1. $dir/$code: copied from $template, its comments describe $template_version's; make them say $minor's." ||
		echo "  1. $dir/$code: where its comments name a release, make them say $version."
	for p in "${pinned[@]}"; do echo "     Pinned, not at the release: $p."; done
	for p in "${test_only[@]}"; do echo "     Left out of go.sum, refused by the module proxy: $p."; done)
EOF
if ! $node; then
	cat <<EOF
  2. What kubelet does with a plugin changed between $compare_version and $version in these files (diff -r of the module cache):
$(for p in pkg/kubelet/pluginmanager pkg/volume/csi pkg/kubelet/nodeinfomanager; do
		diff -rq -x '*_test.go' "$previous_dir/$p" "$kube_dir/$p" 2>/dev/null |
			sed "s|^Files $previous_dir/\([^ ]*\) and .* differ\$|       \1|; s|^Only in $previous_dir/\(.*\): |       only in $compare_version: \1/|; s|^Only in $kube_dir/\(.*\): |       only in $version: \1/|" || true
	done)
     Read them (diff -ru $previous_dir/pkg/kubelet/pluginmanager $kube_dir/pkg/kubelet/pluginmanager):
     a retry, a backoff or a CSINode write that changed is a row in docs/compatibility.md's
     "What depends on kubelet's version", and may change what make e2e-node's checks 10, 12 and 13 expect.
  3. Run it: make e2e KUBELET_MINORS=$minor (builds the registrar, then test/e2e against this kubelet).
  4. docs/compatibility.md: the matrix's row for $minor (what ran, the result, the time), and its
     support line; the README's compatibility line. make docs-test checks both against $minors_file.
  5. CHANGELOG.md: the supported kubelets' line, under the version being prepared.
  6. A new oldest or newest release: make e2e-node runs the newest (test/node's go.mod) and the
     oldest (hack/kube-bump.sh --node $version creates test/node/kubernetes/$minor; .ci/run reads
     the oldest from $minors_file). Remove the minors that left the list: git rm -r test/kubelet/v1.NN.
EOF
else
	cat <<EOF
  2. make e2e-node KUBE_VERSION=$version (as root): checks 10, 12 and 13 expect what this kubelet does
     (test/node/cmd/e2e-node, docs/compatibility.md); read its kubelet's pkg/kubelet/pluginmanager
     and pkg/kubelet/nodeinfomanager ($kube_dir).
EOF
fi
