#!/usr/bin/env bash
# The alerts of deploy/monitoring under `promtool test rules`: the
# PrometheusRule's rules, written as a Prometheus rule file by
# test/deploy/cmd/rulesfile (which decodes the manifest with the Prometheus
# Operator's types), are linted with `promtool check rules` and run against
# the synthetic series of test/deploy/testdata/monitoring/alerts_test.yaml,
# which say when each alert fires and clears.
#
# promtool comes from Debian's prometheus package, installed with apt-get
# when missing; so does prometheus, which make monitoring-test runs next
# for the dashboard's queries (test/e2e/monitoring).
#
#   hack/monitoring-test.sh        (make monitoring-test, first)
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/lib.sh

install_promtool
install_missing prometheus prometheus --no-install-recommends

scratch_dir monitoring-test
# alerts_test.yaml names its rule file rules.yaml, next to it.
(cd test/deploy && go run ./cmd/rulesfile ../../deploy/monitoring/prometheusrule.yaml) >"$work/rules.yaml" ||
	fail "cannot write the rules of deploy/monitoring/prometheusrule.yaml as a rule file (above)"
cp test/deploy/testdata/monitoring/alerts_test.yaml "$work/"

promtool check rules "$work/rules.yaml" || fail "promtool check rules found problems in deploy/monitoring/prometheusrule.yaml (above)"
promtool test rules "$work/alerts_test.yaml" ||
	fail "an alert of deploy/monitoring/prometheusrule.yaml does not fire or clear as test/deploy/testdata/monitoring/alerts_test.yaml expects (above)"
step "ok: every alert fires and clears as expected"
