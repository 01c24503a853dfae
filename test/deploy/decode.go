package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// The API groups a CSI driver's node deployment may use. A kind outside
// them fails to decode: add its group here rather than skip the check.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(admissionregistrationv1.AddToScheme(s))
	utilruntime.Must(appsv1.AddToScheme(s))
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(policyv1.AddToScheme(s))
	utilruntime.Must(rbacv1.AddToScheme(s))
	utilruntime.Must(schedulingv1.AddToScheme(s))
	utilruntime.Must(storagev1.AddToScheme(s))
	// The Prometheus Operator's PodMonitor and PrometheusRule
	// (deploy/monitoring).
	utilruntime.Must(monitoringv1.AddToScheme(s))
	return s
}()

// The strict decoder fails on unknown and duplicate fields, as
// `kubectl apply --validate=strict` does.
var strictDecoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// DecodeStrict decodes one YAML or JSON document into its Go type from
// k8s.io/api.
func DecodeStrict(doc []byte) (runtime.Object, error) {
	obj, gvk, err := strictDecoder.Decode(doc, nil, nil)
	if err != nil {
		if gvk != nil && gvk.Kind != "" {
			return nil, fmt.Errorf("%s %s: %w", gvk.GroupVersion(), gvk.Kind, err)
		}
		return nil, err
	}
	return obj, nil
}

// DecodeKustomization decodes a kustomization file strictly: a
// Kustomization or a Component.
func DecodeKustomization(data []byte) (*types.Kustomization, error) {
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, err
	}
	isKustomization := k.Kind == types.KustomizationKind && k.APIVersion == types.KustomizationVersion
	isComponent := k.Kind == types.ComponentKind && k.APIVersion == types.ComponentVersion
	if !isKustomization && !isComponent {
		return nil, fmt.Errorf("apiVersion %q kind %q: want %s %s, or %s %s", k.APIVersion, k.Kind, types.KustomizationVersion, types.KustomizationKind, types.ComponentVersion, types.ComponentKind)
	}
	return &k, nil
}

// SplitDocuments returns the documents of a YAML stream, without those that
// hold only comments or blank lines.
func SplitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}
