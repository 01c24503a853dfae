package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/driverhealth"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/events"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// probeMode is upstream's --mode for exec liveness probes in old manifests.
const probeMode = "kubelet-registration-probe"

// defaultTimeout is --timeout's default, upstream's.
const defaultTimeout = time.Second

// defaultUnhealthyAfter: docs/probes-and-metrics.md says why.
const defaultUnhealthyAfter = 3 * time.Minute

const description = "csi-node-driver-registrar registers a CSI driver with kubelet through kubelet's plugin registry and keeps it registered: a drop-in replacement for the Kubernetes CSI node-driver-registrar sidecar."

// options are the command line flags, named and defaulted as upstream's.
type options struct {
	csiAddress             string
	timeout                time.Duration
	connectionTimeout      time.Duration
	httpEndpoint           string
	healthPort             int
	mode                   string
	enablePprof            bool
	automaxprocs           bool
	showVersion            bool
	terminationMessagePath string
	diagnose               bool
	driverHealthEndpoint   string
	probeTimeout           time.Duration
	nodeName               string
	kubeconfig             string
	events                 bool
	unhealthyAfter         time.Duration

	// registration is set by --kubelet-registration-path,
	// --plugin-registration-path, --rejection-policy and --confirm-csinode.
	registration registration.Config
	// nodeGate is set by --remove-node-taint, --node-condition and
	// --node-condition-type.
	nodeGate nodegate.Config

	logging *loggingOptions
	flags   *flag.FlagSet
}

// parseFlags parses args (without the program name) the way upstream
// does, with Go's flag package: -name and --name both work.
func parseFlags(program string, args []string, output io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.csiAddress, "csi-address", "/run/csi/socket", "Path of the CSI driver's socket in this container (a bare path, unix:///path or unix:path).")
	fs.StringVar(&o.registration.Endpoint, "kubelet-registration-path", "", "Path of the CSI driver's socket on the host, as kubelet must dial it. Required.")
	fs.StringVar(&o.registration.Dir, "plugin-registration-path", "/registration", "Directory where kubelet's plugin registry (the host's /var/lib/kubelet/plugins_registry) is mounted.")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "Timeout of each GetPluginInfo call to the CSI driver. Zero or less means the default.")
	fs.DurationVar(&o.connectionTimeout, "connection-timeout", 0, "Deprecated: has no effect. The registrar waits for the CSI driver as long as it takes.")
	fs.StringVar(&o.httpEndpoint, "http-endpoint", "", "TCP address (host:port) of the HTTP server for /healthz (liveness), /readyz (readiness), /status (JSON), /metrics (Prometheus) and, with --enable-pprof, /debug/pprof/. Empty: no HTTP server.")
	fs.IntVar(&o.healthPort, "health-port", 0, "Deprecated: use --http-endpoint=:PORT. Port of the HTTP server; 0 or less disables it.")
	fs.StringVar(&o.mode, "mode", "", "Deprecated. \""+probeMode+"\" exits 0 at once (1 without --kubelet-registration-path), for exec liveness probes in old manifests; use an HTTP probe on /healthz instead. Any other value registers the driver.")
	fs.BoolVar(&o.enablePprof, "enable-pprof", false, "Serve the Go profiler under /debug/pprof/ on the HTTP server.")
	fs.BoolVar(&o.automaxprocs, "automaxprocs", false, "Set GOMAXPROCS from the container's CPU quota.")
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&o.terminationMessagePath, "termination-message-path", "/dev/termination-log", "File where the reason of a fatal error or of kubelet's rejection is written, for kubectl describe pod. It must exist: kubelet creates it.")
	fs.StringVar((*string)(&o.registration.OnRejection), "rejection-policy", string(registration.Retry), "What to do when kubelet rejects the driver: \"retry\" lets kubelet try again until it accepts it: kubelet 1.36 and later tries again by itself, and the registration socket is left alone; for older kubelets it is published again after a backoff (1s doubling up to 5m). \"exit\" exits 1, as upstream does.")
	fs.BoolVar(&o.diagnose, "diagnose", false, "Check the node's set-up (registry directory, driver socket, the driver's GetPluginInfo and NodeGetInfo, registration socket), print a checklist and exit: 0 when nothing is wrong. Run it with kubectl exec; without other flags it uses those of the running registrar (PID 1).")
	fs.StringVar(&o.driverHealthEndpoint, "driver-health-endpoint", "", "TCP address (host:port, e.g. :9808) of a second HTTP server whose /healthz calls the CSI driver's Identity.Probe, as the livenessprobe sidecar's does: point the driver container's livenessProbe at it, and drop the livenessprobe container. Empty: not served.")
	fs.DurationVar(&o.probeTimeout, "probe-timeout", driverhealth.DefaultTimeout, "Timeout of each Identity.Probe call made for --driver-health-endpoint's /healthz (livenessprobe's --probe-timeout).")
	fs.StringVar(&o.nodeName, "node-name", "", "The node this registrar runs on, for --remove-node-taint, --node-condition and --confirm-csinode. Empty: the environment variable "+nodeNameEnv+", which the DaemonSet sets from the downward API (fieldRef spec.nodeName).")
	fs.Var((*taintKeys)(&o.nodeGate.TaintKeys), "remove-node-taint", "Key of a startup taint to remove from this node once kubelet has accepted the driver (it is never added); repeat the flag or give a comma-separated list. Needs get and patch on nodes (deploy/node-gate).")
	fs.BoolVar(&o.nodeGate.Condition, "node-condition", false, "Set the node condition <driver name>"+nodegate.ConditionSuffix+": True when kubelet accepts the driver, False when it rejects it or when the registrar stops and unregisters it. Needs patch on nodes/status (deploy/node-gate).")
	fs.StringVar(&o.nodeGate.ConditionType, "node-condition-type", "", "The type of --node-condition's condition, for a Node Readiness Controller rule that expects a type of its own, e.g. node.example.com/StorageReady: a qualified name, as Kubernetes validates condition types. Set the same type in deploy/node-gate's policy. Empty: <driver name>"+nodegate.ConditionSuffix+".")
	fs.BoolVar(&o.registration.ConfirmCSINode, "confirm-csinode", false, "Count the driver as registered (/readyz, /status, the state metric, --remove-node-taint and --node-condition) only once this node's CSINode lists it, and when CSINode loses it while kubelet has it registered (deleted, or removed by the garbage collector after the Node object was replaced), publish the registration socket again so that kubelet registers the driver again and restores it. Needs list and watch on csinodes and get on nodes (deploy/csinode).")
	fs.BoolVar(&o.events, "events", false, "Record Kubernetes Events on this registrar's Pod, where kubectl describe pod and kubectl get events show them: kubelet rejects the driver, kubelet stays silent, the registration has failed for --unhealthy-after, CSINode loses the driver, and the registration that ends each of these; repeats make one Event with a count. Needs the environment variables "+podNameEnv+", "+podNamespaceEnv+" and "+podUIDEnv+" from the downward API, and create and patch on events in the Pod's namespace (deploy/events).")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path of a kubeconfig file for the API server, for --remove-node-taint, --node-condition, --confirm-csinode and --events outside a pod. Empty: the pod's service account.")
	fs.DurationVar(&o.unhealthyAfter, "unhealthy-after", defaultUnhealthyAfter, "How long the registration may fail (kubelet rejects the driver, kubelet never calls, or the driver never answers) before /healthz fails, so that a liveness probe restarts the container and the failure shows in kubectl get pods as upstream's exit shows it. A registered driver never fails it. Keep it above 2m: after failures at a path kubelet waits up to 2m2s before it calls again. 0: /healthz never fails for this.")
	o.logging = addLoggingFlags(fs)
	o.flags = fs
	fs.Usage = o.usage

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, nil
}

// usage lists the deprecated flags apart; the flag package alone would sort
// them all together.
func (o *options) usage() {
	out := o.flags.Output()
	// Upstream's flags kept only for old manifests, and klog's, say so first.
	deprecated := func(f *flag.Flag) bool { return strings.HasPrefix(strings.ToLower(f.Usage), "deprecated") }
	fmt.Fprintf(out, "%s\n\nUsage:\n  %s --kubelet-registration-path=PATH [flags]\n  %[2]s --diagnose | --version\n\nFlags:\n", description, o.flags.Name())
	o.printFlags(func(f *flag.Flag) bool { return !deprecated(f) })
	fmt.Fprintln(out, "\nDeprecated flags, accepted so that manifests written for older versions keep working:")
	o.printFlags(deprecated)
}

func (o *options) printFlags(include func(*flag.Flag) bool) {
	selected := flag.NewFlagSet(o.flags.Name(), flag.ContinueOnError)
	selected.SetOutput(o.flags.Output())
	o.flags.VisitAll(func(f *flag.Flag) {
		if include(f) {
			selected.Var(f.Value, f.Name, f.Usage)
			// Var takes the current value as the default: a value parsed
			// before an error must not show as the default.
			selected.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	selected.PrintDefaults()
}

// validate reports every wrong value at once, before anything starts. Its
// errors exit 1, the flag package's 2, as upstream's (docs/flags.md).
func (o *options) validate() error {
	errs := []error{flagError(o.registration.Validate())}
	if _, err := driver.ParseAddress(o.csiAddress); err != nil {
		errs = append(errs, withFlag("--csi-address", err))
	}
	httpErr := listenAddressError("--http-endpoint", o.httpEndpoint, ":8080")
	driverHealthErr := listenAddressError("--driver-health-endpoint", o.driverHealthEndpoint, ":9808")
	nodeName, _ := o.node()
	_, podErr := o.pod()
	for _, rule := range []struct {
		broken bool
		err    error
	}{
		{o.httpEndpoint != "" && o.healthPort > 0, fmt.Errorf("--health-port=%d and --http-endpoint=%q are mutually exclusive: keep only --http-endpoint", o.healthPort, o.httpEndpoint)},
		{httpErr != nil, httpErr},
		{o.healthPort > 65535, fmt.Errorf("--health-port=%d is not a port: give one from 1 to 65535, or better --http-endpoint=:PORT", o.healthPort)},
		{driverHealthErr != nil, driverHealthErr},
		{o.driverHealthEndpoint != "" && driverHealthErr == nil && httpErr == nil && samePort(o.httpAddress(), o.driverHealthEndpoint), fmt.Errorf("--driver-health-endpoint=%q and the HTTP endpoint %q use the same port: give the driver's liveness probe its own port, e.g. :9808", o.driverHealthEndpoint, o.httpAddress())},
		{o.unhealthyAfter < 0, fmt.Errorf("--unhealthy-after=%v is negative: give a duration such as 3m, or 0 for a /healthz that never fails for a failing registration", o.unhealthyAfter)},
		{o.probeTimeout <= 0, fmt.Errorf("--probe-timeout=%v is not positive: every probe would fail at once; leave it out for the default, %v", o.probeTimeout, driverhealth.DefaultTimeout)},
		{o.nodeGate.ConditionType != "" && !o.nodeGate.Condition, fmt.Errorf("--node-condition-type=%s has no effect without --node-condition: add --node-condition, or drop --node-condition-type", o.nodeGate.ConditionType)},
		{o.registration.ConfirmCSINode && nodeName == "", errors.New("--confirm-csinode needs the node's name: " + nodeNameSources)},
		{o.gatesNode() && nodeName == "", errors.New("--remove-node-taint and --node-condition need the node's name: " + nodeNameSources)},
		{o.events && podErr != nil, withFlag("--events", podErr)},
	} {
		if rule.broken {
			errs = append(errs, rule.err)
		}
	}
	for _, key := range o.nodeGate.TaintKeys {
		errs = append(errs, withFlag("--remove-node-taint", nodegate.ValidateTaintKey(key)))
	}
	if o.nodeGate.ConditionType != "" {
		errs = append(errs, withFlag("--node-condition-type", nodegate.ValidateConditionType(o.nodeGate.ConditionType)))
	}
	return errors.Join(errs...)
}

// listenAddressError is nil when net.Listen can take address, or when it is
// empty: not listened on.
func listenAddressError(flag, address, example string) error {
	if address == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%s=%q: not host:port (%v): write it as %s or 0.0.0.0%[4]s", flag, address, err, example)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s=%q: port %q is not a number from 0 (any free port) to 65535", flag, address, port)
	}
	return nil
}

// nodeNameEnv is where --node-name's value comes from when it is not
// given: the name external-provisioner and other CSI sidecars read.
const nodeNameEnv = "NODE_NAME"

// nodeNameSources says where the node's name is given.
const nodeNameSources = "set the environment variable " + nodeNameEnv + " from the downward API (env: [{name: " + nodeNameEnv + ", valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]) or --node-name"

// gatesNode tells whether the registrar changes the Node object.
func (o *options) gatesNode() bool { return len(o.nodeGate.TaintKeys) > 0 || o.nodeGate.Condition }

// withFlagLogged names in ctx's logger the flag a part serves, so that its
// log lines say which flag to change.
func withFlagLogged(ctx context.Context, flag string) context.Context {
	return klog.NewContext(ctx, klog.FromContext(ctx).WithValues("flag", flag))
}

// node is the node's name, and the flag or variable it comes from.
func (o *options) node() (name, from string) {
	if o.nodeName != "" {
		return o.nodeName, "--node-name"
	}
	return os.Getenv(nodeNameEnv), nodeNameEnv
}

// The downward API's variables that name the registrar's own Pod for --events.
const (
	podNameEnv      = "POD_NAME"
	podNamespaceEnv = "POD_NAMESPACE"
	podUIDEnv       = "POD_UID"
)

// pod is the registrar's own Pod, for --events.
func (o *options) pod() (events.Pod, error) {
	pod := events.Pod{Name: os.Getenv(podNameEnv), Namespace: os.Getenv(podNamespaceEnv), UID: os.Getenv(podUIDEnv)}
	pod.Node, _ = o.node()
	var missing []string
	for env, field := range map[string]string{podNameEnv: "metadata.name", podNamespaceEnv: "metadata.namespace", podUIDEnv: "metadata.uid"} {
		if os.Getenv(env) == "" {
			missing = append(missing, fmt.Sprintf("{name: %s, valueFrom: {fieldRef: {fieldPath: %s}}}", env, field))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return pod, fmt.Errorf("the Events' Pod is not known: set the environment from the downward API (env: [%s]), as deploy/events does", strings.Join(missing, ", "))
	}
	return pod, nil
}

// taintKeys is --remove-node-taint: repeated, or comma-separated, or both.
type taintKeys []string

func (k *taintKeys) String() string { return strings.Join(*k, ",") }

func (k *taintKeys) Set(value string) error {
	for key := range strings.SplitSeq(value, ",") {
		if key = strings.TrimSpace(key); key != "" && !slices.Contains(*k, key) {
			*k = append(*k, key)
		}
	}
	return nil
}

// warnings are not errors, so that a manifest written for upstream keeps
// working.
func (o *options) warnings() []string {
	var warnings []string
	for _, w := range []struct {
		applies bool
		text    string
	}{
		// Go's flag package stops at the first argument that is not a
		// flag and upstream ignores the rest; so do we, but not silently.
		{o.flags.NArg() > 0, fmt.Sprintf("ignoring the arguments %q after the first one that is not a flag; write boolean flags as --name=value", o.flags.Args())},
		{o.registration.Endpoint != "" && !filepath.IsAbs(o.registration.Endpoint), fmt.Sprintf("--kubelet-registration-path=%q is not an absolute path: kubelet dials it as given, from its own working directory on the host; give the driver socket's absolute path on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock", o.registration.Endpoint)},
		{o.wasSet("connection-timeout"), "--connection-timeout is deprecated and has no effect: the registrar waits for the CSI driver as long as it takes"},
		{o.healthPort > 0, fmt.Sprintf("--health-port is deprecated: use --http-endpoint=%s", o.httpAddress())},
		{o.healthPort < 0, fmt.Sprintf("--health-port=%d is not a port: ignored, as 0 is (and as upstream does); use --http-endpoint=:PORT for an HTTP server", o.healthPort)},
		// Upstream gives every GetPluginInfo an expired deadline, fails it
		// at once and exits 1: it can never register.
		{o.timeout <= 0, fmt.Sprintf("--timeout=%v is not positive: using the default, %v, instead (upstream fails every GetPluginInfo at once with it)", o.timeout, defaultTimeout)},
		{o.driverHealthEndpoint == "" && o.wasSet("probe-timeout"), "--probe-timeout has no effect without --driver-health-endpoint"},
		{o.mode == "registration", "--mode is deprecated and has no effect"},
		{!slices.Contains([]string{"", probeMode, "registration"}, o.mode), fmt.Sprintf("--mode=%q is not a mode: registering the driver, as upstream does with any --mode other than %q; leave --mode out", o.mode, probeMode)},
	} {
		if w.applies {
			warnings = append(warnings, w.text)
		}
	}
	return warnings
}

func (o *options) operationTimeout() time.Duration {
	if o.timeout <= 0 {
		return defaultTimeout
	}
	return o.timeout
}

// httpAddress is where the HTTP server listens, "" for none.
func (o *options) httpAddress() string {
	if o.healthPort > 0 {
		return fmt.Sprintf(":%d", o.healthPort)
	}
	return o.httpEndpoint
}

// samePort tells whether two listen addresses would take the same port.
func samePort(a, b string) bool {
	hostA, portA, errA := net.SplitHostPort(a)
	hostB, portB, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || portA != portB || portA == "0" {
		return false
	}
	unspecified := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return unspecified(hostA) || unspecified(hostB) || hostA == hostB
}

func (o *options) wasSet(name string) (set bool) {
	o.flags.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// registrationFlags names the flag behind each registration.Config field.
var registrationFlags = map[string]string{
	"Endpoint":    "--kubelet-registration-path",
	"Dir":         "--plugin-registration-path",
	"OnRejection": "--rejection-policy",
}

// flagError names the flag of each registration.ConfigError in err.
func flagError(err error) error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var named []error
		for _, e := range joined.Unwrap() {
			named = append(named, flagError(e))
		}
		return errors.Join(named...)
	}
	if cfgErr, ok := errors.AsType[*registration.ConfigError](err); ok && registrationFlags[cfgErr.Field] != "" {
		return withFlag(registrationFlags[cfgErr.Field], err)
	}
	return err
}

// withFlag says which flag err is about; nil stays nil.
func withFlag(flag string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", flag, err)
}
