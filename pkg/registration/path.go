package registration

// What is at the registration path: one answer (lookAt) for the loop's
// looks and claims, which Health reuses for the liveness probe.

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

// describe says what at is, in one line, and whether the liveness probe
// counts it healthy: this instance's socket, or one another instance of
// the driver serves (restarting this one would take the registration back
// from it).
func (at At) describe(driver string) (reason string, healthy bool) {
	switch at.kind {
	case atNothing:
		return fmt.Sprintf("the registration socket %s does not exist", at.path), false
	case atOurs:
		return "serving " + at.path, true
	case atLive:
		if at.Driver != driver {
			return fmt.Sprintf("%s was published by another process for driver %q, not %q", at.path, at.Driver, driver), false
		}
		return fmt.Sprintf("%s was published by another instance of %s", at.path, driver), true
	case atOwner, atHandsOver:
		return fmt.Sprintf("%s was published by another instance of %s", at.path, driver), true
	case atNotSocket:
		return fmt.Sprintf("%s is a %s, not a socket", at.path, sockfile.DescribeFileType(at.mode)), false
	case atSocket:
		return fmt.Sprintf("%s is a socket that another process published", at.path), false
	case atRefused, atSilent:
		return fmt.Sprintf("%s was published by another process and does not answer GetInfo: %v", at.path, at.Err), false
	}
	return fmt.Sprintf("cannot inspect %s: %v", at.path, at.Err), false
}

// Health re-checks the registration path for the liveness probe, as
// upstream's /healthz does, at the cost of one lstat: what a socket there
// answers is what the machine's last look at that file found (it looks at
// each change at the path). It says in one line what the path holds; its
// error says why that is not healthy, and wraps fs.ErrNotExist when
// nothing is there.
func (s *Server) Health() (string, error) {
	m := &s.shared.Load().m
	switch {
	case m.state == Stopped:
		return "", errors.New("the registration server has stopped")
	case m.path == "":
		return m.status().Reason, nil // waiting for the driver, or claiming its path
	}
	id, mode, err := sockfile.Lstat(m.path)
	at := m.at
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("the registration socket %s does not exist: %w", m.path, err)
	case err != nil:
		at = At{kind: atUnknown, path: m.path, Err: err}
	case mode.Type() != fs.ModeSocket:
		at = At{kind: atNotSocket, path: m.path, mode: mode}
	case id == m.ours:
		at = At{kind: atOurs, path: m.path}
	case id == m.owner:
		at = At{kind: atOwner, path: m.path}
	case id != m.at.File:
		return fmt.Sprintf("%s holds a socket that this instance is about to look at", m.path), nil
	}
	reason, healthy := at.describe(m.name)
	if !healthy {
		return "", errors.New(reason)
	}
	return reason, nil
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
