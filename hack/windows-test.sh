#!/usr/bin/env bash
# Runs the registrar built for windows/amd64 under Wine, in a new Wine
# prefix:
#   1. `--version` (its path and VERSION) and `--help` (exit 0, the usage);
#   2. a start with --http-endpoint and no driver: /healthz 200, /readyz
#      503 "waiting for the CSI driver", /status's state
#      waiting-for-driver (docs/probes-and-metrics.md); then SIGINT, which
#      Wine delivers as Ctrl-C: "Stopped" in the log and exit 0;
#   3. the unit tests of the product (cmd, internal, pkg) built for
#      windows/amd64, each package's run from its directory (its testdata).
#      Wine's Winsock has no AF_UNIX, so the tests that need it (the
#      registration itself, which speaks AF_UNIX to the driver and to
#      kubelet) skip, saying so (test/afunix). Wine 8's os.RemoveAll
#      cannot delete files (it lacks FileDispositionInformationEx), so the
#      tests whose t.TempDir holds files skip, saying so
#      (test/removeall); Wine 10 has it. Any other skip is listed with
#      its reason.
#
# Wine comes from Debian's wine package (with wine64), installed with
# apt-get when missing. Go 1.24 and later need ProcessPrng from
# bcryptprimitives.dll, which Wine exports from 9.1 on; for an older Wine
# (Debian 12 has 8.0) the script builds hack/windows/bcryptprimitives.c
# with mingw-w64 (Debian's gcc-mingw-w64-x86-64-win32, installed when
# missing) into the prefix's system32: Go loads it from there only, never
# from beside the executable.
#
#   VERSION=v1.2.3 hack/windows-test.sh   (make windows-test)
#
# WINDOWS_TEST_PACKAGES (go list patterns) narrows the unit tests, GOTAGS
# gives the build tags of the binary (the Makefile's).
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

[[ -n ${VERSION:-} ]] || fail "VERSION is not set: run make windows-test, or VERSION=\$(make version) $0"
listed=$(go list ${WINDOWS_TEST_PACKAGES:-./cmd/... ./internal/... ./pkg/... ./test/afunix ./test/removeall}) ||
	fail "go list could not list the packages to test (above)"
packages=($listed)
[[ ${#packages[@]} -gt 0 ]] || fail "no package to test"
start=$SECONDS

install_missing wine wine --no-install-recommends
step "$(wine --version 2>/dev/null)"

work=$(mktemp -d /tmp/windows-test.XXXXXX)
registrar_pid=
cleanup() {
	[[ -z $registrar_pid ]] || kill "$registrar_pid" 2>/dev/null || true
	wineserver -k 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
export WINEPREFIX=$work/prefix WINEARCH=win64 WINEDEBUG=-all
# No Mono or Gecko: nothing here uses .NET or HTML, and their installers
# would ask to download them.
export WINEDLLOVERRIDES='mscoree,mshtml='
wineboot --init >/dev/null 2>&1 || fail "wineboot could not create the Wine prefix $WINEPREFIX"
wineserver -w
system32=$WINEPREFIX/drive_c/windows/system32
if [[ -f $system32/bcryptprimitives.dll ]]; then
	step "this Wine has its own bcryptprimitives.dll"
else
	install_missing x86_64-w64-mingw32-gcc gcc-mingw-w64-x86-64-win32 --no-install-recommends
	x86_64-w64-mingw32-gcc -shared -nostdlib -O2 -Wall -Wextra -Werror -e DllMainCRTStartup \
		-Wl,--no-insert-timestamp -o "$system32/bcryptprimitives.dll" \
		hack/windows/bcryptprimitives.c hack/windows/bcryptprimitives.def -ladvapi32 ||
		fail "could not build hack/windows/bcryptprimitives.c with mingw-w64"
	step "built hack/windows/bcryptprimitives.c (ProcessPrng) into the prefix's system32"
fi

step "GOOS=windows GOARCH=amd64 go build ./cmd/registrar"
exe=$work/csi-node-driver-registrar.exe
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go build -trimpath -tags "${GOTAGS:-}" \
	-ldflags "-X main.version=$VERSION" -o "$exe" ./cmd/registrar

# 1. --version and --help.
out=$(wine "$exe" --version 2>&1) || fail "wine $exe --version exited $?: $out"
[[ $out == *"csi-node-driver-registrar.exe $VERSION" ]] ||
	fail "wine $exe --version printed \"$out\", want its path and $VERSION"
step "--version: $out"
out=$(wine "$exe" --help 2>&1) || fail "wine $exe --help exited $?: $out"
[[ $out == *--kubelet-registration-path=PATH* && $out == *-http-endpoint* ]] ||
	fail "wine $exe --help did not print the usage: $out"
step "--help: the usage, exit 0"

# 2. A start with --http-endpoint and no driver, then Ctrl-C.
mkdir "$work/registry"
log=$work/registrar.log
# Created before the background start, which may open it after the first look.
: >"$log"
wine "$exe" --http-endpoint=127.0.0.1:0 --csi-address='C:\csi\csi.sock' \
	--kubelet-registration-path='C:\var\lib\kubelet\plugins\csi.example.com\csi.sock' \
	--plugin-registration-path="Z:${work//\//\\}\\registry" >"$log" 2>&1 &
registrar_pid=$!
address=
for _ in $(seq 300); do
	address=$(sed -n 's/.*"Serving HTTP" address="\([^"]*\)".*/\1/p' "$log")
	[[ -z $address ]] || break
	kill -0 "$registrar_pid" 2>/dev/null || fail "the registrar exited before serving HTTP: $(cat "$log")"
	sleep 0.1
done
[[ -n $address ]] || fail "the registrar did not say \"Serving HTTP\" within 30 s: $(cat "$log")"
# expect PATH CODE BODY_PATTERN: the answer of GET PATH.
expect() {
	local got code
	got=$(curl -sS --max-time 10 -w '\n%{http_code}' "http://$address$1") || fail "GET $1: curl failed"
	code=${got##*$'\n'}
	got=${got%$'\n'*}
	[[ $code == "$2" && $got == $3 ]] || fail "GET $1 = $code \"$got\", want $2 matching \"$3\""
	step "GET $1: $code"
}
expect /healthz 200 '*waiting for the CSI driver*'
expect /readyz 503 '*waiting for the CSI driver*'
expect /status 200 '*"state": "waiting-for-driver"*'
expect /metrics 200 '*csi_node_driver_registrar_build_info{*version="'"$VERSION"'"*'
kill -INT "$registrar_pid"
rc=0
wait "$registrar_pid" || rc=$?
registrar_pid=
[[ $rc == 0 ]] || fail "after SIGINT (Ctrl-C) the registrar exited $rc, want 0: $(cat "$log")"
grep -q '"Stopped"' "$log" || fail "after SIGINT the registrar did not log \"Stopped\": $(cat "$log")"
step "SIGINT (Ctrl-C): \"Stopped\", exit 0"

# 3. The unit tests.
step "the unit tests of ${#packages[@]} packages, built for windows/amd64"
mkdir "$work/tests"
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go test -c -o "$work/tests/" "${packages[@]}" >/dev/null ||
	fail "the unit tests did not build for windows/amd64 (above)"
failed=() total_pass=0 total_unix=0 total_rm=0 total_other=0
while read -r dir path; do
	exe=$work/tests/${path##*/}.test.exe
	[[ -f $exe ]] || continue # no tests for Windows
	out=$work/tests/${path##*/}.log
	# Without CI: a test that needs Linux programs (etcd, kube-apiserver),
	# which a Windows test cannot start, skips saying so rather than fails
	# as it does under CI, where Linux's make test runs it.
	rc=0
	(cd "$dir" && env -u CI timeout 600 wine "$exe" -test.v -test.count=1 -test.timeout=5m >"$out" 2>&1) || rc=$?
	if ((rc > 128)) && [[ $(tail -n 1 "$out") == PASS ]]; then
		# Seen on a loaded machine: the test program printed PASS, all its
		# tests having passed, and the process was then killed (SIGKILL)
		# on its way out under Wine. Said, and run once more.
		step "${path#*/node-driver-registrar/}: killed by signal $((rc - 128)) after PASS under Wine; running it once more"
		rc=0
		(cd "$dir" && env -u CI timeout 600 wine "$exe" -test.v -test.count=1 -test.timeout=5m >"$out" 2>&1) || rc=$?
	fi
	if ((rc == 0)); then
		status=ok
	else
		status=FAIL
		failed+=("$path")
		cat "$out"
	fi
	passed=$(grep -c -- '^ *--- PASS' "$out" || true)
	# Each skipped test with its reason, from the log lines under its
	# "=== RUN" (or NAME, CONT) headings: a skip for what this system lacks
	# names it (test/afunix, test/removeall); otherwise the last line logged
	# from a _test.go file, as t.Skip logs it (the cleanups that run after
	# it may log from the product's files), else the last line. The skips
	# for what this system lacks are counted, the others listed.
	skips=$(awk '/^=== (RUN|NAME|CONT) / { cur = $3 }
		/^ +[^ ]+\.go:[0-9]+: / {
			line = $0; sub(/^ +/, "", line)
			if (line ~ /needs (AF_UNIX sockets|os\.RemoveAll)/) lacks[cur] = line
			else if (line ~ /^[^ ]+_test\.go:[0-9]+: /) test[cur] = line
			else any[cur] = line
		}
		/^ *--- SKIP: / { t = $3; print t ": " (t in lacks ? lacks[t] : t in test ? test[t] : any[t]) }' "$out")
	unix=$(grep -c 'needs AF_UNIX sockets' <<<"$skips" || true)
	norm=$(grep -c 'needs os.RemoveAll' <<<"$skips" || true)
	other=$(grep -v 'needs AF_UNIX sockets\|needs os.RemoveAll' <<<"$skips" | grep -c . || true)
	step "$status ${path#*/node-driver-registrar/}: $passed passed; skipped: $unix for AF_UNIX, $norm for os.RemoveAll, $other other"
	[[ $other == 0 ]] || grep -v 'needs AF_UNIX sockets\|needs os.RemoveAll' <<<"$skips" | sed 's/^/  skipped /'
	total_pass=$((total_pass + passed)) total_unix=$((total_unix + unix)) total_rm=$((total_rm + norm)) total_other=$((total_other + other))
done < <(go list -f '{{.Dir}} {{.ImportPath}}' "${packages[@]}")
[[ ${#failed[@]} == 0 ]] || fail "unit tests failed under Wine (above): ${failed[*]}"
# A run in which nothing passed tested nothing: a listing or a build gone
# wrong, not a success.
[[ $total_pass -gt 0 ]] || fail "no unit test passed under Wine: nothing was tested"
step "ok in $((SECONDS - start)) s: --version, --help, the HTTP endpoint, Ctrl-C; unit tests and subtests: $total_pass passed; skipped: $total_unix for AF_UNIX, $total_rm for os.RemoveAll, $total_other other"
