package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// State is what the registration path holds, seen from this process.
type State int

const (
	// Serving: the path holds the socket this process published and
	// serves.
	Serving State = iota
	// Superseded: the path holds a socket for the same driver published
	// by another instance, typically the newer pod of a rolling update.
	Superseded
	// Missing: nothing is at the path.
	Missing
	// Broken: something at the path is not a registration socket for
	// this driver, or cannot be inspected.
	Broken
	// Stopped: this process no longer serves kubelet.
	Stopped
	// Starting: the socket is not published yet.
	Starting
)

func (s State) String() string {
	switch s {
	case Serving:
		return "serving"
	case Superseded:
		return "superseded"
	case Missing:
		return "missing"
	case Broken:
		return "broken"
	case Stopped:
		return "stopped"
	case Starting:
		return "starting"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Health is the outcome of a check of the registration socket.
type Health struct {
	State State
	// Reason says what was found, in one line.
	Reason string
}

// Health checks the registration path. It costs one lstat; a socket that
// another process published is asked for GetInfo once per file, not once
// per check.
func (s *Server) Health(ctx context.Context) Health {
	s.mu.Lock()
	sock, stopped := s.sock, s.stopped
	s.mu.Unlock()
	if stopped {
		return Health{Stopped, "the registration server has stopped"}
	}
	if sock == nil {
		return Health{Starting, fmt.Sprintf("the registration socket %s is not published yet", s.path)}
	}
	fi, err := os.Lstat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Health{Missing, fmt.Sprintf("the registration socket %s does not exist", s.path)}
	case err != nil:
		return Health{Broken, fmt.Sprintf("cannot inspect %s: %v", s.path, err)}
	case fi.Mode().Type() != fs.ModeSocket:
		return Health{Broken, fmt.Sprintf("%s is a %s, not a socket", s.path, describeMode(fi.Mode()))}
	case sock.isOurs(fi):
		return Health{Serving, fmt.Sprintf("serving %s", s.path)}
	}
	return s.identity.check(ctx, fi, s.path, s.cfg.DriverName, s.cfg.CheckTimeout)
}

// foreignCache remembers the verdict on a socket this process did not
// create, so probes do not dial it again until the file changes.
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
		return Health{Broken, fmt.Sprintf("check of %s cancelled: %v", path, ctx.Err())}
	case err != nil:
		c.health = Health{Broken, fmt.Sprintf("%s was published by another process and does not answer GetInfo: %v", path, err)}
	case name != driverName:
		c.health = Health{Broken, fmt.Sprintf("%s was published by another process for driver %q, not %q", path, name, driverName)}
	default:
		c.health = Health{Superseded, fmt.Sprintf("%s was published by another instance of %s", path, driverName)}
	}
	c.file = fi
	return c.health
}

func askName(ctx context.Context, path string, timeout time.Duration) (string, error) {
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return "", err
	}
	return info.Name, nil
}
