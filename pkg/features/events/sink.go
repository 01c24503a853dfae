package events

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// sink is the recorder's record.EventSink on client-go's REST client for
// core/v1 alone: the generated core/v1 clientset links the apply
// configurations of every API group.
type sink struct {
	ctx    context.Context
	client *rest.RESTClient
}

func newSink(ctx context.Context, cfg *rest.Config) (*sink, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Version: "v1"}
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &sink{ctx: ctx, client: client}, nil
}

func (s *sink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.client.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(s.ctx).Into(out)
	return out, err
}

func (s *sink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.client.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(s.ctx).Into(out)
	return out, err
}

func (s *sink) Patch(e *corev1.Event, patch []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.client.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(patch).Do(s.ctx).Into(out)
	return out, err
}
