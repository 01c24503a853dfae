//go:build linux

package guest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A node's kubelet directories, as the registrar's flags name them (the
// registrar here runs without a mount namespace: host paths and container
// paths are the same).
const (
	kubeletRoot  = "/var/lib/kubelet"
	registryDir  = kubeletRoot + "/plugins_registry"
	driverName   = "selinux.csi.example.com"
	driverDir    = kubeletRoot + "/plugins/" + driverName
	driverSocket = driverDir + "/csi.sock"
	regSocket    = registryDir + "/" + driverName + "-reg.sock"
)

// How long a scenario waits for its outcome: kubelet's reconcile loop runs
// once a second, the registrar calls kubelet silent after 10 s, and the VM
// may run without KVM.
const outcomeTimeout = 90 * time.Second

// outcome is what a scenario waits for before it looks at the results.
type outcome int

const (
	// kubelet called RegisterPlugin for the driver without an error, and
	// the registrar's /status says registered.
	registered outcome = iota
	// The registrar's /status says kubeletSilent: kubelet never called
	// GetInfo on its socket.
	kubeletSilent
	// The registrar exited.
	registrarExited
)

func (o outcome) String() string {
	return [...]string{"registered", "kubeletSilent", "registrarExited"}[o]
}

// scenario is one arrangement of labels and domains, and what the kernel
// lets happen there.
type scenario struct {
	name string
	// registryType labels plugins_registry; kubelet's other directories
	// are container_file_t.
	registryType string
	// The domains the registrar (and its --diagnose) and the driver run in;
	// kubelet runs in kubelet_t.
	registrar, driver string
	enforcing         bool
	// until ends the observation; the scenario fails if it does not come.
	until outcome
	// check asserts what the kernel allowed and what the registrar says.
	check func(t *testing.T, o *outputs)
}

// outputs is everything a scenario observed, for its check.
type outputs struct {
	// Labels are the contexts of kubelet's directories and of the
	// sockets, read back from the kernel after the outcome ("" when the
	// file does not exist).
	Labels map[string]string
	// KubeletEvents are fakekubelet's reports of kubelet's handler calls;
	// Kubelet is its whole output (reports and klog).
	KubeletEvents []KubeletEvent
	Kubelet       string
	// Registrar is the registrar's log; RegistrarExited says whether it
	// had exited when the outputs were taken, RegistrarExit how.
	Registrar       string
	RegistrarExited bool
	RegistrarExit   error
	// Status is the body of GET /status ("" when it could not be read,
	// StatusErr says why), StatusJSON the same decoded.
	Status     string
	StatusJSON map[string]any
	StatusErr  error
	// Diagnose is the output of registrar --diagnose run with the same
	// flags in the registrar's domain, DiagnoseExit its exit code.
	Diagnose     string
	DiagnoseExit int
	// AVCs are the kernel's AVC messages logged during the scenario.
	AVCs []string
}

// avcs returns the AVC messages that contain every one of parts.
func (o *outputs) avcs(parts ...string) []string {
	var out []string
next:
	for _, l := range o.AVCs {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

func (o *outputs) registeredByKubelet() bool {
	for _, e := range o.KubeletEvents {
		if e.Kind == "register" && e.Driver == driverName && e.Error == "" {
			return true
		}
	}
	return false
}

func (o *outputs) calledByKubelet() []KubeletEvent {
	var out []KubeletEvent
	for _, e := range o.KubeletEvents {
		if e.Driver == driverName {
			out = append(out, e)
		}
	}
	return out
}

// containerWritesVarLib is the AVC denial of a container writing to a
// var_lib_t directory.
var containerWritesVarLib = []string{"denied", "scontext=" + Context("container_t"), "tcontext=" + FileContext("var_lib_t"), "tclass=dir"}

var scenarios = []scenario{
	{
		name:         "A-privileged",
		registryType: "container_file_t", registrar: "spc_t", driver: "spc_t", enforcing: true,
		until: registered,
		check: func(t *testing.T, o *outputs) {
			wantRegistered(t, o)
			if d := o.avcs("denied"); len(d) != 0 {
				t.Errorf("the kernel denied something to a privileged registrar that kubelet registered:\n%s", strings.Join(d, "\n"))
			}
		},
	},
	{
		name:         "B-confined",
		registryType: "container_file_t", registrar: "container_t", driver: "container_t", enforcing: true,
		until: registered,
		check: func(t *testing.T, o *outputs) {
			wantRegistered(t, o)
			// Anything denied would be a hole in the policy or a registrar
			// that needs more than a confined container may do.
			if d := o.avcs("denied"); len(d) != 0 {
				t.Errorf("the kernel denied something to a confined registrar that kubelet registered:\n%s", strings.Join(d, "\n"))
			}
		},
	},
	{
		name:         "C-kubelet-denied-connectto",
		registryType: "container_file_t", registrar: "nokubelet_t", driver: "container_t", enforcing: true,
		until: kubeletSilent,
		check: func(t *testing.T, o *outputs) {
			wantKubeletShutOut(t, o, "it may not connect to the registrar",
				kubeletConnectto("nokubelet_t", "permissive=0"), "container_file_t")
			wantSaid(t, "the registrar's log", o.Registrar, "kubelet has not called GetInfo")
		},
	},
	{
		name:         "D-registry-mislabelled",
		registryType: "var_lib_t", registrar: "container_t", driver: "container_t", enforcing: true,
		until: registrarExited,
		check: func(t *testing.T, o *outputs) {
			wantNoKubeletCalls(t, o, "the registrar could not publish its socket")
			wantAVC(t, o, containerWritesVarLib, "permissive=0")
			if o.Labels[regSocket] != "" {
				t.Errorf("%s exists (%s): the kernel should have denied its creation", regSocket, o.Labels[regSocket])
			}
			if o.RegistrarExit == nil {
				t.Errorf("the registrar exited with status 0 though it could not publish its socket")
			}
			wantSaid(t, "the registrar's log", o.Registrar, "permission denied")
			wantSaid(t, "--diagnose", o.Diagnose, "not writable (permission denied)")
		},
	},
	{
		name:         "E-permissive",
		registryType: "container_file_t", registrar: "nokubelet_t", driver: "container_t", enforcing: false,
		until: registered,
		check: func(t *testing.T, o *outputs) {
			wantRegistered(t, o)
			wantAVC(t, o, kubeletConnectto("nokubelet_t", "permissive=1"))
		},
	},
}

// kubeletConnectto is the AVC denial of kubelet dialling a socket of domain,
// and more.
func kubeletConnectto(domain string, more ...string) []string {
	return append([]string{"denied", "{ connectto }", "scontext=" + Context("kubelet_t"), "tcontext=" + Context(domain), "tclass=unix_stream_socket"}, more...)
}

// wantSaid wants text, what the registrar said somewhere, to contain every
// one of parts.
func wantSaid(t *testing.T, where, text string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(text, p) {
			t.Errorf("%s does not say %q:\n%s", where, p, text)
		}
	}
}

func wantRegistered(t *testing.T, o *outputs) {
	t.Helper()
	if !o.registeredByKubelet() {
		t.Errorf("kubelet did not register %s; its calls: %+v", driverName, o.calledByKubelet())
	}
	wantStatus(t, o, "state", "registered")
}

func wantStatus(t *testing.T, o *outputs, key string, want any) {
	t.Helper()
	if o.StatusErr != nil {
		t.Errorf("/status: %v", o.StatusErr)
		return
	}
	if got := o.StatusJSON[key]; got != want {
		t.Errorf("/status %s = %v, want %v", key, got, want)
	}
}

// wantKubeletShutOut wants a registrar that published its socket (labelled
// socketType) and that kubelet never reached, because the kernel denied it
// (the AVC message with every one of avc), and the registrar's /status
// saying kubeletSilent.
func wantKubeletShutOut(t *testing.T, o *outputs, because string, avc []string, socketType string) {
	t.Helper()
	wantNoKubeletCalls(t, o, because)
	wantAVC(t, o, avc)
	wantStatus(t, o, "kubeletSilent", true)
	wantLabel(t, o, regSocket, FileContext(socketType))
}

func wantNoKubeletCalls(t *testing.T, o *outputs, because string) {
	t.Helper()
	if e := o.calledByKubelet(); len(e) != 0 {
		t.Errorf("kubelet called its handler for the driver though %s: %+v", because, e)
	}
}

// wantAVC wants an AVC message with every one of parts and more.
func wantAVC(t *testing.T, o *outputs, parts []string, more ...string) {
	t.Helper()
	parts = append(append([]string(nil), parts...), more...)
	if len(o.avcs(parts...)) == 0 {
		t.Errorf("no AVC message with %q in the kernel log; its AVC messages:\n%s", parts, strings.Join(o.AVCs, "\n"))
	}
}

func wantLabel(t *testing.T, o *outputs, path, want string) {
	t.Helper()
	if got := o.Labels[path]; got != want {
		t.Errorf("%s is labelled %q, want %s", path, got, want)
	}
}

func TestScenarios(t *testing.T) {
	if !inVM() {
		t.Skip("the scenarios run as the /init of make selinux-test's VM (PID 1), not here")
	}
	for i, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			o := s.run(t, 19000+i)
			s.log(t, o)
			s.check(t, o)
		})
	}
}

// run sets the scenario up, waits for its outcome and collects the outputs.
func (s scenario) run(t *testing.T, port int) *outputs {
	if err := SetEnforce(s.enforcing); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := SetEnforce(true); err != nil {
			t.Error(err)
		}
	})
	if err := os.MkdirAll(kubeletRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", kubeletRoot, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", kubeletRoot, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(kubeletRoot, unix.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	labels := []struct{ path, typ string }{
		{kubeletRoot, "container_file_t"},
		{kubeletRoot + "/plugins", "container_file_t"},
		{driverDir, "container_file_t"},
		{registryDir, s.registryType},
	}
	for _, l := range labels {
		if err := os.MkdirAll(l.path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := SetLabel(l.path, FileContext(l.typ)); err != nil {
			t.Fatal(err)
		}
	}
	mark, err := kmsg.Sync(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	driver := startProc(t, "driver", s.driver, mockdriverBin, "--endpoint="+driverSocket, "--name="+driverName)
	kubelet := startKubelet(t)
	httpEndpoint := fmt.Sprintf("127.0.0.1:%d", port)
	flags := []string{
		"--csi-address=" + driverSocket,
		"--kubelet-registration-path=" + driverSocket,
		"--plugin-registration-path=" + registryDir,
	}
	registrar := startProc(t, "registrar", s.registrar, registrarBin, append(flags, "--http-endpoint="+httpEndpoint, "--v=4")...)
	statusURL := "http://" + httpEndpoint + "/status"

	var reached bool
	switch s.until {
	case registered:
		reached = waitUntil(outcomeTimeout, kubelet.changed, registrar.Done(), func() bool {
			st, _, err := getStatus(statusURL)
			return kubelet.registered() && err == nil && st["state"] == "registered"
		})
	case kubeletSilent:
		// A kubelet that calls the handler ends the wait too: check
		// then says that kubelet reached the registrar.
		reached = waitUntil(outcomeTimeout, kubelet.changed, registrar.Done(), func() bool {
			if kubelet.called() {
				return true
			}
			st, _, err := getStatus(statusURL)
			return err == nil && st["kubeletSilent"] == true
		})
	case registrarExited:
		select {
		case <-registrar.Done():
			reached = true
		case <-time.After(outcomeTimeout):
		}
	}

	o := &outputs{Labels: map[string]string{}}
	o.StatusJSON, o.Status, o.StatusErr = getStatus(statusURL)
	o.Diagnose, o.DiagnoseExit, err = Run(s.registrar, 30*time.Second, registrarBin, append([]string{"--diagnose"}, flags...)...)
	if err != nil {
		t.Errorf("registrar --diagnose: %v", err)
	}
	for _, p := range []string{kubeletRoot, registryDir, driverDir, driverSocket, regSocket} {
		o.Labels[p], _ = Label(p)
	}
	select {
	case <-registrar.Done():
		o.RegistrarExited, o.RegistrarExit = true, registrar.ExitErr()
	default:
	}
	registrar.Stop(5 * time.Second)
	kubelet.Stop(5 * time.Second)
	driver.Stop(5 * time.Second)
	o.Registrar = registrar.Output()
	o.Kubelet = kubelet.Output()
	o.KubeletEvents = kubelet.events()
	if err := kubelet.lineErr(); err != nil {
		t.Error(err)
	}
	// Every AVC message of the scenario, however late the reader is.
	if _, err := kmsg.Sync(10 * time.Second); err != nil {
		t.Error(err)
	}
	o.AVCs, _ = kmsg.Since(mark, "avc:")
	if !reached {
		s.log(t, o)
		t.Fatalf("%s: no %s within %s (registrar exited: %v)", s.name, s.until, outcomeTimeout, o.RegistrarExited)
	}
	return o
}

// log writes every output of the scenario into the test's log, each behind
// a marker line.
func (s scenario) log(t *testing.T, o *outputs) {
	section := func(what, text string) {
		t.Logf("===== %s: %s =====\n%s", s.name, what, strings.TrimRight(text, "\n"))
	}
	section("setting", fmt.Sprintf("registry %s, registrar %s, driver %s, kubelet kubelet_t, enforcing %v, waited for %s",
		s.registryType, s.registrar, s.driver, s.enforcing, s.until))
	var labels []string
	for _, p := range []string{kubeletRoot, registryDir, driverDir, driverSocket, regSocket} {
		labels = append(labels, fmt.Sprintf("%s %s", p, o.Labels[p]))
	}
	section("labels", strings.Join(labels, "\n"))
	if o.StatusErr != nil {
		section("/status", "error: "+o.StatusErr.Error())
	} else {
		section("/status", o.Status)
	}
	section(fmt.Sprintf("registrar --diagnose (exit %d)", o.DiagnoseExit), o.Diagnose)
	section("AVC messages", strings.Join(o.AVCs, "\n"))
	section(fmt.Sprintf("registrar log (exited %v: %v)", o.RegistrarExited, o.RegistrarExit), o.Registrar)
	section("kubelet output", o.Kubelet)
}

func startProc(t *testing.T, name, domain, path string, args ...string) *Proc {
	t.Helper()
	p, err := Start(name, domain, path, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

// kubeletProc is fakekubelet in kubelet_t, with its reports.
type kubeletProc struct {
	*Proc
	mu      sync.Mutex
	evs     []KubeletEvent
	wake    chan struct{} // closed and replaced at each report
	badLine error
}

func (k *kubeletProc) changed() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.wake
}

func (k *kubeletProc) events() []KubeletEvent {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]KubeletEvent(nil), k.evs...)
}

func (k *kubeletProc) lineErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.badLine
}

func (k *kubeletProc) called() bool {
	o := outputs{KubeletEvents: k.events()}
	return len(o.calledByKubelet()) > 0
}

func (k *kubeletProc) registered() bool {
	o := outputs{KubeletEvents: k.events()}
	return o.registeredByKubelet()
}

func startKubelet(t *testing.T) *kubeletProc {
	t.Helper()
	k := &kubeletProc{wake: make(chan struct{})}
	ready := make(chan struct{})
	var once sync.Once
	p, err := StartLines("kubelet", "kubelet_t", func(line string) {
		e, err := ParseKubeletEvent(line)
		k.mu.Lock()
		defer k.mu.Unlock()
		if err != nil {
			k.badLine = err
			return
		}
		if e.Kind == "ready" {
			once.Do(func() { close(ready) })
		}
		k.evs = append(k.evs, e)
		close(k.wake)
		k.wake = make(chan struct{})
	}, kubeletBin, "--registry-dir="+registryDir)
	if err != nil {
		t.Fatal(err)
	}
	k.Proc = p
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	select {
	case <-ready:
	case <-p.Done():
		t.Fatalf("kubelet exited before it was ready (%v):\n%s", p.ExitErr(), p.Output())
	case <-time.After(outcomeTimeout):
		t.Fatalf("kubelet not ready within %s:\n%s", outcomeTimeout, p.Output())
	}
	return k
}

// waitUntil checks cond at each wake-up of changed (nil: none) and every
// 200 ms (what it polls has no event to wait on), until it holds, or
// timeout passes, or giveUp is closed (the process whose state it waits for
// exited).
func waitUntil(timeout time.Duration, changed func() <-chan struct{}, giveUp <-chan struct{}, cond func() bool) bool {
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var wake <-chan struct{}
		if changed != nil {
			wake = changed()
		}
		if cond() {
			return true
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-giveUp:
			return cond()
		case <-deadline:
			return false
		}
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

func getStatus(url string) (map[string]any, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, string(body), err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var st map[string]any
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, string(body), fmt.Errorf("GET %s: %w", url, err)
	}
	return st, string(body), nil
}
