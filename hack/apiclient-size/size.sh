#!/usr/bin/env bash
# The release binary's size with each way of calling the API server that
# internal/kubeapi (the client of pkg/features/nodegate and
# pkg/features/csinode) could be replaced by, for the choice in its package
# comment: the tree as it is (net/http, the chosen one), then with a file
# added to cmd/registrar that makes the same calls with client-go's REST
# client alone, then with client-go's typed core/v1 and storage/v1 clients. Each variant is
# built in a copy of the module, so that go.mod here never requires
# client-go. Needs the module proxy (or the module cache) for client-go.
#
#   hack/apiclient-size/size.sh [CLIENT_GO_VERSION]
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:-v0.37.1}
tags='grpcnotrace nethttpomithttp2'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

size() { stat -c %s "$1"; }
build() { # dir out
	(cd "$1" && CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags '-s -w' -o "$2" ./cmd/registrar)
}

build . "$work/base"
base=$(size "$work/base")
printf '%-44s %10d bytes\n' "as it is (net/http)" "$base"
for variant in rest typed; do
	copy=$work/src-$variant
	mkdir -p "$copy"
	git ls-files -z | xargs -0 cp --parents -t "$copy"
	# Uncommitted changes count: the copy is of the working tree's files.
	cp "hack/apiclient-size/$variant.go.txt" "$copy/cmd/registrar/zz_apiclient_$variant.go"
	(cd "$copy" && go get "k8s.io/client-go@$version" >/dev/null 2>&1 && go mod tidy >/dev/null 2>&1)
	build "$copy" "$work/$variant"
	s=$(size "$work/$variant")
	printf '%-44s %10d bytes  %+d (%+.1f%%)\n' "+ client-go $version, $variant client" "$s" "$((s - base))" \
		"$(awk -v a="$s" -v b="$base" 'BEGIN {print (a - b) * 100 / b}')"
done
