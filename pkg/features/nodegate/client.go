package nodegate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
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
	// maxResponse bounds what is read of an answer: a Node is a few KiB.
	maxResponse = 4 << 20
)

// ClientConfig says where the API server is and how to authenticate.
type ClientConfig struct {
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
func InClusterConfig(userAgent string) (ClientConfig, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ClientConfig{}, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: the node's taints and conditions are changed through the API server, which only a process in a pod finds this way")
	}
	return ClientConfig{
		Host:      "https://" + net.JoinHostPort(host, port),
		TokenFile: serviceAccountDir + "/token",
		CAFile:    serviceAccountDir + "/ca.crt",
		UserAgent: userAgent,
	}, nil
}

// Client makes the node gate's requests to the API server over net/http:
// three kinds of request do not need a Kubernetes client library, which
// would add megabytes to the binary (hack/apiclient-size measures it; the
// README gives the figures).
type Client struct {
	cfg  ClientConfig
	http *http.Client

	mu        sync.Mutex
	token     string
	tokenRead time.Time
}

// NewClient reads the CA and the token once, so that a pod without its
// service account's files fails at start with the file named.
func NewClient(cfg ClientConfig) (*Client, error) {
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

// APIError is an answer of the API server other than 2xx.
type APIError struct {
	Code     int
	Verb     string
	Resource string
	Node     string
	// Message is the API server's own, from its Status object.
	Message string
	// Policy names the ValidatingAdmissionPolicy that refused the request
	// (deploy/node-gate's csi-node-gate), and PolicyMessage is what it
	// said; both empty for other answers.
	Policy, PolicyMessage string
}

func (e *APIError) Error() string {
	switch {
	case e.Policy != "":
		return fmt.Sprintf("%s %s of node %q refused by the ValidatingAdmissionPolicy %s: %s (the policy allows the registrar's service account to remove only its own Node's startup taints and to set only its driver's condition; see docs/node-gate-policy.md for its driver name and taint keys)",
			e.Verb, e.Resource, e.Node, e.Policy, e.PolicyMessage)
	case e.Code == http.StatusForbidden:
		return fmt.Sprintf("forbidden: the registrar's service account may not %s %s: its ClusterRole needs the rule {apiGroups: [\"\"], resources: [\"%s\"], verbs: [\"%s\"]} (deploy/node-gate has it); the API server said: %s",
			e.Verb, e.Resource, e.Resource, e.Verb, e.Message)
	case e.Code == http.StatusUnauthorized:
		return fmt.Sprintf("unauthorized: the API server did not accept the service account's token to %s %s: %s", e.Verb, e.Resource, e.Message)
	case e.Code == http.StatusNotFound:
		return fmt.Sprintf("node %q not found: the registrar must be given its own node's name, from the downward API's spec.nodeName; the API server said: %s", e.Node, e.Message)
	default:
		return fmt.Sprintf("%s %s of node %q: %d %s: %s", e.Verb, e.Resource, e.Node, e.Code, http.StatusText(e.Code), e.Message)
	}
}

// do sends a request about node to the API server and returns the
// answer's body; an answer other than 2xx is an *APIError. subresource is
// "" or "/status"; the request's verb and resource, the RBAC terms it
// needs, are said in errors.
func (c *Client) do(ctx context.Context, method, node, subresource, contentType string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	verb, resource := strings.ToLower(method), "nodes"+subresource
	for fresh := false; ; fresh = true {
		token, err := c.currentToken(fresh)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, method, c.cfg.Host+"/api/v1/nodes/"+url.PathEscape(node)+subresource, bytes.NewReader(body))
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
			return nil, fmt.Errorf("%s %s of node %q: %w", verb, resource, node, err)
		}
		answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s %s of node %q: reading the answer: %w", verb, resource, node, err)
		case resp.StatusCode/100 == 2:
			return answer, nil
		case resp.StatusCode == http.StatusUnauthorized && !fresh:
			// kubelet may have rotated the token since it was read.
			continue
		}
		apiErr := &APIError{Code: resp.StatusCode, Verb: verb, Resource: resource, Node: node}
		var status struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(answer, &status) == nil && status.Message != "" {
			apiErr.Message = status.Message
			apiErr.Policy, apiErr.PolicyMessage = refusingPolicy(status.Message)
		} else {
			apiErr.Message = strings.TrimSpace(string(answer[:min(len(answer), 200)]))
		}
		return nil, apiErr
	}
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
