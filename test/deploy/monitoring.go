package deploy

import (
	"fmt"
	"slices"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// DecodePrometheusRule decodes a PrometheusRule manifest strictly, as
// DecodeStrict does any other object.
func DecodePrometheusRule(data []byte) (*monitoringv1.PrometheusRule, error) {
	obj, err := DecodeStrict(data)
	if err != nil {
		return nil, err
	}
	rule, ok := obj.(*monitoringv1.PrometheusRule)
	if !ok {
		return nil, fmt.Errorf("a %T, not a PrometheusRule", obj)
	}
	return rule, nil
}

// CheckPodMonitor returns every mistake that would keep a PodMonitor from
// scraping the registrar's /metrics in a DaemonSet's pods: a selector that
// does not select them, a namespace it does not look in, or no endpoint on
// the port the registrar serves HTTP on (--http-endpoint), at /metrics.
func CheckPodMonitor(ds *appsv1.DaemonSet, monitor *monitoringv1.PodMonitor) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	selector, err := metav1.LabelSelectorAsSelector(&monitor.Spec.Selector)
	switch {
	case err != nil:
		fail("PodMonitor %s: its selector is invalid: %v", monitor.Name, err)
	case selector.Empty() || !selector.Matches(labels.Set(ds.Spec.Template.Labels)):
		fail("PodMonitor %s: its selector %q does not select the pods of DaemonSet %s (labels %v)", monitor.Name, selector, ds.Name, ds.Spec.Template.Labels)
	}
	namespaces := monitor.Spec.NamespaceSelector
	switch {
	case namespaces.Any:
	case len(namespaces.MatchNames) > 0:
		if !slices.Contains(namespaces.MatchNames, ds.Namespace) {
			fail("PodMonitor %s looks in namespaces %v, not in the DaemonSet's %q", monitor.Name, namespaces.MatchNames, ds.Namespace)
		}
	case monitor.Namespace != ds.Namespace:
		fail("PodMonitor %s is in namespace %q and looks only there, the DaemonSet is in %q", monitor.Name, monitor.Namespace, ds.Namespace)
	}

	reg := findContainer(&ds.Spec.Template.Spec, RegistrarContainer)
	if reg == nil {
		return append(errs, fmt.Errorf("DaemonSet %s has no container named %q", ds.Name, RegistrarContainer))
	}
	flags, err := registrarFlags(reg)
	if err != nil {
		return append(errs, fmt.Errorf("the registrar's arguments: %v", err))
	}
	endpoint := flags[httpEndpointFlag]
	if endpoint == "" {
		return append(errs, fmt.Errorf("the registrar has no --%s: it serves no /metrics", httpEndpointFlag))
	}
	port, err := endpointPort(httpEndpointFlag, endpoint)
	if err != nil {
		return append(errs, err)
	}
	scraped := false
	for _, e := range monitor.Spec.PodMetricsEndpoints {
		var target int32
		switch {
		case e.Port != nil:
			for _, p := range reg.Ports {
				if p.Name == *e.Port {
					target = p.ContainerPort
				}
			}
		case e.PortNumber != nil:
			target = *e.PortNumber
		}
		path := e.Path
		if path == "" {
			path = "/metrics"
		}
		if target == port && path == "/metrics" {
			scraped = true
		}
	}
	if !scraped {
		fail("PodMonitor %s scrapes no endpoint at /metrics on the registrar's port %d (--%s=%s, a port of container %s)", monitor.Name, port, httpEndpointFlag, endpoint, RegistrarContainer)
	}
	return errs
}
