// Package kubeapi makes the registrar's few requests to the Kubernetes API
// server with the pod's service account: the node gate's GET and patches of
// its Node (pkg/features/nodegate), the CSINode confirmation's GET and WATCH
// of its CSINode and GET of its Node (pkg/features/csinode).
//
// It is written on net/http and encoding/json rather than client-go: a GET,
// a PATCH and a WATCH of one object each do not need a Kubernetes client
// library, and client-go's REST client alone would add 2.1 MB (+14%) to the
// binary, its typed clients 16.5 MB (+113%) (hack/apiclient-size/size.sh
// builds both, with the same calls, for the figures).
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The service account's files, where kubelet mounts them in every
// container that automounts its token.
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// tokenRefresh is how often the token file is read again. kubelet
	// rotates a bound token well before it expires (at 80% of its life,
	// at least an hour); client-go re-reads the file every minute too.
	tokenRefresh = time.Minute
	// requestTimeout bounds each request to the API server.
	requestTimeout = 10 * time.Second
	// maxResponse bounds what is read of an answer: a Node or a CSINode
	// is a few KiB.
	maxResponse = 4 << 20
)

// Config says where the API server is and how to authenticate.
type Config struct {
	// Host is the API server's base URL, https://host:port.
	Host string
	// TokenFile holds the bearer token; it is read again every minute,
	// and at once after a 401, as kubelet rotates it.
	TokenFile string
	// CAFile holds the PEM certificates that the API server's serving
	// certificate must chain to.
	CAFile string
	// UserAgent is sent with each request.
	UserAgent string
}

// InClusterConfig is the configuration of a process in a pod: the API
// server from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the
// pod's service account token and CA, as client-go's rest.InClusterConfig.
func InClusterConfig(userAgent string) (Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return Config{}, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: the node's taints and condition, and its CSINode, are reached through the API server, which only a process in a pod finds this way")
	}
	return Config{
		Host:      "https://" + net.JoinHostPort(host, port),
		TokenFile: serviceAccountDir + "/token",
		CAFile:    serviceAccountDir + "/ca.crt",
		UserAgent: userAgent,
	}, nil
}

// Client makes requests to the API server; it is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client

	mu        sync.Mutex
	token     string
	tokenRead time.Time
}

// NewClient reads the CA and the token once, so that a pod without its
// service account's files fails at start with the file named.
func NewClient(cfg Config) (*Client, error) {
	pool := x509.NewCertPool()
	pemCerts, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("the API server's CA: %w (is the service account token mounted? automountServiceAccountToken must not be false)", err)
	}
	if !pool.AppendCertsFromPEM(pemCerts) {
		return nil, fmt.Errorf("the API server's CA: no PEM certificate in %s", cfg.CAFile)
	}
	c := &Client{cfg: cfg, http: &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: requestTimeout,
			IdleConnTimeout:     90 * time.Second,
			MaxIdleConnsPerHost: 1,
		},
	}}
	if _, err := c.currentToken(false); err != nil {
		return nil, err
	}
	return c, nil
}

// currentToken is the token file's content, read again when it is older
// than tokenRefresh or when fresh is set (after a 401).
func (c *Client) currentToken(fresh bool) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !fresh && c.token != "" && time.Since(c.tokenRead) < tokenRefresh {
		return c.token, nil
	}
	b, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		if c.token != "" {
			// Keep the last one: kubelet replaces the file atomically, so
			// a failed read is passing; the API server will say if the
			// token no longer works.
			return c.token, nil
		}
		return "", fmt.Errorf("the service account token: %w (is the service account token mounted? automountServiceAccountToken must not be false)", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("the service account token file %s is empty", c.cfg.TokenFile)
	}
	c.token, c.tokenRead = token, time.Now()
	return token, nil
}

// Object names one object of the API: the path of a request about it, and,
// in errors, the RBAC terms the request needs.
type Object struct {
	// Group is the API group, "" for the core group; Version its version.
	Group, Version string
	// Resource is the resource's plural name; Subresource "" or e.g.
	// "status".
	Resource, Subresource string
	Name                  string
	// Kind names the object in errors: "node", "CSINode".
	Kind string
	// Component is the deploy/ component whose ClusterRole grants the
	// requests, named in a 403's error.
	Component string
}

// collection is the path of the object's collection.
func (o Object) collection() string {
	if o.Group == "" {
		return "/api/" + o.Version + "/" + o.Resource
	}
	return "/apis/" + o.Group + "/" + o.Version + "/" + o.Resource
}

func (o Object) path() string {
	p := o.collection() + "/" + url.PathEscape(o.Name)
	if o.Subresource != "" {
		p += "/" + o.Subresource
	}
	return p
}

// resource is the resource as RBAC names it: "nodes/status".
func (o Object) resource() string {
	if o.Subresource != "" {
		return o.Resource + "/" + o.Subresource
	}
	return o.Resource
}

// APIError is an answer of the API server other than 2xx, or a watch's
// ERROR event.
type APIError struct {
	Code   int
	Verb   string
	Object Object
	// Message is the API server's own, from its Status object.
	Message string
	// Policy names the ValidatingAdmissionPolicy that refused the request
	// (deploy/node-gate's csi-node-gate), and PolicyMessage is what it
	// said; both empty for other answers.
	Policy, PolicyMessage string
}

func (e *APIError) Error() string {
	o := e.Object
	switch {
	case e.Policy != "":
		// Only the node gate writes, and only writes are admitted.
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
		return fmt.Sprintf("unauthorized: the API server did not accept the service account's token to %s %s: %s", e.Verb, o.resource(), e.Message)
	case e.Code == http.StatusNotFound && o.Resource == "nodes":
		return fmt.Sprintf("node %q not found: the registrar must be given its own node's name, from the downward API's spec.nodeName; the API server said: %s", o.Name, e.Message)
	default:
		return fmt.Sprintf("%s %s of %s %q: %d %s: %s", e.Verb, o.resource(), o.Kind, o.Name, e.Code, http.StatusText(e.Code), e.Message)
	}
}

// Code is the HTTP status code of an *APIError in err's chain, 0 for
// another error: http.StatusNotFound for an object that does not exist,
// http.StatusGone for a watch's expired resourceVersion.
func Code(err error) int {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return 0
}

// CodeLabel is the outcome of a request as its counters label it: the
// HTTP status code ("200" for a nil err), or "error" when there was no
// answer.
func CodeLabel(err error) string {
	switch code := Code(err); {
	case code != 0:
		return strconv.Itoa(code)
	case err != nil:
		return "error"
	}
	return "200"
}

// Requests counts a feature's requests to the API server by the request's
// name and its outcome (CodeLabel), for its status and metrics. Its owner's
// lock guards it.
type Requests map[string]map[string]uint64

// Add counts one request named name that ended with err.
func (r Requests) Add(name string, err error) {
	if r[name] == nil {
		r[name] = map[string]uint64{}
	}
	r[name][CodeLabel(err)]++
}

// Clone returns a copy of r that shares no map with it.
func (r Requests) Clone() Requests {
	c := make(Requests, len(r))
	for name, codes := range r {
		c[name] = maps.Clone(codes)
	}
	return c
}

// newAPIError reads the API server's Status in answer.
func newAPIError(code int, verb string, o Object, answer []byte) *APIError {
	apiErr := &APIError{Code: code, Verb: verb, Object: o}
	var status struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(answer, &status) == nil && status.Message != "" {
		apiErr.Message = status.Message
		apiErr.Policy, apiErr.PolicyMessage = refusingPolicy(status.Message)
	} else {
		apiErr.Message = strings.TrimSpace(string(answer[:min(len(answer), 200)]))
	}
	return apiErr
}

// Do sends a request about o, with query ("" or e.g. "dryRun=All"), and
// returns the answer's body; an answer other than 2xx is an *APIError.
func (c *Client) Do(ctx context.Context, method string, o Object, query, contentType string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	verb := strings.ToLower(method)
	target := c.cfg.Host + o.path()
	if query != "" {
		target += "?" + query
	}
	resp, err := c.send(ctx, method, verb, target, o, contentType, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("%s %s of %s %q: reading the answer: %w", verb, o.resource(), o.Kind, o.Name, err)
	}
	return answer, nil
}

// Get reads o and decodes it into v.
func (c *Client) Get(ctx context.Context, o Object, v any) error {
	answer, err := c.Do(ctx, http.MethodGet, o, "", "", nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(answer, v); err != nil {
		return fmt.Errorf("get %s of %s %q: the answer is not a %s: %w", o.resource(), o.Kind, o.Name, o.Kind, err)
	}
	return nil
}

// send makes the request, with the token read again and the request sent
// again once after a 401 (kubelet may have rotated the token since it was
// read); it returns a 2xx answer, whose body the caller closes.
func (c *Client) send(ctx context.Context, method, verb, target string, o Object, contentType string, body []byte) (*http.Response, error) {
	for fresh := false; ; fresh = true {
		token, err := c.currentToken(fresh)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if c.cfg.UserAgent != "" {
			req.Header.Set("User-Agent", c.cfg.UserAgent)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s %s of %s %q: %w", verb, o.resource(), o.Kind, o.Name, err)
		}
		if resp.StatusCode/100 == 2 {
			return resp, nil
		}
		answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s %s of %s %q: reading the answer: %w", verb, o.resource(), o.Kind, o.Name, err)
		case resp.StatusCode == http.StatusUnauthorized && !fresh:
			continue
		}
		return nil, newAPIError(resp.StatusCode, verb, o, answer)
	}
}

// Watch event types.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
	Error    = "ERROR"
)

// Event is one change that a watch reports: Type is Added, Modified,
// Deleted or Bookmark (an ERROR event is Next's error), Object the object
// as JSON (of a Bookmark, only its kind and resourceVersion).
type Event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// A Watch is a stream of events from the API server.
type Watch struct {
	object Object
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc
}

// Watch watches o, by name in its collection, from resourceVersion ("":
// from the current state, which the first events then report), with
// bookmarks, for timeout (rounded down to seconds) after which the API
// server ends it. Its end, ctx's end or Close closes the connection.
func (c *Client) Watch(ctx context.Context, o Object, resourceVersion string, timeout time.Duration) (*Watch, error) {
	query := url.Values{
		"watch":               {"true"},
		"fieldSelector":       {"metadata.name=" + o.Name},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {strconv.Itoa(int(timeout / time.Second))},
	}
	if resourceVersion != "" {
		query.Set("resourceVersion", resourceVersion)
	}
	ctx, cancel := context.WithCancel(ctx)
	// The answer's headers are bounded as any request's; its events are
	// not.
	headers := time.AfterFunc(requestTimeout, cancel)
	resp, err := c.send(ctx, http.MethodGet, "watch", c.cfg.Host+o.collection()+"?"+query.Encode(), o, "", nil)
	if !headers.Stop() {
		if err == nil {
			resp.Body.Close()
		}
		err = fmt.Errorf("watch %s of %s %q: no answer in %v", o.resource(), o.Kind, o.Name, requestTimeout)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &Watch{object: o, body: resp.Body, dec: json.NewDecoder(resp.Body), cancel: cancel}, nil
}

// Next waits for the next event. An ERROR event is an *APIError with the
// code of its Status (http.StatusGone: the resourceVersion is too old,
// watch again from a new GET); the end of the watch is io.EOF.
func (w *Watch) Next() (Event, error) {
	var e Event
	if err := w.dec.Decode(&e); err != nil {
		if err == io.EOF {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("watch %s of %s %q: %w", w.object.resource(), w.object.Kind, w.object.Name, err)
	}
	switch e.Type {
	case Added, Modified, Deleted, Bookmark:
		return e, nil
	case Error:
		var status struct {
			Code int `json:"code"`
		}
		_ = json.Unmarshal(e.Object, &status)
		if status.Code == 0 {
			status.Code = http.StatusInternalServerError
		}
		return Event{}, newAPIError(status.Code, "watch", w.object, e.Object)
	default:
		return Event{}, fmt.Errorf("watch %s of %s %q: an event of unknown type %q", w.object.resource(), w.object.Kind, w.object.Name, e.Type)
	}
}

// Close ends the watch and closes its connection.
func (w *Watch) Close() error {
	w.cancel()
	return w.body.Close()
}

// refusingPolicy finds, in the message of the API server's refusal, the
// ValidatingAdmissionPolicy that refused the request and what it said:
// "<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>'
// with binding '<binding>' denied request: <message>".
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
