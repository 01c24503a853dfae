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

// Found is what a check of the registration path found there.
type Found int

const (
	// NotLooked: the path was not looked at, as there is none yet (the
	// driver is not known: State WaitingForDriver) or Run has returned
	// (State Stopped).
	NotLooked Found = iota
	// FoundOurs: the socket this process published.
	FoundOurs
	// FoundOther: a live socket of the same driver that another instance
	// published, typically the newer pod of a rolling update.
	FoundOther
	// FoundNothing: nothing is at the path.
	FoundNothing
	// FoundBroken: something that is not a registration socket for this
	// driver, or that cannot be inspected.
	FoundBroken
)

func (f Found) String() string {
	switch f {
	case NotLooked:
		return "not looked at"
	case FoundOurs:
		return "ours"
	case FoundOther:
		return "another instance's"
	case FoundNothing:
		return "nothing"
	case FoundBroken:
		return "broken"
	}
	return fmt.Sprintf("Found(%d)", int(f))
}

// Health is the outcome of a check of the registration path: the
// registration's State when the check was made, and what the path held.
type Health struct {
	State State
	Found Found
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
		return Health{state, NotLooked, "the registration server has stopped"}
	case path == "":
		return Health{state, NotLooked, "waiting for the CSI driver"}
	}
	at := inspect(path)
	switch {
	case at.missing:
		return Health{state, FoundNothing, fmt.Sprintf("the registration socket %s does not exist", path)}
	case at.err != nil:
		return Health{state, FoundBroken, fmt.Sprintf("cannot inspect %s: %v", path, at.err)}
	case !at.socket:
		return Health{state, FoundBroken, fmt.Sprintf("%s is a %s, not a socket", path, DescribeFileType(at.info.Mode()))}
	case pub != nil && pub.sock.isOurs(at.info):
		return Health{state, FoundOurs, fmt.Sprintf("serving %s", path)}
	}
	found, reason := s.identity.check(ctx, at.info, path, shared.st.driverName, s.cfg.CheckTimeout)
	return Health{state, found, reason}
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
	found  Found
	reason string
}

func (c *foreignCache) check(ctx context.Context, fi fs.FileInfo, path, driverName string, timeout time.Duration) (Found, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file != nil && os.SameFile(c.file, fi) && c.file.ModTime().Equal(fi.ModTime()) {
		return c.found, c.reason
	}
	name, err := askName(ctx, path, timeout)
	switch {
	case ctx.Err() != nil:
		// The prober gave up; that says nothing about the socket.
		return FoundBroken, fmt.Sprintf("check of %s cancelled: %v", path, ctx.Err())
	case err != nil:
		// Not remembered: the failure may be passing (a handover between
		// two instances), and a dead socket is replaced soon anyway.
		return FoundBroken, fmt.Sprintf("%s was published by another process and does not answer GetInfo: %v", path, err)
	case name != driverName:
		c.found, c.reason = FoundBroken, fmt.Sprintf("%s was published by another process for driver %q, not %q", path, name, driverName)
	default:
		c.found, c.reason = FoundOther, fmt.Sprintf("%s was published by another instance of %s", path, driverName)
	}
	c.file = fi
	return c.found, c.reason
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
