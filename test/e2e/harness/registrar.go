package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// RegistrarConfig is the registrar's command line.
type RegistrarConfig struct {
	// CSIAddress is the driver's socket (--csi-address).
	CSIAddress string
	// KubeletRegistrationPath is returned to kubelet as the driver's
	// endpoint (--kubelet-registration-path).
	KubeletRegistrationPath string
	// PluginRegistrationPath is the registry directory
	// (--plugin-registration-path).
	PluginRegistrationPath string
	// HTTPEndpoint serves /healthz, /readyz, /status and /metrics
	// (--http-endpoint); empty: off.
	HTTPEndpoint string
	// TerminationMessagePath is where a fatal reason goes
	// (--termination-message-path).
	TerminationMessagePath string
	// Timeout is --timeout; zero leaves the default.
	Timeout time.Duration
	// RejectionPolicy is --rejection-policy ("retry" or "exit"); empty
	// leaves the default.
	RejectionPolicy string
	// Verbosity is -v.
	Verbosity int
	// ExtraArgs are appended as they are.
	ExtraArgs []string
}

// Args renders the command line.
func (c RegistrarConfig) Args() []string {
	args := []string{
		"--csi-address=" + c.CSIAddress,
		"--kubelet-registration-path=" + c.KubeletRegistrationPath,
		"--plugin-registration-path=" + c.PluginRegistrationPath,
		"-v=" + strconv.Itoa(c.Verbosity),
	}
	if c.HTTPEndpoint != "" {
		args = append(args, "--http-endpoint="+c.HTTPEndpoint)
	}
	if c.TerminationMessagePath != "" {
		args = append(args, "--termination-message-path="+c.TerminationMessagePath)
	}
	if c.Timeout != 0 {
		args = append(args, "--timeout="+c.Timeout.String())
	}
	if c.RejectionPolicy != "" {
		args = append(args, "--rejection-policy="+c.RejectionPolicy)
	}
	return append(args, c.ExtraArgs...)
}

// Registrar is a running registrar.
type Registrar struct {
	*Process
	Config RegistrarConfig
}

// StartRegistrar starts bin with cfg; name labels it in logs.
func StartRegistrar(name, bin string, cfg RegistrarConfig) (*Registrar, error) {
	p, err := StartProcess(name, bin, cfg.Args(), nil)
	if err != nil {
		return nil, err
	}
	return &Registrar{Process: p, Config: cfg}, nil
}

// SocketPath is where the registrar serves kubelet for a driver.
func (r *Registrar) SocketPath(driver string) string {
	return RegistrationSocket(r.Config.PluginRegistrationPath, driver)
}

// RegistrationSocket is <registry>/<driver>-reg.sock.
func RegistrationSocket(registryDir, driver string) string {
	return filepath.Join(registryDir, driver+"-reg.sock")
}

// Healthz asks the registrar's /healthz and returns the HTTP status.
func (r *Registrar) Healthz() (int, error) {
	if r.Config.HTTPEndpoint == "" {
		return 0, fmt.Errorf("%s has no --http-endpoint", r.Name)
	}
	return Healthz(r.Config.HTTPEndpoint)
}

// Healthz GETs http://<addr>/healthz and returns the status.
func Healthz(addr string) (int, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// WaitForHealthz polls /healthz until it answers want.
func (r *Registrar) WaitForHealthz(timeout time.Duration, want int) error {
	last := 0
	return Eventually(timeout, 50*time.Millisecond, fmt.Sprintf("%s /healthz to answer %d", r.Name, want), func() (bool, error) {
		code, err := r.Healthz()
		if err != nil {
			return false, err
		}
		last = code
		if code != want {
			return false, fmt.Errorf("last answer %d", last)
		}
		return true, nil
	})
}

// GetInfo calls the registration API's GetInfo on socket, as kubelet does.
func GetInfo(socket string, timeout time.Duration) (*registerapi.PluginInfo, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
}

// MockDriverConfig is the mock driver's command line.
type MockDriverConfig struct {
	Endpoint        string
	Name            string
	NodeID          string
	FailNodeGetInfo bool
	// FailNodeGetInfoCalls fails the first N NodeGetInfo calls only.
	FailNodeGetInfoCalls int
	PluginInfoDelay      time.Duration
	UnavailableCalls     int
	// Probe is Probe's answer (--probe: ready, not-ready, unset, error,
	// hang); empty leaves the driver's default.
	Probe string
}

// StartMockDriver starts bin (test/mockdriver) and waits until it serves.
func StartMockDriver(bin string, cfg MockDriverConfig) (*Process, error) {
	args := []string{"--endpoint=" + cfg.Endpoint, "--name=" + cfg.Name, "--node-id=" + cfg.NodeID}
	if cfg.FailNodeGetInfo {
		args = append(args, "--fail-node-get-info")
	}
	if cfg.FailNodeGetInfoCalls != 0 {
		args = append(args, "--fail-node-get-info-calls="+strconv.Itoa(cfg.FailNodeGetInfoCalls))
	}
	if cfg.PluginInfoDelay != 0 {
		args = append(args, "--plugin-info-delay="+cfg.PluginInfoDelay.String())
	}
	if cfg.UnavailableCalls != 0 {
		args = append(args, "--unavailable-calls="+strconv.Itoa(cfg.UnavailableCalls))
	}
	if cfg.Probe != "" {
		args = append(args, "--probe="+cfg.Probe)
	}
	p, err := StartProcess("driver", bin, args, nil)
	if err != nil {
		return nil, err
	}
	if _, err := p.WaitForLine(30*time.Second, "mockdriver: serving"); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%w\n%s", err, p.Output())
	}
	return p, nil
}

// FreeLocalAddr returns a 127.0.0.1 address with a port that was free a
// moment ago.
func FreeLocalAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
