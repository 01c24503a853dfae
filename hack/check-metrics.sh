#!/usr/bin/env bash
# Scrapes /metrics of a running registrar and lints it with Prometheus'
# `promtool check metrics`, failing on any problem it reports. The registrar
# (bin/csi-node-driver-registrar, as make build writes it) runs against the
# test CSI driver, which answers its first GetPluginInfo with Unavailable so
# that every family is served, the error counter included.
#
# promtool comes from Debian's prometheus package, installed with apt-get
# when missing.
#
#   hack/check-metrics.sh        (make metrics-check)
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

install_promtool

scratch_dir check-metrics
mkdir -p "$work/registry"

bin/mockdriver -endpoint="$work/csi.sock" -unavailable-calls=1 >"$work/driver.log" 2>&1 &
pids+=($!)
bin/csi-node-driver-registrar --csi-address="$work/csi.sock" --plugin-registration-path="$work/registry" \
	--kubelet-registration-path=/var/lib/kubelet/plugins/mock/csi.sock --http-endpoint=127.0.0.1:0 \
	--driver-health-endpoint=127.0.0.1:0 \
	>"$work/registrar.log" 2>&1 &
pids+=($!)

# The registrar logs the address it serves HTTP on, then that it published
# its registration socket.
for ((i = 0; i < 500; i++)); do
	grep -q 'Registration socket published' "$work/registrar.log" && break
	sleep 0.01
done
grep -q 'Registration socket published' "$work/registrar.log" ||
	fail "the registrar did not publish its socket within 5 s; its log:
$(cat "$work/registrar.log")"
address=$(sed -n 's/.*"Serving HTTP" address="\([^"]*\)".*/\1/p' "$work/registrar.log" | head -1)
[[ -n $address ]] || fail "no \"Serving HTTP\" line in the registrar's log"

# HTTP/1.0 over bash's /dev/tcp: no curl on a bare CI machine.
# One probe of the driver's liveness (--driver-health-endpoint), so that
# csi_sidecar_operations_seconds is in /metrics too.
health=$(sed -n 's/.*"Serving the CSI driver'"'"'s liveness probe".* address="\([^"]*\)".*/\1/p' "$work/registrar.log" | head -1)
[[ -n $health ]] || fail "no \"Serving the CSI driver's liveness probe\" line in the registrar's log"
exec 3<>"/dev/tcp/${health%:*}/${health##*:}"
printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n' "$health" >&3
probe=$(head -1 <&3 | tr -d '\r')
exec 3<&-
[[ $probe == "HTTP/1.0 200 OK" || $probe == "HTTP/1.1 200 OK" ]] || fail "GET http://$health/healthz (the driver's liveness): $probe"

exec 3<>"/dev/tcp/${address%:*}/${address##*:}"
printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$address" >&3
cat <&3 >"$work/response"
exec 3<&-
status=$(head -1 "$work/response" | tr -d '\r')
[[ $status == "HTTP/1.0 200 OK" || $status == "HTTP/1.1 200 OK" ]] || fail "GET /metrics: $status"
sed '1,/^\r$/d' "$work/response" >"$work/metrics"
step "GET http://$address/metrics: $(grep -c '^# TYPE' "$work/metrics") families"
grep -q '^csi_sidecar_operations_seconds_count{driver_name="' "$work/metrics" ||
	fail "/metrics lacks csi_sidecar_operations_seconds after a probe of --driver-health-endpoint"

# Every family is the registrar's (csi_node_driver_registrar_*), the CSI
# sidecars' (csi_sidecar_*), or one any Go exporter serves (go_*, process_*):
# nothing in another exporter's namespace, such as node_exporter's node_*.
others=$(sed -n 's/^# TYPE \([^ ]*\) .*/\1/p' "$work/metrics" | grep -Ev '^(csi_node_driver_registrar|csi_sidecar|go|process)_' || true)
[[ -z $others ]] || fail "/metrics has families outside the registrar's namespaces: $others"
grep -Eq '^csi_node_driver_registrar_build_info\{.*revision="[^"]+".*\} 1$' "$work/metrics" ||
	fail "/metrics lacks csi_node_driver_registrar_build_info with a revision label"

# promtool prints each problem and exits non-zero on any.
if ! promtool check metrics <"$work/metrics"; then
	fail "promtool check metrics found problems in /metrics (above)"
fi
step "ok: promtool check metrics found no problem"
