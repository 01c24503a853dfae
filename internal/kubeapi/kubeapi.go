// Package kubeapi is what the API features (nodegate, csinode) share on top
// of client-go: configuration, client, errors that name the missing RBAC rule
// or the refusing admission policy, and request counters.
package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// requestTimeout bounds each GET and PATCH; watches have their own.
const requestTimeout = 10 * time.Second

// Config is the API server's configuration from kubeconfig, or else the
// pod's service account (client-go rereads the token as kubelet rotates it).
func Config(kubeconfig, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig=%q: %w; give a readable kubeconfig, or leave --kubeconfig empty in a pod to use its service account", kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, fmt.Errorf("%w: outside a pod, give --kubeconfig", err)
		}
		return nil, fmt.Errorf("the pod's service account: %w (is its token mounted? automountServiceAccountToken must not be false)", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Client reads and patches objects as unstructured ones, so that k8s.io/api's
// generated types are not linked in (docs/performance.md).
type Client struct {
	dynamic dynamic.Interface
}

// NewClient makes a client of cfg's API server.
func NewClient(cfg *rest.Config) (*Client, error) {
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the API server's client: %w", err)
	}
	return &Client{dynamic: c}, nil
}

// Resource is the client of o's resource.
func (c *Client) Resource(o Object) dynamic.ResourceInterface {
	return c.dynamic.Resource(schema.GroupVersionResource{Group: o.Group, Version: "v1", Resource: o.Resource})
}

// Get reads o.
func (c *Client) Get(ctx context.Context, o Object) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	u, err := c.Resource(o).Get(ctx, o.Name, metav1.GetOptions{}, o.subresources()...)
	return u, Error("get", o, err)
}

// Patch applies patch, of type pt, to o.
func (c *Client) Patch(ctx context.Context, o Object, pt types.PatchType, patch []byte, opts metav1.PatchOptions) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	_, err := c.Resource(o).Patch(ctx, o.Name, pt, patch, opts, o.subresources()...)
	return Error("patch", o, err)
}

// Object names one object of the API, for the errors of requests about it.
type Object struct {
	Group                 string
	Resource, Subresource string
	Name                  string
	Kind                  string
	// Component is the deploy/ component whose ClusterRole grants the
	// requests, named in a 403's error.
	Component string
}

func (o Object) subresources() []string {
	if o.Subresource == "" {
		return nil
	}
	return []string{o.Subresource}
}

// resource is the resource as RBAC names it: "nodes/status".
func (o Object) resource() string {
	if o.Subresource != "" {
		return o.Resource + "/" + o.Subresource
	}
	return o.Resource
}

// APIError is a non-2xx answer of the API server, or a watch's ERROR event,
// that says what to fix.
type APIError struct {
	Code    int
	Verb    string
	Object  Object
	Message string
	// Policy and PolicyMessage: the ValidatingAdmissionPolicy that refused
	// the request and what it said; empty for other answers.
	Policy, PolicyMessage string
	// err is client-go's, which the reflector classifies.
	err error
}

func (e *APIError) Unwrap() error { return e.err }

func (e *APIError) Error() string {
	o := e.Object
	switch {
	case e.Policy != "":
		return fmt.Sprintf("%s %s of %s %q refused by the ValidatingAdmissionPolicy %s: %s (the policy allows the registrar's service account to remove only its own Node's startup taints and to set only its driver's condition; see docs/node-gate-policy.md for its driver name and taint keys)",
			e.Verb, o.resource(), o.Kind, o.Name, e.Policy, e.PolicyMessage)
	case e.Code == http.StatusForbidden:
		has := ""
		if o.Component != "" {
			has = " (" + o.Component + " has it)"
		}
		return fmt.Sprintf("forbidden: the registrar's service account may not %s %s: its ClusterRole needs the rule {apiGroups: [%q], resources: [%q], verbs: [%q]}%s; the API server said: %s",
			e.Verb, o.resource(), o.Group, o.resource(), e.Verb, has, e.Message)
	case e.Code == http.StatusUnauthorized:
		return fmt.Sprintf("unauthorized: the API server did not accept the credentials to %s %s: %s", e.Verb, o.resource(), e.Message)
	case e.Code == http.StatusNotFound && o.Resource == "nodes":
		return fmt.Sprintf("node %q not found: the registrar must be given its own node's name, from the downward API's spec.nodeName; the API server said: %s", o.Name, e.Message)
	default:
		return fmt.Sprintf("%s %s of %s %q: %d %s: %s", e.Verb, o.resource(), o.Kind, o.Name, e.Code, http.StatusText(e.Code), e.Message)
	}
}

// Error is err as an *APIError when the API server answered, or else with
// the request named; nil for nil.
func Error(verb string, o Object, err error) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return fmt.Errorf("%s %s of %s %q: %w", verb, o.resource(), o.Kind, o.Name, err)
	}
	s := status.Status()
	apiErr := &APIError{Code: int(s.Code), Verb: verb, Object: o, Message: s.Message, err: err}
	apiErr.Policy, apiErr.PolicyMessage = refusingPolicy(s.Message)
	return apiErr
}

// codeLabel is a request's outcome as counters label it: the HTTP status
// code of the API server's answer in err's chain (an *APIError wraps
// client-go's), "200" for nil, or "error" when there was no answer.
func codeLabel(err error) string {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status) && status.Status().Code != 0:
		return strconv.Itoa(int(status.Status().Code))
	case err != nil:
		return "error"
	}
	return "200"
}

// Requests counts requests by name and codeLabel. Its owner's lock guards it.
type Requests map[string]map[string]uint64

// Add counts one request.
func (r Requests) Add(name string, err error) {
	if r[name] == nil {
		r[name] = map[string]uint64{}
	}
	r[name][codeLabel(err)]++
}

// Collect sends the counts as desc's counters, labelled by name and code.
func (r Requests) Collect(ch chan<- prometheus.Metric, desc *prometheus.Desc) {
	for name, codes := range r {
		for code, n := range codes {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), name, code)
		}
	}
}

// Clone returns a deep copy.
func (r Requests) Clone() Requests {
	c := make(Requests, len(r))
	for name, codes := range r {
		c[name] = maps.Clone(codes)
	}
	return c
}

// refusingPolicy parses the API server's "... ValidatingAdmissionPolicy
// '<policy>' with binding '<binding>' denied request: <message>".
func refusingPolicy(message string) (policy, said string) {
	const prefix, denied = "ValidatingAdmissionPolicy '", " denied request: "
	_, rest, ok := strings.Cut(message, prefix)
	if !ok {
		return "", ""
	}
	policy, rest, ok = strings.Cut(rest, "'")
	if !ok {
		return "", ""
	}
	if _, said, ok = strings.Cut(rest, denied); !ok {
		said = message
	}
	return policy, said
}
