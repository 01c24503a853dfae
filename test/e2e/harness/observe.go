package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Get GETs path on the registrar's --http-endpoint and returns the HTTP
// status and the body.
func (r *Registrar) Get(path string) (int, string, error) {
	if r.Config.HTTPEndpoint == "" {
		return 0, "", fmt.Errorf("%s has no --http-endpoint", r.Name)
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + r.Config.HTTPEndpoint + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("reading %s: %w", path, err)
	}
	return resp.StatusCode, string(body), nil
}

// Readyz asks /readyz and returns the status and the reason, trimmed.
func (r *Registrar) Readyz() (int, string, error) {
	code, body, err := r.Get("/readyz")
	return code, strings.TrimSpace(body), err
}

// WaitForReadyz polls /readyz until it answers want with a body containing
// substr, and returns that body.
func (r *Registrar) WaitForReadyz(timeout time.Duration, want int, substr string) (string, error) {
	var last string
	err := Eventually(timeout, 50*time.Millisecond, fmt.Sprintf("%s /readyz to answer %d %q", r.Name, want, substr), func() (bool, error) {
		code, body, err := r.Readyz()
		if err != nil {
			return false, err
		}
		last = body
		if code != want || !strings.Contains(body, substr) {
			return false, fmt.Errorf("last answer %d %q", code, body)
		}
		return true, nil
	})
	return last, err
}

// Status is the part of the registrar's /status document the tests read.
type Status struct {
	Version         string `json:"version"`
	DriverName      string `json:"driverName"`
	DriverReachable bool   `json:"driverReachable"`
	Endpoint        string `json:"endpoint"`
	SocketPath      string `json:"socketPath"`
	State           string `json:"state"`
	Ready           bool   `json:"ready"`
	Reason          string `json:"reason"`
	LastVerdict     *struct {
		Registered bool   `json:"registered"`
		Reason     string `json:"reason"`
	} `json:"lastKubeletVerdict"`
	RegistrationFailures uint64            `json:"registrationFailures"`
	Publications         map[string]uint64 `json:"socketPublications"`
	KubeletCalls         struct {
		GetInfo          uint64 `json:"getInfo"`
		NotifyRegistered uint64 `json:"notifyRegistered"`
		NotifyRejected   uint64 `json:"notifyRejected"`
	} `json:"kubeletCalls"`
	// Raw is the document as served.
	Raw string `json:"-"`
}

// Status reads /status.
func (r *Registrar) Status() (Status, error) {
	code, body, err := r.Get("/status")
	if err != nil {
		return Status{}, err
	}
	if code != http.StatusOK {
		return Status{}, fmt.Errorf("/status answered %d: %s", code, body)
	}
	st := Status{Raw: body}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return Status{}, fmt.Errorf("/status is not the expected JSON: %w\n%s", err, body)
	}
	return st, nil
}

// Metrics are the metric families of one scrape, by name.
type Metrics map[string]*dto.MetricFamily

// Metrics scrapes /metrics, parsing it as Prometheus' text format.
func (r *Registrar) Metrics() (Metrics, error) {
	code, body, err := r.Get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %d: %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("/metrics is not in Prometheus' text format: %w", err)
	}
	return families, nil
}

// Value is the value of the gauge or counter called name whose labels
// include the given name/value pairs; exactly one sample must match.
func (m Metrics) Value(name string, labels ...string) (float64, error) {
	family, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("no metric %s", name)
	}
	var values []float64
	for _, metric := range family.GetMetric() {
		if !hasLabels(metric, labels) {
			continue
		}
		switch {
		case metric.Gauge != nil:
			values = append(values, metric.Gauge.GetValue())
		case metric.Counter != nil:
			values = append(values, metric.Counter.GetValue())
		case metric.Untyped != nil:
			values = append(values, metric.Untyped.GetValue())
		default:
			return 0, fmt.Errorf("%s is a %v, not a gauge or a counter", name, family.GetType())
		}
	}
	if len(values) != 1 {
		return 0, fmt.Errorf("%d samples of %s match labels %v, want 1", len(values), name, labels)
	}
	return values[0], nil
}

func hasLabels(metric *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		if !slices.ContainsFunc(metric.GetLabel(), func(l *dto.LabelPair) bool {
			return l.GetName() == kv[i] && l.GetValue() == kv[i+1]
		}) {
			return false
		}
	}
	return true
}

// Lines renders the samples of the named families in the text format, for
// logs and the demo.
func (m Metrics) Lines(names ...string) []string {
	var lines []string
	for _, name := range names {
		family, ok := m[name]
		if !ok {
			continue
		}
		var b strings.Builder
		// MetricFamilyToText writes the HELP and TYPE lines too.
		if _, err := expfmt.MetricFamilyToText(&b, family); err != nil {
			lines = append(lines, fmt.Sprintf("# %s: %v", name, err))
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			if !strings.HasPrefix(line, "#") {
				lines = append(lines, line)
			}
		}
	}
	return lines
}

// Diagnosis is the outcome of a run of the registrar with --diagnose.
type Diagnosis struct {
	ExitCode int
	// Stdout is the checklist; Stderr should be empty.
	Stdout, Stderr string
}

// Checks are the checklist's lines, the summary line left out.
func (d Diagnosis) Checks() []string {
	var checks []string
	for _, line := range strings.Split(strings.TrimSpace(d.Stdout), "\n") {
		if strings.HasPrefix(line, "[") {
			checks = append(checks, line)
		}
	}
	return checks
}

// Diagnose runs bin (the registrar) with --diagnose and args, as an
// operator would with kubectl exec, and waits up to timeout for it.
func Diagnose(bin string, args []string, timeout time.Duration) (Diagnosis, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--diagnose"}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	d := Diagnosis{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return d, fmt.Errorf("%s --diagnose did not finish within %v", bin, timeout)
	case errors.As(err, &exit):
		d.ExitCode = exit.ExitCode()
	case err != nil:
		return d, fmt.Errorf("running %s --diagnose: %w", bin, err)
	}
	return d, nil
}
