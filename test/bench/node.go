package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	driverName = "bench.csi.example.com"
	// endpoint is what the registrar tells kubelet; nothing dials it here.
	endpoint = "/var/lib/kubelet/plugins/bench.csi.example.com/csi.sock"
	// stepTimeout bounds each wait; a figure never comes near it.
	stepTimeout = 30 * time.Second
)

// node is one fresh temporary directory standing for a node: the driver's
// socket directory and kubelet's plugin registry, with the processes
// started in it.
type node struct {
	cfg        config
	dir        string
	driverSock string // where the registrar looks for the driver
	registry   string
	regSock    string
	httpAddr   string
	// registrarArgs are added to the registrar's flags, registrarEnv to
	// its environment.
	registrarArgs, registrarEnv []string
	// launcher, when set, is the command that runs the registrar: the
	// registrar's path and flags are appended to it.
	launcher []string
	// upstream runs upstream's registrar (-upstream) instead of this one.
	upstream bool

	driver, registrar *process
}

func newNode(cfg config) (*node, error) {
	dir, err := os.MkdirTemp("", "rb")
	if err != nil {
		return nil, err
	}
	n := &node{
		cfg:        cfg,
		dir:        dir,
		driverSock: filepath.Join(dir, "csi", "csi.sock"),
		registry:   filepath.Join(dir, "registry"),
	}
	n.regSock = filepath.Join(n.registry, driverName+"-reg.sock")
	for _, d := range []string{filepath.Dir(n.driverSock), n.registry} {
		if err := os.Mkdir(d, 0o700); err != nil {
			n.close()
			return nil, err
		}
	}
	if len(n.regSock) > 107 {
		n.close()
		return nil, fmt.Errorf("%s is too long for a Unix socket: set TMPDIR to a shorter directory", n.regSock)
	}
	if n.httpAddr, err = freeTCPAddress(); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// close stops the registrar, then the driver, and removes the directory.
func (n *node) close() {
	if n.registrar != nil {
		n.registrar.stop()
	}
	if n.driver != nil {
		n.driver.stop()
	}
	_ = os.RemoveAll(n.dir)
}

// startDriver starts the test driver listening at path and waits until it
// is ready: it has answered GetPluginInfo once, so that its own first-call
// costs do not count in the registrar's figures.
//
// It returns the time from exec until the driver's socket accepted a
// connection: the driver links the same gRPC and CSI libraries as the
// registrar and listens at once, which makes it a reference for the
// registrar's own start-up.
func (n *node) startDriver(ctx context.Context, path string) (time.Duration, error) {
	waiter, err := newSocketWaiter(path)
	if err != nil {
		return 0, err
	}
	defer waiter.Close()
	started := time.Now()
	n.driver, err = start("mockdriver", nil, n.cfg.driver, "--endpoint="+path, "--name="+driverName)
	if err != nil {
		return 0, err
	}
	listening, err := waiter.wait(ctx, stepTimeout)
	if err != nil {
		return 0, n.driver.failed("the test driver did not listen", err)
	}
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if _, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil {
		return 0, n.driver.failed("the test driver did not answer GetPluginInfo", err)
	}
	return listening.Sub(started), nil
}

// startRegistrar starts the registrar with an HTTP endpoint, as the example
// DaemonSet in deploy/ does, at the default verbosity and with the
// environment of its image (-registrar-env), and returns once exec has
// returned.
//
// Upstream's registrar is started with the flags both binaries have,
// without -registrar-env: its image sets no environment.
func (n *node) startRegistrar() (err error) {
	args := []string{
		"--csi-address=" + n.driverSock,
		"--kubelet-registration-path=" + endpoint,
		"--plugin-registration-path=" + n.registry,
		"--http-endpoint=" + n.httpAddr,
	}
	if n.upstream {
		n.registrar, err = start("upstream registrar", nil, n.cfg.upstream, args...)
		return err
	}
	args = append(append(args, "--termination-message-path="), n.registrarArgs...)
	env := append(slices.Clip(n.cfg.registrarEnv), n.registrarEnv...)
	if len(n.launcher) > 0 {
		n.registrar, err = start("registrar", env, n.launcher[0], slices.Concat(n.launcher[1:], []string{n.cfg.registrar}, args)...)
		return err
	}
	n.registrar, err = start("registrar", env, n.cfg.registrar, args...)
	return err
}

// registerAsKubelet does what kubelet's plugin watcher does with a new
// registration socket: GetInfo, then NotifyRegistrationStatus(true). It then
// waits until /readyz confirms the registration. Upstream's registrar
// serves no /readyz: its registration is done when
// NotifyRegistrationStatus has returned.
func (n *node) registerAsKubelet(ctx context.Context) error {
	if err := n.notifyAsKubelet(ctx, nil); err != nil {
		return err
	}
	if n.upstream {
		return nil
	}
	return n.waitReady(ctx)
}

// notifyAsKubelet calls GetInfo, then before (unless nil), then
// NotifyRegistrationStatus(true).
func (n *node) notifyAsKubelet(ctx context.Context, before func() error) error {
	conn, err := grpc.NewClient("unix:"+n.regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return n.registrar.failed("GetInfo", err)
	}
	if info.Name != driverName || info.Endpoint != endpoint {
		return fmt.Errorf("GetInfo answered name %q, endpoint %q; want %q, %q", info.Name, info.Endpoint, driverName, endpoint)
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		return n.registrar.failed("NotifyRegistrationStatus", err)
	}
	return nil
}

// waitReady polls /readyz until it answers 200, for stepTimeout at most.
func (n *node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	url := "http://" + n.httpAddr + "/readyz"
	// No connection is left open for the figures that follow.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	delay := time.Millisecond
	for {
		code, err := get(ctx, client, url)
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return n.registrar.failed("waiting for /readyz", errors.Join(ctx.Err(), err))
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// get makes one GET request and reads the whole answer.
func get(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, errors.Join(err, resp.Body.Close())
}

// registered starts the driver and the registrar, with registrarArgs added
// to its flags, in a fresh node and registers the driver as kubelet would.
func registered(ctx context.Context, cfg config, registrarArgs ...string) (*node, error) {
	return registeredNode(ctx, cfg, func(n *node) { n.registrarArgs = registrarArgs })
}

// registeredUpstream is registered for upstream's registrar.
func registeredUpstream(ctx context.Context, cfg config) (*node, error) {
	return registeredNode(ctx, cfg, func(n *node) { n.upstream = true })
}

func registeredNode(ctx context.Context, cfg config, setup func(*node)) (*node, error) {
	n, err := started(ctx, cfg, setup)
	if err != nil {
		return nil, err
	}
	if err := n.registerAsKubelet(ctx); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// started starts the driver and the registrar, as setup has prepared the
// node, and returns once the registration socket listens.
func started(ctx context.Context, cfg config, setup func(*node)) (_ *node, err error) {
	n, err := newNode(cfg)
	if err != nil {
		return nil, err
	}
	setup(n)
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if _, err := n.startDriver(ctx, n.driverSock); err != nil {
		return nil, err
	}
	waiter, err := newSocketWaiter(n.regSock)
	if err != nil {
		return nil, err
	}
	defer waiter.Close()
	if err := n.startRegistrar(); err != nil {
		return nil, err
	}
	if _, err := waiter.wait(ctx, stepTimeout); err != nil {
		return nil, n.registrar.failed("the registration socket did not listen", err)
	}
	return n, nil
}
