package main

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Argument lists as they appear in published manifests for upstream.
func TestParseFlagsAcceptsUpstreamManifests(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, o *options)
	}{
		{"defaults", []string{"--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock"}, func(t *testing.T, o *options) {
			if o.csiAddress != "/run/csi/socket" || o.registration.Dir != "/registration" || o.timeout != time.Second ||
				o.httpEndpoint != "" || o.healthPort != 0 || o.mode != "" || o.enablePprof || o.automaxprocs ||
				o.terminationMessagePath != "/dev/termination-log" || o.driverHealthEndpoint != "" || o.probeTimeout != 3*time.Second {
				t.Errorf("defaults differ from upstream's: %+v", o)
			}
		}},
		{"kubeconfig outside a pod", []string{"--kubelet-registration-path=/k", "--confirm-csinode", "--node-name=n1", "--kubeconfig=/nonexistent/kubeconfig"}, func(t *testing.T, o *options) {
			if o.kubeconfig != "/nonexistent/kubeconfig" {
				t.Errorf("kubeconfig %q", o.kubeconfig)
			}
			if _, err := apiClient(o); err == nil || !strings.Contains(err.Error(), `--kubeconfig="/nonexistent/kubeconfig"`) || !strings.Contains(err.Error(), "give a readable kubeconfig") {
				t.Errorf("apiClient with an unreadable kubeconfig = %v, want the flag named and what to give", err)
			}
		}},
		{"hostpath driver", []string{"--v=5", "--csi-address=/csi/csi.sock", "--kubelet-registration-path=/var/lib/kubelet/plugins/csi-hostpath/csi.sock", "--http-endpoint=:9809"}, func(t *testing.T, o *options) {
			if o.csiAddress != "/csi/csi.sock" || o.httpAddress() != ":9809" {
				t.Errorf("got %+v", o)
			}
		}},
		{"single dash, space separated", []string{"-v", "2", "-csi-address", "unix:///csi/csi.sock", "-kubelet-registration-path", "/k/csi.sock", "-timeout", "3s"}, func(t *testing.T, o *options) {
			if o.csiAddress != "unix:///csi/csi.sock" || o.registration.Endpoint != "/k/csi.sock" || o.timeout != 3*time.Second {
				t.Errorf("got %+v", o)
			}
		}},
		{"deprecated flags of v1 and v2.0", []string{"--connection-timeout=15s", "--health-port=9809", "--kubelet-registration-path=/k"}, func(t *testing.T, o *options) {
			if o.httpAddress() != ":9809" || !o.wasSet("connection-timeout") {
				t.Errorf("got %+v", o)
			}
		}},
		{"exec probe", []string{"--kubelet-registration-path=/k", "--mode=kubelet-registration-probe"}, func(t *testing.T, o *options) {
			if o.mode != probeMode {
				t.Errorf("mode = %q", o.mode)
			}
		}},
		{"klog flags of v2.10 and older", []string{"--logtostderr", "--alsologtostderr=false", "--stderrthreshold=2", "--log_dir=/tmp", "--kubelet-registration-path=/k"}, func(t *testing.T, o *options) {
			for _, f := range []string{"logtostderr", "alsologtostderr", "stderrthreshold", "log_dir"} {
				if !o.wasSet(f) {
					t.Errorf("--%s not recorded as set", f)
				}
			}
		}},
		{"logging and profiling", []string{"--logging-format=json", "--log-json-split-stream", "--vmodule=run=4", "--enable-pprof", "--automaxprocs", "--kubelet-registration-path=/k"}, func(t *testing.T, o *options) {
			if !o.enablePprof || !o.automaxprocs {
				t.Errorf("got %+v", o)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags("registrar", tc.args, io.Discard)
			if err != nil {
				t.Fatalf("parseFlags(%q) = %v", tc.args, err)
			}
			if err := o.validate(); err != nil {
				t.Fatalf("validate() = %v", err)
			}
			tc.check(t, o)
		})
	}
}

func TestParseFlagsRejectsUnknownFlags(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags("registrar", []string{"--no-such-flag"}, &out); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
	if !strings.Contains(out.String(), "no-such-flag") {
		t.Errorf("the usage output does not name the flag: %q", out.String())
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{"registration path missing", nil, []string{"--kubelet-registration-path: the endpoint is required"}},
		{"both HTTP flags", []string{"--kubelet-registration-path=/k", "--http-endpoint=:8080", "--health-port=9809"}, []string{"--health-port=9809", "--http-endpoint", "mutually exclusive"}},
		{"unknown rejection policy", []string{"--kubelet-registration-path=/k", "--rejection-policy=never"}, []string{`--rejection-policy: rejection policy "never" is not supported`}},
		{"all at once", []string{"--rejection-policy=never", "--health-port=9809", "--http-endpoint=:8080", "--csi-address=tcp://h:1", "--unhealthy-after=-5s", "--driver-health-endpoint=bad::addr"}, []string{"--kubelet-registration-path", "--rejection-policy", "mutually exclusive", "--csi-address: ", "--unhealthy-after", "--driver-health-endpoint"}},
		{"HTTP endpoint not host:port", []string{"--kubelet-registration-path=/k", "--http-endpoint=notaport"}, []string{`--http-endpoint="notaport": not host:port`, ":8080"}},
		{"HTTP endpoint with a bad port", []string{"--kubelet-registration-path=/k", "--http-endpoint=:99999"}, []string{`--http-endpoint=":99999": port "99999" is not a number from 0`}},
		{"health port out of range", []string{"--kubelet-registration-path=/k", "--health-port=70000"}, []string{"--health-port=70000 is not a port"}},
		{"network CSI address", []string{"--kubelet-registration-path=/k", "--csi-address=tcp://127.0.0.1:10000"}, []string{"--csi-address: ", `scheme "tcp"`}},
		{"driver health endpoint without a port", []string{"--kubelet-registration-path=/k", "--driver-health-endpoint=9808"}, []string{`--driver-health-endpoint="9808": not host:port`, ":9808"}},
		{"driver health endpoint with a bad port", []string{"--kubelet-registration-path=/k", "--driver-health-endpoint=:http"}, []string{`port "http" is not a number`}},
		{"driver health endpoint on the HTTP endpoint's port", []string{"--kubelet-registration-path=/k", "--http-endpoint=:9809", "--driver-health-endpoint=127.0.0.1:9809"}, []string{"use the same port"}},
		{"driver health endpoint on the health port", []string{"--kubelet-registration-path=/k", "--health-port=9808", "--driver-health-endpoint=:9808"}, []string{"use the same port"}},
		{"negative unhealthy-after", []string{"--kubelet-registration-path=/k", "--unhealthy-after=-1s"}, []string{"--unhealthy-after=-1s is negative"}},
		{"zero probe timeout", []string{"--kubelet-registration-path=/k", "--driver-health-endpoint=:9808", "--probe-timeout=0"}, []string{"--probe-timeout=0s is not positive"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags("registrar", tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = o.validate()
			if err == nil {
				t.Fatal("validate() accepted the flags")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("validate() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

// Values that upstream accepts although they make no sense: accepted with a
// warning, and given a meaning with which the registrar can still register.
func TestAcceptsWithAWarning(t *testing.T) {
	cases := []struct {
		name        string
		args        []string
		warning     string // "" for none
		timeout     time.Duration
		httpAddress string
	}{
		{"upstream's defaults", nil, "", time.Second, ""},
		{"relative registration path", []string{"--kubelet-registration-path=plugins/d/csi.sock"}, `--kubelet-registration-path="plugins/d/csi.sock" is not an absolute path`, time.Second, ""},
		{"zero timeout", []string{"--timeout=0"}, "--timeout=0s is not positive: using the default, 1s", time.Second, ""},
		{"negative timeout", []string{"--timeout=-5s"}, "--timeout=-5s is not positive", time.Second, ""},
		{"negative health port", []string{"--health-port=-1"}, "--health-port=-1 is not a port: ignored, as 0 is", time.Second, ""},
		{"negative health port and an HTTP endpoint", []string{"--health-port=-1", "--http-endpoint=:8080"}, "--health-port=-1", time.Second, ":8080"},
		{"unknown mode", []string{"--mode=foo"}, `--mode="foo" is not a mode: registering the driver`, time.Second, ""},
		{"registration mode", []string{"--mode=registration"}, "--mode is deprecated", time.Second, ""},
		{"probe mode", []string{"--mode=" + probeMode}, "", time.Second, ""},
		{"connection timeout", []string{"--connection-timeout=5s"}, "--connection-timeout is deprecated and has no effect", time.Second, ""},
		{"health port", []string{"--health-port=9809"}, "--health-port is deprecated: use --http-endpoint=:9809", time.Second, ":9809"},
		{"arguments after one that is not a flag", []string{"--enable-pprof", "true", "--timeout=2s"}, `ignoring the arguments ["true" "--timeout=2s"]`, time.Second, ""},
		{"probe timeout without the driver health endpoint", []string{"--probe-timeout=5s"}, "--probe-timeout has no effect without --driver-health-endpoint", time.Second, ""},
		{"driver health endpoint beside the HTTP endpoint", []string{"--http-endpoint=:9809", "--driver-health-endpoint=:9808", "--probe-timeout=1s"}, "", time.Second, ":9809"},
		{"driver health endpoint on another address, same port", []string{"--http-endpoint=10.0.0.1:9808", "--driver-health-endpoint=127.0.0.1:9808"}, "", time.Second, "10.0.0.1:9808"},
		{"both on any free port", []string{"--http-endpoint=127.0.0.1:0", "--driver-health-endpoint=127.0.0.1:0"}, "", time.Second, "127.0.0.1:0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Absolute on this system: on Windows, /k is not.
			endpoint, err := filepath.Abs("k")
			if err != nil {
				t.Fatal(err)
			}
			o, err := parseFlags("registrar", append([]string{"--kubelet-registration-path=" + endpoint}, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.validate(); err != nil {
				t.Fatalf("validate() = %v", err)
			}
			warnings := strings.Join(o.warnings(), "\n")
			switch {
			case tc.warning == "" && warnings != "":
				t.Errorf("warnings() = %q, want none", warnings)
			case !strings.Contains(warnings, tc.warning):
				t.Errorf("warnings() = %q, want %q", warnings, tc.warning)
			}
			if got := o.operationTimeout(); got != tc.timeout {
				t.Errorf("operationTimeout() = %v, want %v", got, tc.timeout)
			}
			if got := o.httpAddress(); got != tc.httpAddress {
				t.Errorf("httpAddress() = %q, want %q", got, tc.httpAddress)
			}
		})
	}
}

// -h and --help: exit 0, the usage on stderr as Go's flag package writes it,
// starting with what the program is, with the current flags before the
// deprecated ones.
func TestHelp(t *testing.T) {
	deprecated := map[string]bool{
		"connection-timeout": true, "health-port": true, "mode": true,
		// klog's own.
		"logtostderr": true, "alsologtostderr": true, "log_dir": true, "log_file": true, "log_file_max_size": true,
		"stderrthreshold": true, "skip_headers": true, "skip_log_headers": true, "add_dir_header": true,
		"one_output": true, "log_backtrace_at": true,
	}
	for _, arg := range []string{"-h", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := run(context.Background(), []string{"registrar", arg}, &stdout, &stderr); code != exitOK {
				t.Errorf("exit code %d, want %d", code, exitOK)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout has %q, want the usage on stderr only", stdout.String())
			}
			lines := strings.Split(stderr.String(), "\n")
			if lines[0] != description {
				t.Errorf("first line %q, want %q", lines[0], description)
			}

			// Each flag is a line "  -name" or "  -name type".
			inDeprecated := false
			listed := map[string]bool{}
			for _, line := range lines {
				if strings.HasPrefix(line, "Deprecated flags") {
					inDeprecated = true
					continue
				}
				name, ok := strings.CutPrefix(line, "  -")
				if !ok {
					continue
				}
				name, _, _ = strings.Cut(name, " ")
				if listed[name] {
					t.Errorf("--%s listed twice", name)
				}
				listed[name] = true
				switch {
				case deprecated[name] && !inDeprecated:
					t.Errorf("deprecated --%s is listed among the current flags", name)
				case !deprecated[name] && inDeprecated:
					t.Errorf("current --%s is listed after the deprecated flags' heading", name)
				}
			}
			if !inDeprecated {
				t.Error("no heading for the deprecated flags")
			}
			o, err := parseFlags("registrar", nil, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			o.flags.VisitAll(func(f *flag.Flag) {
				if !listed[f.Name] {
					t.Errorf("--%s is not listed", f.Name)
				}
			})
			for name := range deprecated {
				if o.flags.Lookup(name) == nil {
					t.Errorf("--%s, expected among the deprecated flags, does not exist", name)
				}
			}
		})
	}
}

// --http-endpoint's help names every path the HTTP server serves.
func TestHTTPEndpointHelpNamesPaths(t *testing.T) {
	o, err := parseFlags("registrar", nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	usage := o.flags.Lookup("http-endpoint").Usage
	for _, path := range []string{"/healthz", "/readyz", "/status", "/metrics", "/debug/pprof/", "--enable-pprof"} {
		if !strings.Contains(usage, path) {
			t.Errorf("--http-endpoint's help does not name %s: %q", path, usage)
		}
	}
}

// As upstream, --version and the probe mode come after the logging flags are
// checked, and the probe mode needs --kubelet-registration-path; none of
// these sets up logging, so they run in this process.
func TestVersionAndProbeExitCodes(t *testing.T) {
	probe := "--mode=" + probeMode
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--version"}, exitOK, ""},
		{[]string{"--version", "--logging-format=xml"}, exitError, "Unsupported log format"},
		{[]string{"--version", "--log-flush-frequency=0s"}, exitError, "flushFrequency"},
		{[]string{probe, "--kubelet-registration-path=/k"}, exitOK, ""},
		{[]string{probe, "--kubelet-registration-path=/k", "--logging-format=xml"}, exitError, "Unsupported log format"},
		{[]string{probe}, exitError, probe + " needs --kubelet-registration-path"},
		{[]string{"--version", probe}, exitOK, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := run(context.Background(), append([]string{"registrar"}, tc.args...), &stdout, &stderr); code != tc.code {
				t.Errorf("exit code %d, want %d; stderr: %q", code, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.stderr) || (tc.stderr == "") != (stderr.Len() == 0) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.stderr)
			}
		})
	}
}
