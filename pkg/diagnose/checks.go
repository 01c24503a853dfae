package diagnose

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

const (
	// maxListed bounds the names listed in one line.
	maxListed = 10
	// maxDialed bounds the sockets that the check of the registry
	// directory's other entries connects to.
	maxDialed = 20
)

// 1. The registry directory.
func (d *diagnosis) checkRegistryDir() Check {
	dir := d.cfg.RegistrationDir
	c := Check{Name: "registry directory " + dir}
	if dir == "" {
		c.Name = "registry directory"
		return fail(c, "--plugin-registration-path is empty: point it at the mount of the host's /var/lib/kubelet/plugins_registry")
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(c, "does not exist: mount the host's /var/lib/kubelet/plugins_registry there, or fix --plugin-registration-path")
	case err != nil:
		return fail(c, "cannot be inspected: "+pathErrorCause(err))
	case !fi.IsDir():
		return fail(c, "is a "+sockfile.DescribeFileType(fi.Mode())+", not a directory: fix --plugin-registration-path or the volume mount")
	}
	d.dirExists = true

	how, err := checkWritable(dir)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			d.registryDenied = true
			if selinuxcheck.On() {
				return fail(c, "present, not writable ("+pathErrorCause(err)+"): SELinux is on, and the directory's label may deny it to this container (see the SELinux line); otherwise mount it read-write and run the registrar as root")
			}
		}
		return fail(c, "present, not writable ("+pathErrorCause(err)+"): mount it read-write and run the registrar as root")
	}
	detail := "present, writable (" + how + ")"
	if seen, mount, ok := hostPathOf(dir); ok {
		// kubelet watches <its --root-dir>/plugins_registry.
		if filepath.Base(seen) != "plugins_registry" {
			return warn(c, fmt.Sprintf("%s; but it is %s on the host (%s from /proc/self/mountinfo), not a <kubelet --root-dir>/plugins_registry: kubelet does not watch it. Mount the host's /var/lib/kubelet/plugins_registry, or <root-dir>/plugins_registry where kubelet's root dir is elsewhere (microk8s, k0s)", detail, seen, mount.Mountpoint))
		}
		if root := filepath.Dir(seen); root != "/" {
			// "/": a file system of its own; its place on the host is unknown.
			d.kubeletRoot = root
			detail += fmt.Sprintf("; %s on the host, so kubelet's root dir is %s", seen, root)
		}
	}
	return ok(c, detail)
}

// 2. The driver's socket.
func (d *diagnosis) checkDriverSocket() Check {
	address, err := driver.ParseAddress(d.cfg.CSIAddress)
	if err != nil {
		return fail(Check{Name: "driver address"}, err.Error())
	}
	d.address, d.addressParsed = address, true
	c := Check{Name: "driver socket " + address.Path}
	fi, err := os.Lstat(address.Path)
	if err == nil && fi.Mode().Type() == fs.ModeSymlink {
		// Connecting follows the link.
		fi, err = os.Stat(address.Path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(c, "does not exist: is the driver running, and does this container mount the driver's socket directory at "+filepath.Dir(address.Path)+"?")
	case err != nil:
		return fail(c, "cannot be inspected: "+pathErrorCause(err))
	case fi.Mode().Type() != fs.ModeSocket:
		return fail(c, "is a "+sockfile.DescribeFileType(fi.Mode())+", not a socket: check --csi-address")
	}
	d.socketFound = true
	return ok(c, "present, a socket")
}

// 3. The driver's answer to GetPluginInfo.
func (d *diagnosis) checkDriverInfo(ctx context.Context) Check {
	c := Check{Name: "driver GetPluginInfo"}
	if !d.socketFound {
		return skip(c, "no driver socket to ask")
	}
	info, err := pluginInfo(ctx, d.address.Path, d.cfg.Timeout)
	if err != nil {
		var ce *unixgrpc.ConnectError
		if errors.As(err, &ce) {
			return fail(c, describeCallError(err, d.cfg.Timeout)+": nothing listens on the driver socket; is the driver container crashing or restarting? Check its logs")
		}
		return fail(c, describeCallError(err, d.cfg.Timeout)+": check that the driver is healthy (its logs) and that --csi-address is its socket")
	}
	name, version := info.GetName(), info.GetVendorVersion()
	if err := driver.ValidateName(name); err != nil {
		return fail(c, fmt.Sprintf("%v (vendor version %q)", err, version))
	}
	d.driverName = name
	return ok(c, fmt.Sprintf("name %q, vendor version %q", name, version))
}

// 4. The length of the registration socket's path.
func (d *diagnosis) checkSocketPathLength() Check {
	c := Check{Name: "registration socket path"}
	if d.driverName == "" {
		return skip(c, "needs the driver's name from GetPluginInfo")
	}
	path := registration.SocketPath(d.cfg.RegistrationDir, d.driverName)
	if n := len(path); n > registration.MaxSocketPathLength {
		return fail(c, fmt.Sprintf("%s is %d bytes, more than the %d a Unix socket allows: mount the registry at a shorter path (--plugin-registration-path)",
			path, n, registration.MaxSocketPathLength))
	}
	return ok(c, fmt.Sprintf("%s, %d of at most %d bytes", path, len(path), registration.MaxSocketPathLength))
}

// 5. The registration socket and what kubelet learns from it.
func (d *diagnosis) checkRegistrationSocket(ctx context.Context) Check {
	c := Check{Name: "registration socket"}
	switch {
	case d.driverName == "":
		return skip(c, "needs the driver's name from GetPluginInfo")
	case !d.dirExists:
		return skip(c, "no registry directory")
	}
	path := registration.SocketPath(d.cfg.RegistrationDir, d.driverName)
	c.Name += " " + path
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(c, "missing, so the driver is not registered: is the registrar running? Its log says what it is waiting for or why it stopped")
	case err != nil:
		return fail(c, "cannot be inspected: "+pathErrorCause(err))
	case fi.Mode().Type() != fs.ModeSocket:
		return fail(c, "is a "+sockfile.DescribeFileType(fi.Mode())+", not a socket: kubelet ignores it and the registrar will not replace it; remove it")
	}
	info, err := registrationInfo(ctx, path, d.cfg.Timeout)
	if err != nil {
		var ce *unixgrpc.ConnectError
		if errors.As(err, &ce) {
			return fail(c, describeCallError(err, d.cfg.Timeout)+": a stale socket left by a registrar that died; restart the registrar container, it replaces the socket")
		}
		return fail(c, describeCallError(err, d.cfg.Timeout)+" to GetInfo: whatever holds this socket is not a working registrar; restart the registrar container")
	}

	d.registrationSocket = path
	found := fmt.Sprintf("%s %q, endpoint %q, versions %v", info.GetType(), info.GetName(), info.GetEndpoint(), info.GetSupportedVersions())
	var problems []string
	outcome := OK
	if info.GetName() != d.driverName {
		outcome = Fail
		problems = append(problems, fmt.Sprintf("it answers for driver %q, not %q: this path is served by another driver's registrar; find it", info.GetName(), d.driverName))
	}
	if info.GetType() != registerapi.CSIPlugin {
		outcome = Fail
		problems = append(problems, fmt.Sprintf("type %q: kubelet's CSI handler only takes %q", info.GetType(), registerapi.CSIPlugin))
	}
	if p := versionsProblem(info.GetSupportedVersions()); p != "" {
		outcome = Fail
		problems = append(problems, p)
	}
	if want := d.cfg.KubeletRegistrationPath; want != "" && info.GetEndpoint() != want {
		outcome = max(outcome, Warn)
		problems = append(problems, fmt.Sprintf("the endpoint is not --kubelet-registration-path %q: another instance or a different configuration serves this socket", want))
	}
	c.Outcome = outcome
	c.Detail = "answers " + found
	if len(problems) > 0 {
		c.Detail += "; " + strings.Join(problems, "; ")
	}
	return c
}

// versionsProblem applies kubelet's CSI handler's rule: the versions parse,
// and the highest is 1.x. It returns "" when they pass.
func versionsProblem(versions []string) string {
	if len(versions) == 0 {
		return "no supported versions: kubelet's CSI handler needs 1.x"
	}
	highest := -1
	for _, v := range versions {
		major, ok := majorVersion(v)
		if !ok {
			return fmt.Sprintf("version %q does not parse: kubelet rejects the plugin", v)
		}
		highest = max(highest, major)
	}
	if highest != 1 {
		return fmt.Sprintf("the highest version is %d.x: kubelet's CSI handler needs 1.x", highest)
	}
	return ""
}

// majorVersion reads the major number of "1.0.0", "v1.2" and the like.
func majorVersion(v string) (int, bool) {
	v = strings.TrimPrefix(v, "v")
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return 0, false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 32); err != nil {
			return 0, false
		}
	}
	major, _ := strconv.Atoi(parts[0])
	return major, true
}

// 6. --kubelet-registration-path against --csi-address.
func (d *diagnosis) checkKubeletRegistrationPath() Check {
	hostPath := d.cfg.KubeletRegistrationPath
	c := Check{Name: "kubelet registration path " + hostPath}
	if hostPath == "" {
		c.Name = "kubelet registration path"
		return fail(c, "--kubelet-registration-path is empty but required: set it to the driver socket's path on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock")
	}
	var notes []string
	outcome := OK
	if !filepath.IsAbs(hostPath) {
		outcome = Warn
		notes = append(notes, "not an absolute path: kubelet dials it as given, on the host")
	}
	if !d.addressParsed {
		notes = append(notes, "not compared with --csi-address, which does not parse")
	} else if seen, mount, ok := hostPathOf(d.address.Path); ok {
		// Where the mounts tell: the driver's socket as the host sees it.
		source := fmt.Sprintf("%s is %s on the host (/proc/self/mountinfo)", mount.Mountpoint, mount.Root)
		if d.kubeletRoot != "" && !strings.HasPrefix(seen, d.kubeletRoot+"/") && !strings.HasPrefix(hostPath, d.kubeletRoot+"/") {
			outcome = Warn
			notes = append(notes, fmt.Sprintf("not under kubelet's root dir %s (from the registry's mount): drivers usually keep their socket in <root-dir>/plugins/<driver>/", d.kubeletRoot))
		}
		switch {
		case hostPath == seen:
			notes = append(notes, "the driver's socket as the host sees it: "+source)
		case strings.HasSuffix(hostPath, seen):
			notes = append(notes, fmt.Sprintf("the driver's socket as the host sees it: %s, within a file system mounted at %s on the host", source, strings.TrimSuffix(hostPath, seen)))
		default:
			outcome = Fail
			notes = append(notes, fmt.Sprintf("not the driver's socket as the host sees it: %s, so kubelet must dial %s (or that path under where the file system is mounted on the host); kubelet fails to reach the driver and rejects it", source, seen))
		}
	} else {
		hostBase, podBase := filepath.Base(hostPath), filepath.Base(d.address.Path)
		if hostBase == podBase {
			notes = append(notes, fmt.Sprintf("plausibly the driver's socket: same file name as --csi-address %s", d.address.Path))
		} else {
			outcome = Warn
			notes = append(notes, fmt.Sprintf("file name %q differs from --csi-address %s (%q): check that both name the driver's socket, on the host and in this pod",
				hostBase, d.address.Path, podBase))
		}
	}
	c.Outcome, c.Detail = outcome, strings.Join(notes, "; ")
	return c
}

// kubeletQuiet is how long kubelet may take to call GetInfo on a new
// socket: its plugin watcher reacts at once, its reconciler within a
// second.
const kubeletQuiet = 5 * time.Second

// 8. What kubelet made of the registration, as the registrar serving the
// socket saw it.
func (d *diagnosis) checkKubeletVerdict(ctx context.Context) Check {
	c := Check{Name: "kubelet's registration"}
	if d.registrationSocket == "" {
		return skip(c, "no registration socket that answers")
	}
	st, err := registrarStatus(ctx, d.registrationSocket, d.cfg.Timeout)
	switch {
	case status.Code(err) == codes.Unimplemented:
		return skip(c, "the registrar serving the socket does not report its state (upstream's, or an older build): its log says whether kubelet registered the driver")
	case err != nil:
		return warn(c, "cannot read the registrar's state: "+describeCallError(err, d.cfg.Timeout))
	}
	return judgeRegistration(c, st, time.Now(), d.cfg.RegistrationDir)
}

// judgeRegistration tells from the registrar's state st, at now, what
// kubelet made of the registration.
func judgeRegistration(c Check, st *registration.Status, now time.Time, dir string) Check {
	since := func(t *time.Time) string {
		if t == nil {
			return "at an unknown time"
		}
		return fmt.Sprintf("%s ago", now.Sub(*t).Round(time.Second))
	}
	switch st.State {
	case registration.Registered:
		return ok(c, "kubelet registered the driver through this socket"+verdictTime(st.LastVerdict, since))
	case registration.Rejected:
		reason := ""
		if st.LastVerdict != nil {
			reason = st.LastVerdict.Reason
		}
		return fail(c, fmt.Sprintf("kubelet rejected the driver%s (%d times in a row): %q%s", verdictTime(st.LastVerdict, since), st.Attempts, reason, rejectionHint(reason)))
	case registration.KubeletSilent:
		return fail(c, fmt.Sprintf("kubelet has not called GetInfo on the socket published %s: kubelet does not watch %s (its --root-dir is elsewhere? this must be the host's <root-dir>/plugins_registry), or kubelet is not running", since(st.LastPublished), dir))
	case registration.WaitingForKubelet:
		switch {
		case st.LastGetInfo != nil && (st.LastPublished == nil || !st.LastGetInfo.Before(*st.LastPublished)):
			return fail(c, fmt.Sprintf("kubelet called GetInfo %s but has sent no verdict: its CSI handler is still validating the driver, or failed without saying; kubelet's log says why", since(st.LastGetInfo)))
		case st.LastPublished != nil && now.Sub(*st.LastPublished) < kubeletQuiet:
			return warn(c, fmt.Sprintf("the socket was published %s and kubelet has not called yet: run --diagnose again in a few seconds", since(st.LastPublished)))
		default:
			return fail(c, fmt.Sprintf("kubelet has not called GetInfo on the socket published %s: kubelet does not watch %s (its --root-dir is elsewhere? this must be the host's <root-dir>/plugins_registry), or kubelet is not running", since(st.LastPublished), dir))
		}
	case registration.Superseded, registration.Deferring:
		return ok(c, "served by another instance of the registrar: "+st.Reason)
	default:
		return fail(c, fmt.Sprintf("the registrar serving the socket reports %q: %s", st.State, st.Reason))
	}
}

// verdictTime says when kubelet gave its verdict.
func verdictTime(v *registration.Verdict, since func(*time.Time) string) string {
	if v == nil {
		return ""
	}
	return " " + since(&v.Time)
}

// rejectionHint explains kubelet's commonest reason.
func rejectionHint(reason string) string {
	if strings.Contains(reason, "no such file or directory") || strings.Contains(reason, "connection refused") {
		return ": kubelet cannot reach the driver at --kubelet-registration-path on the host; it must be the host path of the driver's socket"
	}
	return ""
}

// 7. Everything else in the registry directory.
func (d *diagnosis) checkNeighbours(ctx context.Context) Check {
	dir := d.cfg.RegistrationDir
	c := Check{Name: "other entries in " + dir}
	if !d.dirExists {
		c.Name = "other entries in the registry directory"
		return skip(c, "no registry directory")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return warn(c, "cannot list the directory: "+pathErrorCause(err))
	}
	own := ""
	if d.driverName != "" {
		own = filepath.Base(registration.SocketPath(dir, d.driverName))
	}
	var (
		sockets []string      // other plugins' sockets, as kubelet sees them
		visible []fs.FileInfo // every plugin socket, this driver's too
		hidden  []string      // registrar temporary names: .<driver>.<6 hex>
		dotted  []string      // other dot-files
		others  []string      // neither sockets nor dot-files
	)
	for _, e := range entries {
		name := e.Name()
		isSocket := e.Type() == fs.ModeSocket
		switch {
		case strings.HasPrefix(name, "."):
			if _, ok := sockfile.HiddenDriver(name); isSocket && ok {
				hidden = append(hidden, name)
			} else {
				dotted = append(dotted, name)
			}
			continue
		case !isSocket:
			others = append(others, fmt.Sprintf("%s (%s)", name, sockfile.DescribeFileType(e.Type())))
			continue
		case name != own:
			sockets = append(sockets, name)
		}
		if fi, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			visible = append(visible, fi)
		}
	}

	var notes []string
	outcome := OK
	budget := maxDialed // sockets still allowed to be connected to
	if len(sockets) == 0 {
		notes = append(notes, "no other plugin sockets")
	} else {
		if d.driverName == "" {
			// This driver's socket cannot be told apart: it is one of them.
			notes = append(notes, fmt.Sprintf("%s: %s (not asked for their driver names: this driver's name is unknown)",
				plural(len(sockets), "plugin socket", "plugin sockets"), list(sockets)))
		} else {
			count := plural(len(sockets), "other plugin socket", "other plugin sockets")
			claims, silent, unasked := d.askNeighbours(ctx, dir, sockets, budget)
			budget -= len(sockets) - len(unasked)
			var answering []string
			for _, name := range sockets {
				if !slices.Contains(silent, name) && !slices.Contains(unasked, name) {
					answering = append(answering, name)
				}
			}
			notes = append(notes, count)
			if len(answering) > 0 {
				notes = append(notes, "answering: "+list(answering))
			}
			if len(silent) > 0 {
				notes = append(notes, "stale (no answer; harmless, kubelet retries them): "+list(silent))
			}
			if len(unasked) > 0 {
				notes = append(notes, fmt.Sprintf("not asked (at most %d sockets are): %s", maxDialed, list(unasked)))
			}
			if len(claims) > 0 {
				outcome = Warn
				notes = append(notes, fmt.Sprintf("also serving driver %q: %s; kubelet registers only one of them: remove the stale one or stop the registrar that serves it",
					d.driverName, list(claims)))
			}
		}
	}
	if len(hidden) > 0 {
		twins, live, dead, unchecked := d.classifyHidden(ctx, dir, hidden, visible, budget)
		if len(twins) > 0 {
			notes = append(notes, "hidden second names of published sockets (normal): "+list(twins))
		}
		if len(live) > 0 {
			notes = append(notes, "hidden sockets of another running registrar (an older pod of a rolling update?): "+list(live))
		}
		if len(dead) > 0 {
			notes = append(notes, "hidden sockets left by a killed registrar (harmless; safe to delete): "+list(dead))
		}
		if len(unchecked) > 0 {
			notes = append(notes, "hidden sockets not checked (at most "+strconv.Itoa(maxDialed)+" sockets are): "+list(unchecked))
		}
	}
	if len(dotted) > 0 {
		notes = append(notes, "dot-files, ignored by kubelet: "+list(dotted))
	}
	if len(others) > 0 {
		notes = append(notes, "not sockets (kubelet ignores files, and looks for sockets inside directories): "+list(others))
	}
	c.Outcome, c.Detail = outcome, strings.Join(notes, "; ")
	return c
}

// askNeighbours asks up to budget of the sockets, all at once, for
// GetInfo, so that the whole takes about one timeout. It returns those that
// claim this driver's name as CSI plugins, those that do not answer, and
// those not asked.
func (d *diagnosis) askNeighbours(ctx context.Context, dir string, sockets []string, budget int) (claims, silent, unasked []string) {
	sockets = slices.Sorted(slices.Values(sockets))
	asked := sockets[:min(len(sockets), budget)]
	claimed := make([]bool, len(asked))
	answered := make([]bool, len(asked))
	inParallel(len(asked), func(i int) {
		info, err := registrationInfo(ctx, filepath.Join(dir, asked[i]), d.cfg.Timeout)
		if err != nil {
			return
		}
		answered[i] = true
		// A DRA or device plugin of the same name is no conflict:
		// kubelet keeps plugins apart by type.
		claimed[i] = info.GetName() == d.driverName && info.GetType() == registerapi.CSIPlugin
	})
	for i, name := range asked {
		switch {
		case claimed[i]:
			claims = append(claims, name)
		case !answered[i]:
			silent = append(silent, name)
		}
	}
	return claims, silent, sockets[len(asked):]
}

// classifyHidden sorts the hidden names a registrar binds its socket under.
// A published socket keeps its hidden name as a second name (a hard link):
// such twins are normal. Any other is either in use by a running registrar
// (it accepts connections) or left by one that was killed. At most budget
// are tried, all at once; the rest are returned unchecked.
func (d *diagnosis) classifyHidden(ctx context.Context, dir string, hidden []string, visible []fs.FileInfo, budget int) (twins, live, dead, unchecked []string) {
	var lone []string
	for _, name := range hidden {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err == nil && slices.ContainsFunc(visible, func(v fs.FileInfo) bool { return os.SameFile(fi, v) }) {
			twins = append(twins, name)
		} else {
			lone = append(lone, name)
		}
	}
	lone = slices.Sorted(slices.Values(lone))
	tried := lone[:min(len(lone), max(budget, 0))]
	answers := make([]bool, len(tried))
	inParallel(len(tried), func(i int) {
		answers[i] = accepts(ctx, filepath.Join(dir, tried[i]), d.cfg.Timeout)
	})
	for i, name := range tried {
		if answers[i] {
			live = append(live, name)
		} else {
			dead = append(dead, name)
		}
	}
	return twins, live, dead, lone[len(tried):]
}

// inParallel runs f(0) ... f(n-1) at once and waits for all of them.
func inParallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// list joins names, at most maxListed of them.
func list(names []string) string {
	names = slices.Clone(names)
	slices.Sort(names)
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
}

func ok(c Check, detail string) Check   { c.Outcome, c.Detail = OK, detail; return c }
func warn(c Check, detail string) Check { c.Outcome, c.Detail = Warn, detail; return c }
func fail(c Check, detail string) Check { c.Outcome, c.Detail = Fail, detail; return c }
func skip(c Check, reason string) Check { c.Outcome, c.Detail = Skip, "skipped: "+reason; return c }

// pathErrorCause drops the operation and path that the check's line
// already shows: "permission denied" rather than "open /x: permission denied".
func pathErrorCause(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
