package registration

// What is at the registration path: one answer (lookAt) for the loop,
// Health, Status and the retry after a shortage.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// atKind classifies what is at the path.
type atKind int

const (
	atNothing     atKind = iota // no file
	atOurs                      // the socket of the current publication
	atOwner                     // the socket of the instance followed
	atNotSocket                 // a file that is not a socket
	atUnknown                   // cannot be inspected
	atSocket                    // another socket, not asked yet (lookAtFile)
	atLive                      // another instance of the same driver
	atOtherDriver               // a registration socket of another driver
	atRefused                   // a socket that refuses connections
	atSilent                    // a socket that accepts and does not answer GetInfo
)

// At is what is at the registration path.
type At struct {
	kind atKind
	path string
	File fs.FileInfo
	// Driver is the driver a socket another process published serves.
	Driver string
	// Err is why the path could not be inspected, or why its socket did
	// not answer.
	Err error
}

// lookAt tells what is at path. ours is the current publication's socket
// file, owner the one of the instance followed (nil when none). Any other
// socket is asked its driver's name, and whether it accepts connections
// when it does not answer.
func lookAt(ctx context.Context, path string, ours, owner fs.FileInfo, timeout time.Duration) At {
	at := lookAtFile(path, ours, owner)
	if at.kind != atSocket {
		return at
	}
	var info *registerapi.PluginInfo
	info, at.Err = askInfo(ctx, path, timeout)
	switch {
	case at.Err == nil:
		at.kind, at.Driver = atLive, info.Name
	case ctx.Err() != nil:
		at.kind = atUnknown
	case sockfile.Answers(path, timeout):
		at.kind = atSilent
	default:
		at.kind = atRefused
	}
	return at
}

// lookAtFile is lookAt without a call: it costs one lstat, and another
// socket stays atSocket.
func lookAtFile(path string, ours, owner fs.FileInfo) At {
	fi, err := os.Lstat(path)
	at := At{kind: atSocket, path: path, File: fi, Err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		at.kind, at.Err = atNothing, nil
	case err != nil:
		at.kind = atUnknown
	case ours != nil && os.SameFile(fi, ours):
		at.kind = atOurs
	case fi.Mode().Type() != fs.ModeSocket:
		at.kind = atNotSocket
	case owner != nil && os.SameFile(fi, owner):
		at.kind = atOwner
	}
	return at
}

// ofDriver resolves atLive against the driver this instance serves.
func (at At) ofDriver(name string) At {
	if at.kind == atLive && at.Driver != name {
		at.kind = atOtherDriver
	}
	return at
}

// Found is what a check of the registration path found there.
type Found int

const (
	// NotLooked: the path was not looked at, as there is none yet (the
	// driver is not known, or the loop claims the path it named: State
	// WaitingForDriver) or Run has returned (State Stopped).
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

// Found is what the probes report of at, with its reason in one line.
func (at At) Found(driver string) (Found, string) {
	switch at.kind {
	case atNothing:
		return FoundNothing, fmt.Sprintf("the registration socket %s does not exist", at.path)
	case atOurs:
		return FoundOurs, "serving " + at.path
	case atOwner, atLive:
		return FoundOther, fmt.Sprintf("%s was published by another instance of %s", at.path, driver)
	case atNotSocket:
		return FoundBroken, fmt.Sprintf("%s is a %s, not a socket", at.path, sockfile.DescribeFileType(at.File.Mode()))
	case atSocket:
		return FoundBroken, fmt.Sprintf("%s is a socket that another process published", at.path)
	case atOtherDriver:
		return FoundBroken, fmt.Sprintf("%s was published by another process for driver %q, not %q", at.path, at.Driver, driver)
	case atRefused, atSilent:
		return FoundBroken, fmt.Sprintf("%s was published by another process and does not answer GetInfo: %v", at.path, at.Err)
	}
	return FoundBroken, fmt.Sprintf("cannot inspect %s: %v", at.path, at.Err)
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
// that another process published is asked for GetInfo, unless it is the
// one of the instance the loop follows while standing aside: its
// connection to it says that it lives.
func (s *Server) Health(ctx context.Context) Health {
	shared := s.shared.Load()
	m := &shared.m
	switch {
	case m.state == Stopped:
		return Health{m.state, NotLooked, "the registration server has stopped"}
	case m.claim != "" && m.path == "":
		return Health{m.state, NotLooked, "claiming the registration socket for " + m.claim}
	case m.path == "":
		return Health{m.state, NotLooked, "waiting for the CSI driver"}
	}
	at := lookAt(ctx, m.path, shared.pub.file(), m.owner, s.cfg.CheckTimeout).ofDriver(m.name)
	found, reason := at.Found(m.name)
	return Health{m.state, found, reason}
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
