// Command rulesfile writes the rules of a PrometheusRule manifest as a
// Prometheus rule file, the form `promtool check rules` and `promtool test
// rules` read. The manifest is decoded strictly with the Prometheus
// Operator's own types, so a field the operator would not know fails here.
//
//	go run ./cmd/rulesfile PROMETHEUSRULE.yaml > rules.yaml
package main

import (
	"fmt"
	"os"

	"github.com/csi-registrar/node-driver-registrar/test/deploy"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rulesfile PROMETHEUSRULE.yaml > rules.yaml")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "rulesfile:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rule, err := deploy.DecodePrometheusRule(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := yaml.Marshal(rule.Spec)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}
