#!/usr/bin/env bash
# Measures the registrar's memory and CPU on this machine, to size the
# resources in deploy/: the test CSI driver, the registrar against it and,
# when given, kubelet's plugin manager (test/kubelet's fakekubelet) registering it;
# then PROBES pairs of /healthz and /readyz requests, each a new connection as
# kubelet's probes are. Prints VmRSS and VmHWM from /proc and the CPU
# time used.
#
#   hack/footprint.sh [REGISTRAR_BINARY [FAKEKUBELET_BINARY]]
#
# Without arguments it builds bin/csi-node-driver-registrar with `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."

registrar=${1:-}
fakekubelet=${2:-}
probes=${PROBES:-1000}
port=${PORT:-19809}

if [[ -z $registrar ]]; then
	make -s build
	registrar=bin/csi-node-driver-registrar
fi

. hack/lib.sh
scratch_dir fp

go build -o "$work/mockdriver" ./test/mockdriver
mkdir -p "$work/plugins/demo" "$work/plugins_registry"

"$work/mockdriver" --endpoint="$work/plugins/demo/csi.sock" --name=demo.csi.example.com \
	>"$work/driver.log" 2>&1 &
pids+=($!)

if [[ -n $fakekubelet ]]; then
	"$fakekubelet" --registry-dir="$work/plugins_registry" >"$work/kubelet.out" 2>"$work/kubelet.log" &
	pids+=($!)
fi

"$registrar" --csi-address="$work/plugins/demo/csi.sock" \
	--kubelet-registration-path="$work/plugins/demo/csi.sock" \
	--plugin-registration-path="$work/plugins_registry" \
	--http-endpoint="127.0.0.1:$port" >"$work/registrar.log" 2>&1 &
registrar_pid=$!
pids+=("$registrar_pid")

# Wait for the registration socket (and kubelet's verdict, if there is one).
for _ in $(seq 100); do
	[[ -S $work/plugins_registry/demo.csi.example.com-reg.sock ]] && break
	sleep 0.1
done
[[ -S $work/plugins_registry/demo.csi.example.com-reg.sock ]] || {
	echo "footprint: the registration socket did not appear" >&2
	cat "$work/registrar.log" >&2
	exit 1
}
ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz") == 200 ]]; }
if [[ -n $fakekubelet ]]; then
	for _ in $(seq 100); do
		ready && break
		sleep 0.1
	done
	ready || {
		echo "footprint: kubelet did not register the driver (/readyz is not 200)" >&2
		cat "$work/registrar.log" "$work/kubelet.log" >&2
		exit 1
	}
fi

report() {
	local label=$1 status ticks clk
	status=/proc/$registrar_pid/status
	# utime + stime, fields 14 and 15 of /proc/PID/stat, in clock ticks.
	ticks=$(awk '{print $14 + $15}' "/proc/$registrar_pid/stat")
	clk=$(getconf CLK_TCK)
	printf '%-28s VmRSS %6s kB   VmHWM %6s kB   CPU %s ms   threads %s\n' "$label" \
		"$(awk '/^VmRSS/ {print $2}' "$status")" "$(awk '/^VmHWM/ {print $2}' "$status")" \
		"$((ticks * 1000 / clk))" "$(awk '/^Threads/ {print $2}' "$status")"
}

sleep 2
report "registered, idle"
for _ in $(seq "$probes"); do
	curl -s -o /dev/null "http://127.0.0.1:$port/healthz"
	curl -s -o /dev/null "http://127.0.0.1:$port/readyz"
done
report "after $probes probe pairs"
sleep 10
report "10 s later"
