package registration

// Where the registration path is, and one classifier of what is at it, for
// the loop, Health and --diagnose.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// MaxSocketPathLength: Linux's sun_path holds 108 bytes with the NUL.
const MaxSocketPathLength = 107

// SocketPath is where kubelet expects the registration socket of a driver.
func SocketPath(dir, driverName string) string {
	return filepath.Join(dir, driverName+"-reg.sock")
}

// CheckDir tells whether dir can hold registration sockets.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return dirError(fmt.Errorf("registration directory %q does not exist: mount the host's kubelet plugin registry (usually /var/lib/kubelet/plugins_registry) there", dir))
	case err != nil:
		return dirError(fmt.Errorf("registration directory %q cannot be read: %w", dir, err))
	case !fi.IsDir():
		return dirError(fmt.Errorf("registration directory %q is not a directory (%s): it must be kubelet's plugin registry directory", dir, sockfile.DescribeFileType(fi.Mode())))
	}
	return nil
}

// Kind classifies what is at the path.
type Kind int

const (
	AtNothing   Kind = iota // no file
	AtOurs                  // the socket of the current publication
	AtOwner                 // the socket of the instance followed
	AtNotSocket             // a file that is not a socket
	AtUnknown               // cannot be inspected
	AtSocket                // another socket, not asked (a claim where sockets cannot be handed over)
	AtHandsOver             // a registrar that can hand its socket over (asked by a claim only)
	AtLive                  // a socket that answered GetInfo: Driver, Endpoint
	AtRefused               // a socket that refuses connections
	AtSilent                // a socket that accepts and does not answer GetInfo
)

// At is what is at the registration path, as plain values.
type At struct {
	kind Kind
	path string
	File sockfile.ID
	mode fs.FileMode
	// Driver, Endpoint, Type and Versions: another process's GetInfo answer.
	Driver, Endpoint, Type string
	Versions               []string
	Err                    error
}

// Kind says what kind of file is at the path.
func (at At) Kind() Kind { return at.kind }

// Mode is the file's mode.
func (at At) Mode() fs.FileMode { return at.mode }

// Look tells what the registrar's own looks would find at path.
func Look(ctx context.Context, path string, timeout time.Duration) At {
	return lookAt(ctx, path, sockfile.ID{}, sockfile.ID{}, timeout, false)
}

// fileAt tells what is at path from the file alone; AtSocket needs a call.
func fileAt(path string, ours, owner sockfile.ID) At {
	id, mode, err := sockfile.Lstat(path)
	at := At{path: path, File: id, mode: mode, Err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		at.kind, at.Err = AtNothing, nil
	case err != nil:
		at.kind = AtUnknown
	case ours != sockfile.ID{} && id == ours:
		at.kind = AtOurs
	case mode.Type() != fs.ModeSocket:
		at.kind = AtNotSocket
	case owner != sockfile.ID{} && id == owner:
		at.kind = AtOwner
	default:
		at.kind = AtSocket
	}
	return at
}

// lookAt asks another socket GetInfo (for a claim, first whether it can
// hand over), and whether it accepts connections when it does not answer.
func lookAt(ctx context.Context, path string, ours, owner sockfile.ID, timeout time.Duration, claim bool) At {
	at := fileAt(path, ours, owner)
	if at.kind != AtSocket || claim && !handover.Supported {
		return at
	}
	if claim {
		switch can, err := canHandOver(ctx, path, timeout); {
		case can:
			at.kind = AtHandsOver
			return at
		case err != nil:
			at.Err = err
			return at.unanswered(ctx, timeout)
		}
	}
	var info *registerapi.PluginInfo
	if info, at.Err = askInfo(ctx, path, timeout); at.Err != nil {
		return at.unanswered(ctx, timeout)
	}
	at.kind, at.Driver, at.Endpoint = AtLive, info.Name, info.Endpoint
	at.Type, at.Versions = info.Type, info.SupportedVersions
	return at
}

func (at At) unanswered(ctx context.Context, timeout time.Duration) At {
	switch {
	case ctx.Err() != nil:
		at.kind = AtUnknown
	case errors.As(at.Err, new(*unixgrpc.ConnectError)) || !sockfile.Answers(at.path, timeout):
		at.kind = AtRefused
	default:
		at.kind = AtSilent
	}
	return at
}

// describe says what at is, and whether the liveness probe counts it
// healthy: restarting this instance would not help another of the driver.
func (at At) describe(driver string) (reason string, healthy bool) {
	switch at.kind {
	case AtNothing:
		return fmt.Sprintf("the registration socket %s does not exist", at.path), false
	case AtOurs:
		return "serving " + at.path, true
	case AtLive, AtOwner, AtHandsOver:
		if at.kind == AtLive && at.Driver != driver {
			return fmt.Sprintf("%s was published by another process for driver %q, not %q", at.path, at.Driver, driver), false
		}
		return fmt.Sprintf("%s was published by another instance of %s", at.path, driver), true
	case AtNotSocket:
		return fmt.Sprintf("%s is a %s, not a socket", at.path, sockfile.DescribeFileType(at.mode)), false
	case AtSocket:
		return fmt.Sprintf("%s is a socket that another process published", at.path), false
	case AtRefused, AtSilent:
		return fmt.Sprintf("%s was published by another process and does not answer GetInfo: %v", at.path, at.Err), false
	}
	return fmt.Sprintf("cannot inspect %s: %v", at.path, at.Err), false
}

// Health re-checks the path for the liveness probe with one lstat; a
// socket there answers what the last look at that file found. Its error
// wraps fs.ErrNotExist when nothing is there.
func (s *Server) Health() (string, error) {
	m := &s.shared.Load().m
	switch {
	case m.state == Stopped:
		return "", errors.New("the registration server has stopped")
	case m.path == "":
		return m.status().Reason, nil // waiting for the driver, or claiming its path
	}
	at := fileAt(m.path, m.ours, m.owner)
	switch {
	case at.kind == AtNothing:
		return "", fmt.Errorf("the registration socket %s does not exist: %w", m.path, fs.ErrNotExist)
	case at.kind != AtSocket:
	case at.File != m.at.File:
		return fmt.Sprintf("%s holds a socket that this instance is about to look at", m.path), nil
	default:
		at = m.at
	}
	reason, healthy := at.describe(m.name)
	if !healthy {
		return "", errors.New(reason)
	}
	return reason, nil
}

func askInfo(ctx context.Context, path string, timeout time.Duration) (*registerapi.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := unixgrpc.Once(ctx, path)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
}

// calledByRegistrar: another instance or --diagnose, not kubelet; gRPC
// puts unixgrpc.UserAgent before its own.
func calledByRegistrar(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, agent := range md.Get("user-agent") {
		if agent == unixgrpc.UserAgent || strings.HasPrefix(agent, unixgrpc.UserAgent+" ") {
			return true
		}
	}
	return false
}
