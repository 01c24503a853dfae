package registration

// What is at the registration path: one answer (lookAt) for the loop's
// looks and claims, and for Health.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// atKind classifies what is at the path.
type atKind int

const (
	atNothing   atKind = iota // no file
	atOurs                    // the socket of the current publication
	atOwner                   // the socket of the instance followed
	atNotSocket               // a file that is not a socket
	atUnknown                 // cannot be inspected
	atSocket                  // another socket, not asked (a claim where sockets cannot be handed over)
	atHandsOver               // a registrar that can hand its socket over (asked by a claim only)
	atLive                    // a socket that answered GetInfo: Driver, Endpoint
	atRefused                 // a socket that refuses connections
	atSilent                  // a socket that accepts and does not answer GetInfo
)

// At is what is at the registration path: plain values, which a look
// finds and the machine decides on.
type At struct {
	kind atKind
	path string
	File sockfile.ID
	mode fs.FileMode
	// Driver and Endpoint are what a socket another process published
	// answered to GetInfo.
	Driver, Endpoint string
	// Err is why the path could not be inspected, or why its socket did
	// not answer.
	Err error
}

// lookAt tells what is at path. ours is the current publication's socket
// file, owner the one of the instance followed (zero when none). Any
// other socket is asked GetInfo, and whether it accepts connections when
// it does not answer; for a claim, first whether it can hand the socket
// over.
func lookAt(ctx context.Context, path string, ours, owner sockfile.ID, timeout time.Duration, claim bool) At {
	id, mode, err := sockfile.Lstat(path)
	at := At{path: path, File: id, mode: mode, Err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		at.kind, at.Err = atNothing, nil
		return at
	case err != nil:
		at.kind = atUnknown
		return at
	case ours != sockfile.ID{} && id == ours:
		at.kind = atOurs
		return at
	case mode.Type() != fs.ModeSocket:
		at.kind = atNotSocket
		return at
	case owner != sockfile.ID{} && id == owner:
		at.kind = atOwner
		return at
	case claim && !handover.Supported:
		at.kind = atSocket
		return at
	}
	if claim {
		switch can, err := canHandOver(ctx, path, timeout); {
		case can:
			at.kind = atHandsOver
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
	at.kind, at.Driver, at.Endpoint = atLive, info.Name, info.Endpoint
	return at
}

// unanswered classifies a socket that did not answer.
func (at At) unanswered(ctx context.Context, timeout time.Duration) At {
	switch {
	case ctx.Err() != nil:
		at.kind = atUnknown
	case sockfile.Answers(at.path, timeout):
		at.kind = atSilent
	default:
		at.kind = atRefused
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
	case atLive:
		if at.Driver != driver {
			return FoundBroken, fmt.Sprintf("%s was published by another process for driver %q, not %q", at.path, at.Driver, driver)
		}
		return FoundOther, fmt.Sprintf("%s was published by another instance of %s", at.path, driver)
	case atOwner, atHandsOver:
		return FoundOther, fmt.Sprintf("%s was published by another instance of %s", at.path, driver)
	case atNotSocket:
		return FoundBroken, fmt.Sprintf("%s is a %s, not a socket", at.path, sockfile.DescribeFileType(at.mode))
	case atSocket:
		return FoundBroken, fmt.Sprintf("%s is a socket that another process published", at.path)
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
	m := &s.shared.Load().m
	switch {
	case m.state == Stopped:
		return Health{m.state, NotLooked, "the registration server has stopped"}
	case m.claim != "" && m.path == "":
		return Health{m.state, NotLooked, "claiming the registration socket for " + m.claim}
	case m.path == "":
		return Health{m.state, NotLooked, "waiting for the CSI driver"}
	}
	at := lookAt(ctx, m.path, m.ours, m.owner, s.cfg.CheckTimeout, false)
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
