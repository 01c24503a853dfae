package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

var getOpts = metav1.GetOptions{}

type result struct {
	name    string
	ok      bool
	skipped bool // could not run; detail says why
	detail  string
}

// options are the command line's choices (main's flags say what each is).
type options struct {
	maxRolloutGap time.Duration
	only          map[string]bool // nil: all checks
}

type suite struct {
	*localnode.Node
	options
	watch   *localnode.Watch
	results []result
	podName string // the current pod of the DaemonSet
}

func (r result) status() string {
	switch {
	case r.skipped:
		return "SKIPPED"
	case !r.ok:
		return "FAIL"
	}
	return "PASS"
}

// add records a line of the report, and prints it at once.
func (s *suite) add(r result) bool {
	s.results = append(s.results, r)
	fmt.Printf("e2e-node: %s %s: %s\n", r.status(), r.name, r.detail)
	return r.ok
}

func (s *suite) report(name string, ok bool, format string, args ...any) bool {
	return s.add(result{name: name, ok: ok, detail: fmt.Sprintf(format, args...)})
}

// problems are what a check found wrong; none is a pass.
type problems []string

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

func (p *problems) want(ok bool, format string, args ...any) {
	if !ok {
		p.add(format, args...)
	}
}

func (p *problems) addErr(err error) {
	if err != nil {
		p.add("%v", err)
	}
}

func (p problems) String() string { return fmt.Sprintf("problems: %d %v", len(p), []string(p)) }

func (s *suite) failAll(names []string, format string, args ...any) bool {
	for _, name := range names {
		s.report(name, false, format, args...)
	}
	return false
}

func (s *suite) skipAll(names []string, reason string) bool {
	for _, name := range names {
		s.skip(name, reason)
	}
	return false
}

func (s *suite) skip(name, reason string) bool {
	return s.add(result{name: name, skipped: true, detail: reason})
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

var plainHTTP = &http.Client{Timeout: 2 * time.Second}

// get returns the status code and the first line of the body, or 0.
func get(url string) (int, string) {
	resp, err := plainHTTP.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return resp.StatusCode, line
}

func (s *suite) waitPod(ctx context.Context, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := localnode.WaitFor(ctx, what, timeout, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, name, getOpts)
		if err != nil {
			return false, err
		}
		pod = p
		return cond(p), nil
	})
	return pod, err
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func (s *suite) regSocket() string {
	return s.Path("kubelet", "plugins_registry", localnode.DriverName+"-reg.sock")
}

// probeCounts reads kubelet's prober_probe_total for a container:
// counts[pod]["Liveness/successful"] and so on. kubelet drops a pod's
// counts once the pod is gone.
func probeCounts(container string) (map[string]map[string]float64, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // kubelet's self-signed serving certificate
	}}
	resp, err := client.Get(fmt.Sprintf("https://%s:10250/metrics/probes", localnode.NodeIP))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("kubelet /metrics/probes: %w", err)
	}
	counts := map[string]map[string]float64{}
	for _, m := range families["prober_probe_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] != localnode.Namespace || labels["container"] != container {
			continue
		}
		pod := labels["pod"]
		if counts[pod] == nil {
			counts[pod] = map[string]float64{}
		}
		counts[pod][labels["probe_type"]+"/"+labels["result"]] += m.GetCounter().GetValue()
	}
	return counts, nil
}

func waitProbes(ctx context.Context, what, container, pod string, cond func(map[string]float64) bool) (map[string]float64, error) {
	var counts map[string]float64
	err := localnode.WaitFor(ctx, what, 2*time.Minute, time.Second, nil, func(context.Context) (bool, error) {
		all, err := probeCounts(container)
		counts = all[pod]
		return err == nil && cond(counts), err
	})
	return counts, err
}

func describeProbes(counts map[string]float64) string {
	return fmt.Sprintf("startup %v ok / %v failed, liveness %v ok / %v failed, readiness %v ok / %v failed",
		counts["Startup/successful"], counts["Startup/failed"], counts["Liveness/successful"], counts["Liveness/failed"],
		counts["Readiness/successful"], counts["Readiness/failed"])
}

// registrarState is the part of this registrar's /status the checks read.
type registrarState struct {
	State        string            `json:"state"`
	Reason       string            `json:"reason"`
	Publications map[string]uint64 `json:"socketPublications"`
	KubeletCalls struct {
		GetInfo        uint64 `json:"getInfo"`
		NotifyRejected uint64 `json:"notifyRejected"`
	} `json:"kubeletCalls"`
	Attempts     uint64     `json:"attempts"`
	FailingSince *time.Time `json:"failingSince"`
}

func registrarStatus(port int32) (*registrarState, error) {
	resp, err := plainHTTP.Get(fmt.Sprintf("http://127.0.0.1:%d/status", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	status := &registrarState{}
	if err := json.NewDecoder(resp.Body).Decode(status); err != nil {
		return nil, err
	}
	return status, nil
}

// statusOf reads this registrar's /status, and says what it says.
func statusOf(port int32) (*registrarState, string) {
	status, err := registrarStatus(port)
	if err != nil {
		return nil, "/status: " + err.Error()
	}
	return status, status.String()
}

func (st *registrarState) String() string {
	state := fmt.Sprintf("%q", st.State)
	if st.Reason != st.State {
		state += fmt.Sprintf(" (%s)", st.Reason)
	}
	return fmt.Sprintf("/status state %s, socket publications %v", state, st.Publications)
}

func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func metricLine(url, prefix string) string {
	resp, err := plainHTTP.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		if strings.HasPrefix(scanner.Text(), prefix) {
			return scanner.Text()
		}
	}
	return prefix + " missing"
}

func (s *suite) timingSince(what string, began, t time.Time) {
	if !t.IsZero() {
		s.Timing(what, t.Sub(began))
	}
}

func since(began, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return "+" + ms(t.Sub(began))
}

// restarted lists the containers of pod that restarted, or changed since
// pod was read.
func (s *suite) restarted(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	now, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, pod.Name, getOpts)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range now.Status.ContainerStatuses {
		was := containerStatus(pod, st.Name)
		if st.RestartCount > 0 || was == nil || was.ContainerID != st.ContainerID {
			out = append(out, fmt.Sprintf("%s: restartCount %d", st.Name, st.RestartCount))
		}
	}
	return out, nil
}

func (s *suite) containerLog(pod *corev1.Pod, container string) string {
	return readLogs(s.Path("pod-logs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container))
}

func readLogs(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

// lastEvent returns the pod's latest event with reason and prefix, with
// its count.
func (s *suite) lastEvent(ctx context.Context, pod, reason, prefix string) string {
	events, err := s.Client.CoreV1().Events(localnode.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		return err.Error()
	}
	found := "none"
	for _, e := range events.Items {
		if strings.HasPrefix(e.Message, prefix) {
			found = fmt.Sprintf("%s (%d times)", e.Message, e.Count)
		}
	}
	return found
}

// savePodLogs keeps the DaemonSet's pods' logs, which kubelet removes
// with the pods.
func (s *suite) savePodLogs(check, dsName string) {
	dirs, _ := filepath.Glob(s.Path("pod-logs", localnode.Namespace+"_"+dsName+"-*"))
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
		for _, file := range files {
			rel, _ := filepath.Rel(s.Path("pod-logs"), file)
			dest := filepath.Join(s.Logs, "pod-logs-"+check, rel)
			data, err := os.ReadFile(file)
			if err == nil && os.MkdirAll(filepath.Dir(dest), 0o755) == nil {
				err = os.WriteFile(dest, data, 0o644)
			}
			if err != nil {
				fmt.Printf("e2e-node: check %s: cannot keep %s: %v\n", check, file, err)
			}
		}
	}
}

// kubeletRetries reports whether kubelet tries a rejected registration
// again by itself, on the same socket (kubelet 1.36 and later,
// kubernetes/kubernetes#133335); older ones try again only on a socket
// created again, which the registrar then publishes (docs/compatibility.md).
func (s *suite) kubeletRetries() bool {
	return s.KubeletVersion.AtLeast(version.MajorMinor(1, 36))
}

func dialable(path string) bool {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
