package deploy

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	// RegistrarContainer is the name the registrar's container has in the
	// example manifests.
	RegistrarContainer = "node-driver-registrar"
	// RegistrarBinary is the registrar's path in its image, the only
	// executable there.
	RegistrarBinary = "/csi-node-driver-registrar"
	// PluginRegistry is kubelet's plugin registry on the host.
	PluginRegistry = "/var/lib/kubelet/plugins_registry"
	// PluginsDir holds each CSI driver's socket directory on the host,
	// /var/lib/kubelet/plugins/<driver name>.
	PluginsDir = "/var/lib/kubelet/plugins"

	// RegistrarWindowsCommand is the command of the registrar in a
	// HostProcess pod: the program's name alone, found on the container's
	// PATH (its image's files), where the image's entrypoint, a path from
	// the root, would be looked for in the host's C:\.
	RegistrarWindowsCommand = "csi-node-driver-registrar.exe"
	// WindowsPluginRegistry and WindowsPluginsDir are kubelet's
	// PluginRegistry and PluginsDir on a Windows node.
	WindowsPluginRegistry = `C:\var\lib\kubelet\plugins_registry`
	WindowsPluginsDir     = `C:\var\lib\kubelet\plugins`
)

// The registrar's flags, defaults (upstream's) and HTTP paths.
const (
	defaultCSIAddress       = "/run/csi/socket"
	defaultRegistrationDir  = "/registration"
	kubeletRegistrationFlag = "kubelet-registration-path"
	csiAddressFlag          = "csi-address"
	pluginRegistrationFlag  = "plugin-registration-path"
	httpEndpointFlag        = "http-endpoint"
	driverHealthFlag        = "driver-health-endpoint"
	driverLivenessPath      = "/healthz"
	healthPortFlag          = "health-port"
	registrarLivenessPath   = "/healthz"
	registrarReadinessPath  = "/readyz"
	maxPortNumber           = 65535
)

// The registrar's boolean flags: they take no separate value argument.
var registrarBoolFlags = map[string]bool{
	"enable-pprof": true, "automaxprocs": true, "version": true, "help": true, "h": true, "node-condition": true, "confirm-csinode": true, "events": true,
	"log-text-split-stream": true, "log-json-split-stream": true,
	"logtostderr": true, "alsologtostderr": true, "skip_headers": true,
	"skip_log_headers": true, "add_dir_header": true, "one_output": true,
}

// CheckNodePlugin returns every wiring mistake found in a CSI driver's node
// DaemonSet that runs the registrar as its sidecar: references that do not
// resolve, and registrar flags that do not match the volumes they rely on.
func CheckNodePlugin(ds *appsv1.DaemonSet) []error {
	c := &checker{ds: ds, spec: &ds.Spec.Template.Spec}
	c.hostProcess = isHostProcess(c.spec)
	c.checkSelector()
	c.checkUpdateStrategy()
	c.indexVolumes()
	for _, ctr := range c.allContainers() {
		c.checkContainer(ctr)
	}
	c.checkRegistrar()
	return c.errs
}

type checker struct {
	ds      *appsv1.DaemonSet
	spec    *corev1.PodSpec
	volumes map[string]*corev1.Volume
	// hostProcess: a Windows HostProcess pod, whose containers see the
	// host's file system, so that the registrar's paths are the host's.
	hostProcess bool
	errs        []error
}

// isHostProcess tells whether the pod's containers are Windows HostProcess
// containers, as the pod's security context says for all of them.
func isHostProcess(spec *corev1.PodSpec) bool {
	sc := spec.SecurityContext
	return sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess
}

func (c *checker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

func (c *checker) allContainers() []*corev1.Container {
	var all []*corev1.Container
	for i := range c.spec.InitContainers {
		all = append(all, &c.spec.InitContainers[i])
	}
	for i := range c.spec.Containers {
		all = append(all, &c.spec.Containers[i])
	}
	return all
}

func (c *checker) checkSelector() {
	sel, err := metav1.LabelSelectorAsSelector(c.ds.Spec.Selector)
	switch {
	case c.ds.Spec.Selector == nil:
		c.fail("the DaemonSet has no selector")
	case err != nil:
		c.fail("the DaemonSet's selector is invalid: %v", err)
	case sel.Empty() || !sel.Matches(labels.Set(c.ds.Spec.Template.Labels)):
		c.fail("the DaemonSet's selector %q does not match its pod template's labels %v", sel, c.ds.Spec.Template.Labels)
	}
}

func (c *checker) checkUpdateStrategy() {
	ru := c.ds.Spec.UpdateStrategy.RollingUpdate
	if c.ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil {
		return
	}
	surge := isNonZero(ru.MaxSurge)
	if !surge && !isNonZero(ru.MaxUnavailable) {
		c.fail("rollingUpdate has maxSurge and maxUnavailable both 0: the update could never proceed")
	}
	// With hostNetwork every declared container port is a host port, and
	// the scheduler places no second pod with the same host port on a node.
	// Undeclared ports are not its concern: the registrar hands its HTTP
	// port over to the new pod itself.
	if surge && c.spec.HostNetwork {
		for _, ctr := range c.allContainers() {
			if len(ctr.Ports) > 0 {
				c.fail("rollingUpdate.maxSurge with hostNetwork: container %q declares ports, which are host ports, so the old and the new pod on a node would need the same host ports and the new one is never scheduled; declare no ports, or use maxSurge 0", ctr.Name)
				break
			}
		}
	}
}

func isNonZero(v *intstr.IntOrString) bool {
	if v == nil {
		return false
	}
	if v.Type == intstr.Int {
		return v.IntVal != 0
	}
	s := strings.TrimSuffix(v.StrVal, "%")
	n, err := strconv.Atoi(s)
	return err != nil || n != 0
}

func (c *checker) indexVolumes() {
	c.volumes = map[string]*corev1.Volume{}
	for i := range c.spec.Volumes {
		v := &c.spec.Volumes[i]
		if _, dup := c.volumes[v.Name]; dup {
			c.fail("volume %q is defined twice", v.Name)
		}
		c.volumes[v.Name] = v
	}
}

func (c *checker) checkContainer(ctr *corev1.Container) {
	paths := map[string]bool{}
	for _, m := range ctr.VolumeMounts {
		if _, ok := c.volumes[m.Name]; !ok {
			c.fail("container %q mounts volume %q, which the pod does not define", ctr.Name, m.Name)
		}
		if !path.IsAbs(m.MountPath) && !(c.hostProcess && windowsAbs.MatchString(m.MountPath)) {
			c.fail("container %q mounts volume %q at %q, not an absolute path", ctr.Name, m.Name, m.MountPath)
		}
		p := path.Clean(m.MountPath)
		if paths[p] {
			c.fail("container %q mounts two volumes at %q", ctr.Name, p)
		}
		paths[p] = true
	}
	portNames := map[string]bool{}
	for _, p := range ctr.Ports {
		if p.Name == "" {
			continue
		}
		if portNames[p.Name] {
			c.fail("container %q has two ports named %q", ctr.Name, p.Name)
		}
		portNames[p.Name] = true
	}
	for _, p := range probes(ctr) {
		if _, err := probePort(ctr, p.probe); err != nil {
			c.fail("container %q: the %s probe: %v", ctr.Name, p.kind, err)
		}
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := ctr.Resources.Requests[res]
		limit, hasLimit := ctr.Resources.Limits[res]
		if hasReq && hasLimit && req.Cmp(limit) > 0 {
			c.fail("container %q requests %s %s, more than its limit %s", ctr.Name, res, req.String(), limit.String())
		}
	}
}

type namedProbe struct {
	kind  string
	probe *corev1.Probe
}

// probes lists the probes a container has.
func probes(ctr *corev1.Container) []namedProbe {
	var all []namedProbe
	for _, p := range []namedProbe{
		{"liveness", ctr.LivenessProbe}, {"readiness", ctr.ReadinessProbe}, {"startup", ctr.StartupProbe},
	} {
		if p.probe != nil {
			all = append(all, p)
		}
	}
	return all
}

// probePort resolves the port an HTTP, TCP or gRPC probe targets in its
// container; 0 for an exec probe.
func probePort(ctr *corev1.Container, probe *corev1.Probe) (int32, error) {
	var port intstr.IntOrString
	switch {
	case probe.HTTPGet != nil:
		port = probe.HTTPGet.Port
	case probe.TCPSocket != nil:
		port = probe.TCPSocket.Port
	case probe.GRPC != nil:
		port = intstr.FromInt32(probe.GRPC.Port)
	default:
		return 0, nil
	}
	if port.Type == intstr.String {
		for _, p := range ctr.Ports {
			if p.Name == port.StrVal {
				return p.ContainerPort, nil
			}
		}
		return 0, fmt.Errorf("port %q is not a named port of the container", port.StrVal)
	}
	if port.IntVal < 1 || port.IntVal > maxPortNumber {
		return 0, fmt.Errorf("port %d is out of range", port.IntVal)
	}
	return port.IntVal, nil
}

func (c *checker) findContainer(name string) *corev1.Container {
	return findContainer(c.spec, name)
}

// findContainer returns the pod's container of that name, or nil.
func findContainer(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

func (c *checker) checkRegistrar() {
	reg := c.findContainer(RegistrarContainer)
	if reg == nil {
		c.fail("no container named %q: the checks expect the registrar there", RegistrarContainer)
		return
	}
	if reg.Image == "" {
		c.fail("the registrar has no image")
	}
	switch {
	case c.hostProcess && (len(reg.Command) == 0 || reg.Command[0] != RegistrarWindowsCommand):
		c.fail("the registrar's command is %q: in a HostProcess pod it must be [%s], the program on the container's PATH (the image's entrypoint would be looked for in the host's C:\\)", reg.Command, RegistrarWindowsCommand)
	case !c.hostProcess && len(reg.Command) > 0 && reg.Command[0] != RegistrarBinary:
		c.fail("the registrar's command runs %q: its image holds only %s", reg.Command[0], RegistrarBinary)
	}
	for _, p := range probes(reg) {
		if exec := p.probe.Exec; exec != nil && (len(exec.Command) == 0 || exec.Command[0] != RegistrarBinary) {
			c.fail("the registrar's %s probe runs %q: its image holds only %s", p.kind, exec.Command, RegistrarBinary)
		}
	}

	flags, err := registrarFlags(reg)
	if err != nil {
		c.fail("the registrar's arguments: %v", err)
		return
	}
	if c.hostProcess {
		c.checkHostProcessSockets(reg, flags)
	} else {
		c.checkRegistrarSockets(reg, flags)
	}
	c.checkRegistrarHTTP(reg, flags)
	c.checkDriverHealth(reg, flags)
}

// registrarFlags are the registrar's flags, from its command and
// arguments, with the container's variables expanded as kubelet does.
func registrarFlags(reg *corev1.Container) (map[string]string, error) {
	args := append([]string(nil), reg.Args...)
	if len(reg.Command) > 1 {
		args = append(append([]string(nil), reg.Command[1:]...), args...)
	}
	return parseFlags(expandAll(args, reg.Env))
}

// checkDriverHealth checks the driver's liveness probe served by the
// registrar (--driver-health-endpoint): another container's liveness probe
// calls it, on its path.
func (c *checker) checkDriverHealth(reg *corev1.Container, flags map[string]string) {
	var port int32
	if endpoint, ok := flags[driverHealthFlag]; ok && endpoint != "" {
		var err error
		if port, err = endpointPort(driverHealthFlag, endpoint); err != nil {
			c.fail("%v", err)
			return
		}
	}
	called := false
	for _, ctr := range c.allContainers() {
		if ctr.Name == reg.Name || ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet == nil {
			continue
		}
		target, err := probePort(ctr, ctr.LivenessProbe)
		if err != nil || target != port || port == 0 {
			continue
		}
		called = true
		if got := ctr.LivenessProbe.HTTPGet.Path; got != driverLivenessPath {
			c.fail("container %q's liveness probe calls %q on --%s's port %d: the registrar serves the driver's liveness on %s", ctr.Name, got, driverHealthFlag, port, driverLivenessPath)
		}
	}
	if port != 0 && !called {
		c.fail("the registrar serves the driver's liveness probe on port %d (--%s), but no other container's liveness probe calls it: kubelet would never restart the driver", port, driverHealthFlag)
	}
}

func (c *checker) checkRegistrarSockets(reg *corev1.Container, flags map[string]string) {
	address, ok := flags[csiAddressFlag]
	if !ok {
		address = defaultCSIAddress
	}
	address = strings.TrimPrefix(strings.TrimPrefix(address, "unix://"), "unix:")
	if !path.IsAbs(address) {
		c.fail("--csi-address %q is not an absolute path", address)
		return
	}
	mount, rel := coveringMount(reg, address)
	if mount == nil {
		c.fail("--csi-address %q is under none of the registrar's volume mounts: the driver's socket cannot reach it", address)
		return
	}
	socketVolume := c.volumes[mount.Name]
	if socketVolume == nil {
		return // reported with the container
	}
	if socketVolume.HostPath == nil {
		c.fail("--csi-address %q is on volume %q, which is not a hostPath: kubelet cannot dial the driver there", address, mount.Name)
		return
	}
	hostDir := path.Clean(socketVolume.HostPath.Path)
	if path.Dir(hostDir) != PluginsDir {
		c.fail("volume %q is the host directory %q: the convention is %s/<driver name>", mount.Name, hostDir, PluginsDir)
	}
	if !c.sharedWithAnotherContainer(reg.Name, mount.Name) {
		c.fail("no other container mounts volume %q: the registrar would not find the driver's socket there", mount.Name)
	}

	hostSocket := path.Join(hostDir, mount.SubPath, rel)
	registrationPath, ok := flags[kubeletRegistrationFlag]
	switch {
	case !ok || registrationPath == "":
		c.fail("--%s is not set: the registrar refuses to start without it", kubeletRegistrationFlag)
	case strings.Contains(registrationPath, "$("):
		c.fail("--%s %q refers to a variable the registrar's env does not define with a value", kubeletRegistrationFlag, registrationPath)
	case path.Clean(registrationPath) != hostSocket:
		c.fail("--%s is %q, but --csi-address %q is %q on the host (volume %q): kubelet would dial the wrong socket",
			kubeletRegistrationFlag, registrationPath, address, hostSocket, mount.Name)
	}

	registrationDir, ok := flags[pluginRegistrationFlag]
	if !ok {
		registrationDir = defaultRegistrationDir
	}
	regMount, regRel := coveringMount(reg, registrationDir)
	if regMount == nil {
		c.fail("--%s %q is under none of the registrar's volume mounts: kubelet would never see the registration socket", pluginRegistrationFlag, registrationDir)
		return
	}
	regVolume := c.volumes[regMount.Name]
	if regVolume == nil {
		return // reported with the container
	}
	switch {
	case regVolume.HostPath == nil || path.Join(path.Clean(regVolume.HostPath.Path), regMount.SubPath, regRel) != PluginRegistry:
		c.fail("--%s %q is not the host's %s (volume %q): kubelet would never see the registration socket", pluginRegistrationFlag, registrationDir, PluginRegistry, regMount.Name)
	case regMount.ReadOnly:
		c.fail("volume %q is mounted read-only: the registrar creates its socket there", regMount.Name)
	}
}

// windowsAbs matches an absolute Windows path: a drive and a separator.
var windowsAbs = regexp.MustCompile(`^[A-Za-z]:[\\/]`)

// windowsPath is a Windows path in one spelling, to compare two: forward
// slashes and lower case (Windows' names ignore case).
func windowsPath(p string) string {
	return strings.ToLower(strings.ReplaceAll(p, `\`, "/"))
}

// checkHostProcessSockets checks the registrar's paths in a HostProcess
// pod: they are the host's, so --csi-address is the very file kubelet
// dials (--kubelet-registration-path), which the driver container is given
// too, and --plugin-registration-path is kubelet's registry itself.
func (c *checker) checkHostProcessSockets(reg *corev1.Container, flags map[string]string) {
	address := strings.TrimPrefix(strings.TrimPrefix(flags[csiAddressFlag], "unix://"), "unix:")
	if !windowsAbs.MatchString(address) {
		c.fail("--csi-address %q is not an absolute Windows path (C:\\...): in a HostProcess pod the registrar finds the driver's socket on the host's file system", address)
		return
	}
	socket := path.Clean(windowsPath(address))
	if path.Dir(path.Dir(socket)) != windowsPath(WindowsPluginsDir) {
		c.fail("--csi-address %q is not in a directory of %s: the convention is %s\\<driver name>\\csi.sock", address, WindowsPluginsDir, WindowsPluginsDir)
	}
	registrationPath := flags[kubeletRegistrationFlag]
	switch {
	case registrationPath == "":
		c.fail("--%s is not set: the registrar refuses to start without it", kubeletRegistrationFlag)
	case strings.Contains(registrationPath, "$("):
		c.fail("--%s %q refers to a variable the registrar's env does not define with a value", kubeletRegistrationFlag, registrationPath)
	case path.Clean(windowsPath(registrationPath)) != socket:
		c.fail("--%s is %q, but --csi-address is %q: in a HostProcess pod both are the socket's path on the host, so kubelet would dial the wrong socket", kubeletRegistrationFlag, registrationPath, address)
	}
	if !c.givenToAnotherContainer(reg.Name, socket) {
		c.fail("no other container has the socket %q in its arguments or variables: the driver would not listen where the registrar looks", address)
	}
	if dir := flags[pluginRegistrationFlag]; path.Clean(windowsPath(dir)) != windowsPath(WindowsPluginRegistry) {
		c.fail("--%s is %q, not kubelet's registry %s: in a HostProcess pod the path is the host's, and kubelet would never see the registration socket", pluginRegistrationFlag, dir, WindowsPluginRegistry)
	}
}

// givenToAnotherContainer tells whether a container other than self has
// the Windows path p in its arguments, with its variables expanded, or in
// a variable.
func (c *checker) givenToAnotherContainer(self, p string) bool {
	for _, ctr := range c.spec.Containers {
		if ctr.Name == self {
			continue
		}
		values := expandAll(append(append([]string(nil), ctr.Command...), ctr.Args...), ctr.Env)
		for _, e := range ctr.Env {
			values = append(values, e.Value)
		}
		for _, v := range values {
			if strings.Contains(windowsPath(v), p) {
				return true
			}
		}
	}
	return false
}

func (c *checker) sharedWithAnotherContainer(self, volume string) bool {
	for _, ctr := range c.allContainers() {
		if ctr.Name == self {
			continue
		}
		for _, m := range ctr.VolumeMounts {
			if m.Name == volume {
				return true
			}
		}
	}
	return false
}

func (c *checker) checkRegistrarHTTP(reg *corev1.Container, flags map[string]string) {
	var port int32
	if endpoint, ok := flags[httpEndpointFlag]; ok && endpoint != "" {
		var err error
		if port, err = endpointPort(httpEndpointFlag, endpoint); err != nil {
			c.fail("%v", err)
			return
		}
	} else if hp, ok := flags[healthPortFlag]; ok && hp != "0" {
		n, err := strconv.ParseInt(hp, 10, 32)
		if err != nil || n < 1 || n > maxPortNumber {
			c.fail("--%s %q is not a port number", healthPortFlag, hp)
			return
		}
		port = int32(n)
	}

	declared := slices.ContainsFunc(reg.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port })
	// On hostNetwork the port may go undeclared (see checkUpdateStrategy).
	if port != 0 && !declared && !c.spec.HostNetwork {
		c.fail("the registrar listens on port %d (--%s), which is not among its container ports", port, httpEndpointFlag)
	}
	wantPath := map[string]string{"liveness": registrarLivenessPath, "readiness": registrarReadinessPath}
	for _, p := range probes(reg) {
		if p.probe.HTTPGet == nil {
			continue
		}
		target, err := probePort(reg, p.probe)
		switch {
		case err != nil:
			// reported with the container
		case port == 0:
			c.fail("the registrar's %s probe calls port %d, but --%s is not set: nothing listens there", p.kind, target, httpEndpointFlag)
		case target != port:
			c.fail("the registrar's %s probe calls port %d, but it listens on %d (--%s)", p.kind, target, port, httpEndpointFlag)
		}
		if want, ok := wantPath[p.kind]; ok && p.probe.HTTPGet.Path != want {
			c.fail("the registrar's %s probe calls %q: the registrar serves %s for it", p.kind, p.probe.HTTPGet.Path, want)
		}
	}
}

// endpointPort is the port of a host:port flag's value.
func endpointPort(flag, endpoint string) (int32, error) {
	_, p, err := net.SplitHostPort(endpoint)
	n, convErr := strconv.ParseInt(p, 10, 32)
	if err != nil || convErr != nil || n < 1 || n > maxPortNumber {
		return 0, fmt.Errorf("--%s %q is not host:port", flag, endpoint)
	}
	return int32(n), nil
}

// coveringMount returns the volume mount whose path holds p, the deepest
// when several do, and p relative to it.
func coveringMount(ctr *corev1.Container, p string) (*corev1.VolumeMount, string) {
	p = path.Clean(p)
	var best *corev1.VolumeMount
	var bestRel string
	for i := range ctr.VolumeMounts {
		m := &ctr.VolumeMounts[i]
		mp := path.Clean(m.MountPath)
		var rel string
		switch {
		case p == mp:
			rel = ""
		case strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/"):
			rel = strings.TrimPrefix(p, strings.TrimSuffix(mp, "/")+"/")
		default:
			continue
		}
		if best == nil || len(mp) > len(path.Clean(best.MountPath)) {
			best, bestRel = m, rel
		}
	}
	return best, bestRel
}

// parseFlags reads arguments as Go's flag package does: -name=value,
// --name=value, --name value, a boolean flag alone; parsing stops at the
// first argument that is not a flag, or after "--".
func parseFlags(args []string) (map[string]string, error) {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || len(arg) < 2 || arg[0] != '-' {
			break
		}
		name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		if name == "" || strings.HasPrefix(name, "-") || strings.HasPrefix(name, "=") {
			return nil, fmt.Errorf("bad flag syntax: %q", arg)
		}
		value, hasValue := "", false
		if eq := strings.IndexByte(name, '='); eq >= 0 {
			name, value, hasValue = name[:eq], name[eq+1:], true
		}
		if !hasValue {
			if registrarBoolFlags[name] {
				value = "true"
			} else if i+1 < len(args) {
				i++
				value = args[i]
			} else {
				return nil, fmt.Errorf("flag needs an argument: %q", arg)
			}
		}
		if _, dup := flags[name]; dup {
			return nil, fmt.Errorf("--%s is given twice", name)
		}
		flags[name] = value
	}
	return flags, nil
}

// expandAll expands $(VAR) references in arguments as kubelet does, from
// the variables the container defines with a literal value; "$$" stands for
// "$". A reference that cannot be resolved stays as it is.
func expandAll(args []string, env []corev1.EnvVar) []string {
	values := map[string]string{}
	for _, e := range env {
		if e.ValueFrom == nil {
			values[e.Name] = expand(e.Value, values)
		} else {
			delete(values, e.Name)
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, values)
	}
	return out
}

func expand(s string, values map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := values[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
