package diagnose

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/version"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// 1. The registry directory.
func (d *diagnosis) checkRegistryDir(context.Context) Check {
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
		notWritable := "present, not writable (" + pathErrorCause(err) + "): "
		return fail(c, notWritable+"mount it read-write and run the registrar as root")
	}
	detail := "present, writable (" + how + ")"
	if seen, mount, ok := hostPathOf(dir); ok {
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
func (d *diagnosis) checkDriverSocket(context.Context) Check {
	address, err := driver.ParseAddress(d.cfg.CSIAddress)
	if err != nil {
		return fail(Check{Name: "driver address"}, err.Error())
	}
	d.driverSocket = address.Path
	c := Check{Name: "driver socket " + address.Path}
	// Stat, as connecting follows a symbolic link.
	fi, err := os.Stat(address.Path)
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
	end := d.waiting(c.Name, fmt.Sprintf("waiting up to %v (--timeout), as the registrar does before it can publish the registration socket", d.cfg.Timeout))
	info, err := call(ctx, d.driverSocket, d.cfg.Timeout, pluginInfo)
	end()
	if err != nil {
		advice := "check that the driver is healthy (its logs) and that --csi-address is its socket"
		if errors.As(err, new(*unixgrpc.ConnectError)) {
			// Each error of connect(2) has its own cause: permissions are
			// not the driver's fault, a refusal is.
			advice = cmp.Or(driver.ConnectAdvice(err, d.driverSocket), "check that the driver is running (its logs) and that --csi-address is its socket")
		}
		return fail(c, describeCallError(err, d.cfg.Timeout)+": "+advice)
	}
	name, version := info.GetName(), info.GetVendorVersion()
	if err := driver.ValidateName(name); err != nil {
		return fail(c, fmt.Sprintf("%v (vendor version %q)", err, version))
	}
	d.driverName, d.socketPath = name, registration.SocketPath(d.cfg.RegistrationDir, name)
	return ok(c, fmt.Sprintf("name %q, vendor version %q", name, version))
}

// 4. The driver's answer to NodeGetInfo, which kubelet's CSI handler
// needs before it accepts the driver (kubernetes-csi/docs#583): a driver
// that hangs or fails there leaves the registration unfinished
// (kubernetes/kubernetes#138171).
func (d *diagnosis) checkNodeInfo(ctx context.Context) Check {
	c := Check{Name: "driver NodeGetInfo"}
	if d.driverName == "" {
		return skip(c, "needs a driver that answers GetPluginInfo")
	}
	timeout := KubeletNodeGetInfoTimeout
	end := d.waiting(c.Name, fmt.Sprintf("waiting up to %v, as long as kubelet waits for it when it registers the driver", timeout))
	// The call carries kubelet's deadline to the driver; the clock ends the
	// wait, so that a test need not wait as long.
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	expiry := d.clock.AfterFunc(timeout, func() { cancel(context.DeadlineExceeded) })
	defer expiry.Stop()
	info, err := call(callCtx, d.driverSocket, timeout, nodeInfo)
	if context.Cause(callCtx) == context.DeadlineExceeded {
		err = status.FromContextError(context.DeadlineExceeded).Err()
	}
	took := end()
	d.nodeInfoFailed = true
	unfinished := "the likely cause of a registration that kubelet never completes: kubelet needs this answer before it accepts the driver"
	switch status.Code(err) {
	case codes.OK:
	case codes.DeadlineExceeded:
		return fail(c, fmt.Sprintf("no answer within %v, as long as kubelet waits for it when it registers the driver: kubelet's registration of the driver would wait %v, then fail; %s. Look at the driver's node service: its log, and what NodeGetInfo waits for (a metadata server, the cloud's API)", timeout, timeout, unfinished))
	case codes.Unimplemented:
		return fail(c, describeCallError(err, timeout)+": the driver does not serve the CSI Node service, and kubelet calls NodeGetInfo to register a driver; "+unfinished+". Run the driver's node plugin (its node mode or flags) at --csi-address")
	default:
		return fail(c, describeCallError(err, timeout)+"; "+unfinished+". The driver's log says why")
	}
	if info.GetNodeId() == "" {
		return fail(c, "the answer has an empty node_id, which kubelet refuses (\"driverNodeID must not be empty\"); "+unfinished+". The driver must find this node's ID (its --node-id or metadata)")
	}
	d.nodeInfoFailed = false
	detail := fmt.Sprintf("node ID %q", info.GetNodeId())
	if info.GetMaxVolumesPerNode() > 0 {
		detail += fmt.Sprintf(", at most %d volumes", info.GetMaxVolumesPerNode())
	}
	if topology := info.GetAccessibleTopology().GetSegments(); len(topology) > 0 {
		segments := make([]string, 0, len(topology))
		for _, k := range slices.Sorted(maps.Keys(topology)) {
			segments = append(segments, k+"="+topology[k])
		}
		detail += ", topology " + strings.Join(segments, ",")
	}
	c = ok(c, detail)
	if took >= SlowCheck {
		c.note(Warn, fmt.Sprintf("answered after %v: kubelet's registration of the driver waits that long for it too, each time kubelet registers the driver (at every start of the driver or the registrar); what does NodeGetInfo wait for (its log)?", took.Round(100*time.Millisecond)))
	}
	return c
}

// 5. The length of the registration socket's path.
func (d *diagnosis) checkSocketPathLength(context.Context) Check {
	c := Check{Name: "registration socket path"}
	if d.driverName == "" {
		return skip(c, "needs the driver's name from GetPluginInfo")
	}
	if n := len(d.socketPath); n > registration.MaxSocketPathLength {
		return fail(c, fmt.Sprintf("%s is %d bytes, more than the %d a Unix socket allows: mount the registry at a shorter path (--plugin-registration-path)",
			d.socketPath, n, registration.MaxSocketPathLength))
	}
	return ok(c, fmt.Sprintf("%s, %d of at most %d bytes", d.socketPath, len(d.socketPath), registration.MaxSocketPathLength))
}

// 6. The registration socket and what kubelet learns from it.
func (d *diagnosis) checkRegistrationSocket(ctx context.Context) Check {
	c := Check{Name: "registration socket"}
	switch {
	case d.driverName == "":
		return skip(c, "needs the driver's name from GetPluginInfo")
	case !d.dirExists:
		return skip(c, "no registry directory")
	}
	c.Name += " " + d.socketPath
	end := d.waiting(c.Name, fmt.Sprintf("waiting up to %v (--timeout) for GetInfo", d.cfg.Timeout))
	at := registration.Look(ctx, d.socketPath, d.cfg.Timeout)
	end()
	switch at.Kind() {
	case registration.AtNothing:
		return fail(c, "missing, so the driver is not registered: is the registrar running? Its log says what it is waiting for or why it stopped")
	case registration.AtUnknown:
		return fail(c, "cannot be inspected: "+pathErrorCause(at.Err))
	case registration.AtNotSocket:
		return fail(c, "is a "+sockfile.DescribeFileType(at.Mode())+", not a socket: kubelet ignores it and the registrar will not replace it; remove it")
	case registration.AtRefused:
		return fail(c, describeCallError(at.Err, d.cfg.Timeout)+": a stale socket left by a registrar that died; restart the registrar container, it replaces the socket")
	case registration.AtSilent:
		return fail(c, describeCallError(at.Err, d.cfg.Timeout)+" to GetInfo: whatever holds this socket is not a working registrar; restart the registrar container")
	}

	d.socketAnswered = true
	c.Detail = fmt.Sprintf("answers %s %q, endpoint %q, versions %v", at.Type, at.Driver, at.Endpoint, at.Versions)
	if at.Driver != d.driverName {
		c.note(Fail, fmt.Sprintf("it answers for driver %q, not %q: this path is served by another driver's registrar; find it", at.Driver, d.driverName))
	}
	if at.Type != registerapi.CSIPlugin {
		c.note(Fail, fmt.Sprintf("type %q: kubelet's CSI handler only takes %q", at.Type, registerapi.CSIPlugin))
	}
	// The rule of kubelet's CSI handler, which calls the same function.
	if _, err := version.HighestSupportedVersion(at.Versions); err != nil {
		c.note(Fail, fmt.Sprintf("kubelet's CSI handler refuses the versions: %v", err))
	}
	if want := d.cfg.KubeletRegistrationPath; want != "" && at.Endpoint != want {
		c.note(Warn, fmt.Sprintf("the endpoint is not --kubelet-registration-path %q: another instance or a different configuration serves this socket", want))
	}
	return c
}

// kubeletQuiet is how long kubelet may take to call GetInfo on a new socket:
// its plugin watcher reacts at once, its reconciler within a second.
const kubeletQuiet = 5 * time.Second

// 7. What kubelet made of the registration, as the registrar serving the
// socket saw it.
func (d *diagnosis) checkKubeletVerdict(ctx context.Context) Check {
	c := Check{Name: "kubelet's registration"}
	if !d.socketAnswered {
		return skip(c, "no registration socket that answers")
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	// The JSON of /status, through the socket: no HTTP endpoint needed.
	end := d.waiting(c.Name, fmt.Sprintf("waiting up to %v (--timeout) for the state of the registrar serving the socket", d.cfg.Timeout))
	st, err := registration.ReadStatus(ctx, d.socketPath)
	end()
	switch {
	case status.Code(err) == codes.Unimplemented:
		return skip(c, "the registrar serving the socket does not report its state (upstream's, or an older build): its log says whether kubelet registered the driver")
	case err != nil:
		return warn(c, "cannot read the registrar's state: "+describeCallError(err, d.cfg.Timeout))
	}
	return judgeRegistration(c, &st, time.Now(), d.cfg.RegistrationDir, d.nodeInfoFailed)
}

// judgeRegistration tells from the registrar's state st, at now, what
// kubelet made of the registration; nodeInfoFailed: the driver's
// NodeGetInfo failed in this diagnosis.
func judgeRegistration(c Check, st *registration.Status, now time.Time, dir string, nodeInfoFailed bool) Check {
	since := func(t *time.Time) string {
		if t == nil {
			return "at an unknown time"
		}
		return fmt.Sprintf("%s ago", now.Sub(*t).Round(time.Second))
	}
	when, reason := "", "" // of kubelet's last verdict
	if v := st.LastVerdict; v != nil {
		when, reason = " "+since(&v.Time), v.Reason
	}
	notWatched := fmt.Sprintf("kubelet has not called GetInfo on the socket published %s: kubelet does not watch %s (its --root-dir is elsewhere? this must be the host's <root-dir>/plugins_registry), or kubelet is not running", since(st.LastPublished), dir)
	switch st.State {
	case registration.Registered:
		return ok(c, "kubelet registered the driver through this socket"+when)
	case registration.Rejected:
		hint := ""
		if strings.Contains(reason, "no such file or directory") || strings.Contains(reason, "connection refused") {
			hint = ": kubelet cannot reach the driver at --kubelet-registration-path on the host; it must be the host path of the driver's socket"
		}
		times := "once"
		if st.Attempts != 1 {
			times = fmt.Sprintf("%d times in a row", st.Attempts)
		}
		return fail(c, fmt.Sprintf("kubelet rejected the driver%s (%s): %q%s", when, times, reason, hint))
	case registration.KubeletSilent:
		return fail(c, notWatched)
	case registration.WaitingForKubelet:
		switch {
		case st.LastGetInfo != nil && (st.LastPublished == nil || !st.LastGetInfo.Before(*st.LastPublished)):
			cause := "its CSI handler is still validating the driver, or failed without saying; kubelet's log says why"
			if nodeInfoFailed {
				cause = "its CSI handler waits for the driver's NodeGetInfo, or gave up on it, which failed here too (above): the likely cause"
			}
			return fail(c, fmt.Sprintf("kubelet called GetInfo %s but has sent no verdict: %s", since(st.LastGetInfo), cause))
		case st.LastPublished != nil && now.Sub(*st.LastPublished) < kubeletQuiet:
			return warn(c, fmt.Sprintf("the socket was published %s and kubelet has not called yet: run --diagnose again in a few seconds", since(st.LastPublished)))
		}
		return fail(c, notWatched)
	case registration.Superseded, registration.Deferring:
		return ok(c, "served by another instance of the registrar: "+st.Reason)
	}
	return fail(c, fmt.Sprintf("the registrar serving the socket reports %q: %s", st.State, st.Reason))
}

// 8. --kubelet-registration-path against --csi-address.
func (d *diagnosis) checkKubeletRegistrationPath(context.Context) Check {
	hostPath := d.cfg.KubeletRegistrationPath
	c := Check{Name: "kubelet registration path " + hostPath}
	if hostPath == "" {
		c.Name = "kubelet registration path"
		return fail(c, "--kubelet-registration-path is empty but required: set it to the driver socket's path on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock")
	}
	if !filepath.IsAbs(hostPath) {
		c.note(Warn, "not an absolute path: kubelet dials it as given, on the host")
	}
	if d.driverSocket == "" {
		c.note(OK, "not compared with --csi-address, which does not parse")
	} else if seen, mount, ok := hostPathOf(d.driverSocket); ok {
		// Where the mounts tell: the driver's socket as the host sees it.
		source := fmt.Sprintf("%s is %s on the host (/proc/self/mountinfo)", mount.Mountpoint, mount.Root)
		if d.kubeletRoot != "" && !strings.HasPrefix(seen, d.kubeletRoot+"/") && !strings.HasPrefix(hostPath, d.kubeletRoot+"/") {
			c.note(Warn, fmt.Sprintf("not under kubelet's root dir %s (from the registry's mount): drivers usually keep their socket in <root-dir>/plugins/<driver>/", d.kubeletRoot))
		}
		switch {
		case hostPath == seen:
			c.note(OK, "the driver's socket as the host sees it: "+source)
		case strings.HasSuffix(hostPath, seen):
			c.note(OK, fmt.Sprintf("the driver's socket as the host sees it: %s, within a file system mounted at %s on the host", source, strings.TrimSuffix(hostPath, seen)))
		default:
			c.note(Fail, fmt.Sprintf("not the driver's socket as the host sees it: %s, so kubelet must dial %s (or that path under where the file system is mounted on the host); kubelet fails to reach the driver and rejects it", source, seen))
		}
	} else if hostBase, podBase := filepath.Base(hostPath), filepath.Base(d.driverSocket); hostBase == podBase {
		c.note(OK, fmt.Sprintf("plausibly the driver's socket: same file name as --csi-address %s", d.driverSocket))
	} else {
		c.note(Warn, fmt.Sprintf("file name %q differs from --csi-address %s (%q): check that both name the driver's socket, on the host and in this pod",
			hostBase, d.driverSocket, podBase))
	}
	return c
}

// note raises c's verdict to outcome at least, and adds text to its detail.
func (c *Check) note(outcome Outcome, text string) {
	c.Outcome = max(c.Outcome, outcome)
	if c.Detail != "" {
		c.Detail += "; "
	}
	c.Detail += text
}

// call connects to the Unix socket at path once and makes rpc on that one
// connection, all within timeout (unixgrpc.Once: a diagnosis makes one
// attempt, and a failure to connect is a plain *unixgrpc.ConnectError).
func call[T any](ctx context.Context, path string, timeout time.Duration, rpc func(context.Context, *grpc.ClientConn) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := unixgrpc.Once(ctx, path)
	if err != nil {
		var none T
		return none, err
	}
	defer func() { _ = conn.Close() }()
	return rpc(ctx, conn)
}

func pluginInfo(ctx context.Context, conn *grpc.ClientConn) (*csi.GetPluginInfoResponse, error) {
	return csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
}

func nodeInfo(ctx context.Context, conn *grpc.ClientConn) (*csi.NodeGetInfoResponse, error) {
	return csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
}

// describeCallError says in a few words how a call failed.
func describeCallError(err error, timeout time.Duration) string {
	if ce, ok := errors.AsType[*unixgrpc.ConnectError](err); ok {
		if opErr, ok := errors.AsType[*net.OpError](ce.Err); ok && opErr.Err != nil {
			// "connect: connection refused" without the repeated path.
			return "cannot connect (" + opErr.Err.Error() + ")"
		}
		return "cannot connect (" + ce.Err.Error() + ")"
	}
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Sprintf("no answer within %v", timeout)
	case codes.Canceled:
		return "canceled"
	default:
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
}

// hostPathOf tells where a file of this container is on the host: the root,
// within its file system, of the mount that holds it, then the rest of the
// path. That is the host's path on the host's root file system, a suffix of
// it on another (mounted at /var/lib/kubelet, say). ok is false when the
// mount's root is "/" (the container's own file system, or a whole one).
func hostPathOf(path string) (hostPath string, mount *mountinfo.Info, ok bool) {
	path = filepath.Clean(path)
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(path))
	if err != nil || len(mounts) == 0 {
		return "", nil, false
	}
	// The mount nearest to the file; of two at one place, the one listed
	// last, mounted over the other.
	slices.Reverse(mounts)
	nearest := slices.MaxFunc(mounts, func(a, b *mountinfo.Info) int {
		return cmp.Compare(len(a.Mountpoint), len(b.Mountpoint))
	})
	if nearest.Root == "/" {
		return "", nil, false
	}
	rest := strings.TrimPrefix(path, nearest.Mountpoint)
	return filepath.Join(nearest.Root, rest), nearest, true
}

func ok(c Check, detail string) Check   { c.Outcome, c.Detail = OK, detail; return c }
func warn(c Check, detail string) Check { c.Outcome, c.Detail = Warn, detail; return c }
func fail(c Check, detail string) Check { c.Outcome, c.Detail = Fail, detail; return c }
func skip(c Check, reason string) Check { c.Outcome, c.Detail = Skip, "skipped: "+reason; return c }

// pathErrorCause drops the operation and path that the check's line
// already shows: "permission denied" rather than "open /x: permission denied".
func pathErrorCause(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
