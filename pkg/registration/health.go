package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
)

// SocketState is what the registration path holds, seen from this process.
type SocketState int

const (
	// SocketServing: the path holds the socket this process published.
	SocketServing SocketState = iota
	// SocketSuperseded: the path holds a socket for the same driver
	// published by another instance, typically the newer pod of a
	// rolling update.
	SocketSuperseded
	// SocketMissing: nothing is at the path.
	SocketMissing
	// SocketBroken: something at the path is not a registration socket
	// for this driver, or cannot be inspected.
	SocketBroken
	// SocketStopped: this process no longer serves kubelet.
	SocketStopped
	// SocketStarting: the driver is not known yet, so neither is the path.
	SocketStarting
)

func (s SocketState) String() string {
	switch s {
	case SocketServing:
		return "serving"
	case SocketSuperseded:
		return "superseded"
	case SocketMissing:
		return "missing"
	case SocketBroken:
		return "broken"
	case SocketStopped:
		return "stopped"
	case SocketStarting:
		return "starting"
	}
	return fmt.Sprintf("SocketState(%d)", int(s))
}

// Health is the outcome of a check of the registration socket.
type Health struct {
	State SocketState
	// Reason says what was found, in one line.
	Reason string
}

// Health checks the registration path. It costs one lstat; a live socket
// that another process published is asked for GetInfo once per file, not
// once per check, as long as the owner's connection holds; one that does
// not answer is asked again at each check.
func (s *Server) Health(ctx context.Context) Health {
	shared := s.shared.Load()
	pub, state, path := shared.pub, shared.st.state, shared.st.socketPath
	switch {
	case state == Stopped:
		return Health{SocketStopped, "the registration server has stopped"}
	case path == "":
		return Health{SocketStarting, "waiting for the CSI driver"}
	}
	found := inspect(path)
	switch {
	case found.missing:
		return Health{SocketMissing, fmt.Sprintf("the registration socket %s does not exist", path)}
	case found.err != nil:
		return Health{SocketBroken, fmt.Sprintf("cannot inspect %s: %v", path, found.err)}
	case !found.socket:
		return Health{SocketBroken, fmt.Sprintf("%s is a %s, not a socket", path, DescribeFileType(found.info.Mode()))}
	case pub != nil && pub.sock.isOurs(found.info):
		return Health{SocketServing, fmt.Sprintf("serving %s", path)}
	}
	return s.identity.check(ctx, found.info, path, shared.st.driverName, s.cfg.CheckTimeout)
}

// found is what is at a path.
type found struct {
	missing bool
	socket  bool
	info    fs.FileInfo
	err     error
}

func inspect(path string) found {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return found{missing: true}
	case err != nil:
		return found{err: err}
	}
	return found{info: fi, socket: fi.Mode().Type() == fs.ModeSocket}
}

// foreignCache remembers the outcome of the check of a live socket this
// process did not create, so probes do not dial it again until the file
// changes or the loop lost its connection to the socket's owner.
type foreignCache struct {
	mu     sync.Mutex
	file   fs.FileInfo
	health Health
}

func (c *foreignCache) check(ctx context.Context, fi fs.FileInfo, path, driverName string, timeout time.Duration) Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file != nil && os.SameFile(c.file, fi) && c.file.ModTime().Equal(fi.ModTime()) {
		return c.health
	}
	name, err := askName(ctx, path, timeout)
	switch {
	case ctx.Err() != nil:
		// The prober gave up; that says nothing about the socket.
		return Health{SocketBroken, fmt.Sprintf("check of %s cancelled: %v", path, ctx.Err())}
	case err != nil:
		// Not remembered: the failure may be passing (a handover between
		// two instances), and a dead socket is replaced soon anyway.
		return Health{SocketBroken, fmt.Sprintf("%s was published by another process and does not answer GetInfo: %v", path, err)}
	case name != driverName:
		c.health = Health{SocketBroken, fmt.Sprintf("%s was published by another process for driver %q, not %q", path, name, driverName)}
	default:
		c.health = Health{SocketSuperseded, fmt.Sprintf("%s was published by another instance of %s", path, driverName)}
	}
	c.file = fi
	return c.health
}

// forget drops the outcome, so that the next check asks the socket again.
func (c *foreignCache) forget() {
	c.mu.Lock()
	c.file = nil
	c.mu.Unlock()
}

// askName asks the registration socket at path for the driver's name.
func askName(ctx context.Context, path string, timeout time.Duration) (string, error) {
	info, err := askInfo(ctx, path, timeout)
	if err != nil {
		return "", err
	}
	return info.Name, nil
}

// askInfo calls GetInfo on the registration socket at path.
func askInfo(ctx context.Context, path string, timeout time.Duration) (*registerapi.PluginInfo, error) {
	conn, err := unixgrpc.NewClient(path)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
}

// calledByRegistrar tells whether a call came from the registrar itself:
// another instance checking the socket at the path, or --diagnose, which
// set unixgrpc.UserAgent; gRPC puts it before its own, as
// "<UserAgent> grpc-go/<version>". Those are not kubelet's calls.
func calledByRegistrar(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, agent := range md.Get("user-agent") {
		if agent == unixgrpc.UserAgent || strings.HasPrefix(agent, unixgrpc.UserAgent+" ") {
			return true
		}
	}
	return false
}
