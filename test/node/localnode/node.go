// Package localnode runs a one-node Kubernetes cluster on this machine
// (etcd, containerd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet) in the namespaces hack/e2e-node.sh prepared, and
// deploys deploy/daemonset.yaml on it: what make e2e-node's checks and make
// e2e-storage's suite share.
package localnode

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The node's fixed identity inside its own network namespace.
const (
	NodeName   = "e2e-node"
	NodeIP     = "10.88.0.1" // on lo: kubelet refuses a loopback node IP
	APIServer  = "https://127.0.0.1:6443"
	adminToken = "e2e-node-admin"
	nodeToken  = "e2e-node-kubelet"
	// created and removed by hack/e2e-node.sh in every cgroup hierarchy
	cgroupRoot = "/e2e-node"
)

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Flags are what hack/e2e-node.sh tells both programs.
type Flags struct {
	Work   string // scratch directory
	Bin    string // directory of kubelet, kube-apiserver, ...
	Repo   string // the repository's root, for deploy/
	Images string
	// UpstreamMissing and HostpathMissing, when set, are why there is no
	// image of upstream's registrar or of csi-driver-host-path's plugin.
	UpstreamMissing, HostpathMissing string
	FailOnSkip                       bool
}

// RegisterFlags defines the flags both programs take.
func RegisterFlags() *Flags {
	f := &Flags{}
	flag.StringVar(&f.Work, "work", "", "scratch directory (required)")
	flag.StringVar(&f.Bin, "bin", "", "directory holding kubelet, kube-apiserver, kube-controller-manager and kube-scheduler (required)")
	flag.StringVar(&f.Repo, "repo", "", "the repository's root, for deploy/daemonset.yaml (required)")
	flag.StringVar(&f.Images, "images", "", "comma-separated image archives to import into containerd (required)")
	flag.StringVar(&f.UpstreamMissing, "upstream-missing", "", "why there is no image of upstream's registrar ("+UpstreamImage+"); set, what needs it is skipped with this reason")
	flag.StringVar(&f.HostpathMissing, "hostpath-missing", "", "why there is no image of csi-driver-host-path's plugin ("+HostpathImage+"); set, what needs it is skipped with this reason")
	flag.BoolVar(&f.FailOnSkip, "fail-on-skip", false, "a skip fails the run (CI)")
	return f
}

// Parse parses the command line, and exits with the usage if a required
// flag is missing: these flags' or one of required.
func (f *Flags) Parse(required ...*string) {
	flag.Parse()
	for _, v := range append([]*string{&f.Work, &f.Bin, &f.Repo, &f.Images}, required...) {
		if *v == "" {
			flag.Usage()
			os.Exit(2)
		}
	}
}

// Node is the single-node cluster: its processes, in start order.
type Node struct {
	*Flags
	Logs string
	// StartupTaint, if set, is a taint kubelet registers its Node with.
	StartupTaint string
	// Controllers are kube-controller-manager's beyond the DaemonSet and
	// garbage collector controllers.
	Controllers []string
	// PodNetwork: pods have a network of their own (the caller configures
	// it), from which the API server must be reachable.
	PodNetwork bool

	procs   []*process
	Client  *kubernetes.Clientset
	Dynamic *dynamic.DynamicClient // for deploy/'s manifests as they are
	Timings []Timing
	// KubeletVersion is what kubelet reports in its Node's status.
	KubeletVersion *version.Version
}

type Timing struct {
	What string
	Took time.Duration
}

// Run brings the node up as program's, runs body on it and stops the
// node. It returns body's exit code, or 1 if the node did not come up.
func (c *Node) Run(program string, body func(ctx context.Context, began time.Time) int) int {
	// As PID 1 of its namespace this process gets no default signal
	// handling: SIGINT and SIGTERM must be caught to stop cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c.Logs = c.Path("logs")
	if err := os.MkdirAll(c.Logs, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		return 1
	}
	began := time.Now()
	defer func() {
		fmt.Println(program + ": stopping the node")
		c.StopAll()
	}()
	fmt.Println(program + ": starting etcd, containerd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet")
	if err := c.Up(ctx, strings.Split(c.Images, ",")); err != nil {
		fmt.Fprintf(os.Stderr, "%s: FAIL: the node did not come up: %v\n", program, err)
		return 1
	}
	fmt.Printf("%s: node %s up after %s, kubelet %s\n", program, NodeName, time.Since(began).Round(time.Millisecond), c.KubeletVersion)
	return body(ctx, began)
}

func (c *Node) Timing(what string, took time.Duration) {
	c.Timings = append(c.Timings, Timing{what, took})
}

func (c *Node) Path(elem ...string) string {
	return filepath.Join(append([]string{c.Work}, elem...)...)
}

func (c *Node) start(name string, argv ...string) (*process, error) {
	logFile, err := os.Create(filepath.Join(c.Logs, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return p, nil
}

// StopAll stops the components in reverse start order.
func (c *Node) StopAll() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
}

func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func Command(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// WaitFor polls cond until it holds. A process p that exits meanwhile is
// an error.
func WaitFor(parent context.Context, what string, timeout, interval time.Duration, p *process, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(parent, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		if p != nil && !ok {
			select {
			case <-p.done:
				return false, fmt.Errorf("%s: %s exited: %v (see logs/%s.log)", what, p.name, p.err, p.name)
			default:
			}
		}
		return ok, nil
	})
	switch {
	case err == nil || !wait.Interrupted(err):
		return err
	case parent.Err() != nil:
		return fmt.Errorf("%s: interrupted", what)
	}
	return fmt.Errorf("%s: not after %s (last error: %v)", what, timeout, last)
}

// Up starts the components, each once the previous one answers.
func (c *Node) Up(ctx context.Context, images []string) error {
	began := time.Now()
	// The network namespace is new: only lo, down.
	if err := Command("ip", "link", "set", "lo", "up"); err != nil {
		return err
	}
	if err := Command("ip", "addr", "add", NodeIP+"/32", "dev", "lo"); err != nil {
		return err
	}
	etcd, err := c.start("etcd", "etcd", "--data-dir", c.Path("etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380", "--name", "default")
	if err != nil {
		return err
	}
	if err := WaitFor(ctx, "etcd healthy", time.Minute, 200*time.Millisecond, etcd, httpOK("http://127.0.0.1:2379/health", "")); err != nil {
		return err
	}
	for _, step := range []func(context.Context, []string) error{c.upContainerd, c.upAPIServer, c.upControllers, c.upKubelet} {
		if err := step(ctx, images); err != nil {
			return err
		}
	}
	c.Timing("node up (etcd, containerd, images, apiserver, controller-manager, scheduler, kubelet)", time.Since(began))
	return nil
}

func (c *Node) upContainerd(ctx context.Context, images []string) error {
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/e2e-node/pause:1"
  # root here lacks CAP_SYS_RESOURCE: never lower a container's oom_score_adj
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
`, c.Path("containerd", "root"), c.Path("containerd", "state"), c.Path("containerd", "containerd.sock"),
		c.Path("containerd", "opt"), c.Path("cni", "bin"), c.Path("cni", "conf"))
	file := c.Path("containerd.toml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		return err
	}
	containerd, err := c.start("containerd", "containerd", "--config", file, "--log-level", "info")
	if err != nil {
		return err
	}
	sock := c.Path("containerd", "containerd.sock")
	if err := WaitFor(ctx, "containerd serving", time.Minute, 200*time.Millisecond, containerd, func(context.Context) (bool, error) {
		return Command("ctr", "--address", sock, "version") == nil, nil
	}); err != nil {
		return err
	}
	for _, image := range images {
		if err := Command("ctr", "--address", sock, "-n", "k8s.io", "images", "import", "--snapshotter", "native", image); err != nil {
			return err
		}
	}
	return nil
}

func (c *Node) upAPIServer(ctx context.Context, _ []string) error {
	bindAddress := "127.0.0.1"
	if c.PodNetwork {
		// the pods' network reaches the node's address, not its loopback
		bindAddress = "0.0.0.0"
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyFile := c.Path("service-account.key")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(keyFile, pemKey, 0o600); err != nil {
		return err
	}
	// kubelet is a real node user, so that the Node authorizer and the
	// NodeRestriction admission plugin check what it writes.
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,system:node:%s,kubelet,\"system:nodes\"\n",
		adminToken, nodeToken, NodeName)
	tokenFile := c.Path("tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		return err
	}
	apiserver, err := c.start("kube-apiserver", filepath.Join(c.Bin, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address="+bindAddress, "--secure-port=6443", "--advertise-address="+NodeIP,
		"--cert-dir="+c.Path("apiserver"),
		"--token-auth-file="+tokenFile,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// the test driver, as deploy/ asks for any driver, is privileged
		"--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile,
		"--service-cluster-ip-range=10.96.0.0/24",
		// on loopback: no Endpoints for the kubernetes Service
		"--endpoint-reconciler-type=none",
		// the node's name resolves nowhere here: reach kubelet (exec, logs)
		// at its IP
		"--kubelet-preferred-address-types=InternalIP",
		"--v=1")
	if err != nil {
		return err
	}
	if err := WaitFor(ctx, "kube-apiserver ready", 3*time.Minute, 500*time.Millisecond, apiserver, httpOK(APIServer+"/readyz", adminToken)); err != nil {
		return err
	}
	if err := writeKubeconfig(c.Path("admin.kubeconfig"), adminToken); err != nil {
		return err
	}
	config := &rest.Config{
		Host: APIServer, BearerToken: adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 50, Burst: 100,
	}
	if c.Client, err = kubernetes.NewForConfig(config); err != nil {
		return err
	}
	c.Dynamic, err = dynamic.NewForConfig(config)
	return err
}

func (c *Node) upControllers(context.Context, []string) error {
	admin := c.Path("admin.kubeconfig")
	controllers := append([]string{"daemonset", "garbagecollector", "validatingadmissionpolicy-status-controller"}, c.Controllers...)
	var rootCA []string
	if c.PodNetwork {
		// the API server's self-signed certificate, published in every
		// namespace for the pods' service account volumes
		rootCA = []string{"--root-ca-file=" + c.Path("apiserver", "apiserver.crt")}
	}
	if _, err := c.start("kube-controller-manager", append([]string{filepath.Join(c.Bin, "kube-controller-manager"),
		"--kubeconfig", admin, "--leader-elect=false", "--controllers=" + strings.Join(controllers, ","),
		"--secure-port=0", "--v=2"}, rootCA...)...); err != nil {
		return err
	}
	_, err := c.start("kube-scheduler", filepath.Join(c.Bin, "kube-scheduler"),
		"--kubeconfig", admin, "--leader-elect=false", "--secure-port=0", "--v=2")
	return err
}

// upKubelet waits for kubelet's version, on which checks depend.
func (c *Node) upKubelet(ctx context.Context, _ []string) error {
	kubelet, err := c.startKubelet("kubelet")
	if err != nil {
		return err
	}
	if err := WaitFor(ctx, "kubelet registered its Node with its version", 3*time.Minute, 500*time.Millisecond, kubelet, func(ctx context.Context) (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, getOpts)
		if err != nil || node.Status.NodeInfo.KubeletVersion == "" {
			return false, err
		}
		c.KubeletVersion, err = version.ParseGeneric(node.Status.NodeInfo.KubeletVersion)
		return err == nil, err
	}); err != nil {
		return err
	}
	if c.KubeletVersion.Major() == 0 {
		return fmt.Errorf("kubelet reports version %s: it was built without its release's version (go build -ldflags '-X k8s.io/component-base/version.gitVersion=v1.NN.P', as hack/e2e-node.sh does), and the checks that depend on kubelet's version need it", c.KubeletVersion)
	}
	return nil
}

func httpOK(url, token string) func(context.Context) (bool, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the apiserver's self-signed certificate
	}}
	return func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("%s: %s", url, resp.Status)
	}
}

func (c *Node) startKubelet(name string) (*process, error) {
	kubeconfig := c.Path("kubelet.kubeconfig")
	if err := writeKubeconfig(kubeconfig, nodeToken); err != nil {
		return nil, err
	}
	taints := ""
	if c.StartupTaint != "" {
		taints = fmt.Sprintf("registerWithTaints:\n- key: %s\n  effect: NoSchedule\n", c.StartupTaint)
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
imageServiceEndpoint: unix://%[1]s
# cgroup v1 hosts without systemd as init; swap may be on
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
failSwapOn: false
podLogsDir: %[3]s
address: %[4]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# anonymous read of /metrics (prober_probe_total) from inside the namespace
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
resolvConf: ""
localStorageCapacityIsolation: false
# never evict nor garbage-collect the imported images on a loaded build host
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
syncFrequency: 10s
%[5]snodeStatusUpdateFrequency: 5s
serializeImagePulls: false
`, c.Path("containerd", "containerd.sock"), cgroupRoot, c.Path("pod-logs"), NodeIP, taints)
	file := c.Path("kubelet.yaml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return c.start(name, filepath.Join(c.Bin, "kubelet"),
		"--config="+file, "--kubeconfig="+kubeconfig,
		"--root-dir="+c.Path("kubelet"), "--cert-dir="+c.Path("kubelet", "pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP,
		"--v=2")
}

// RestartKubelet restarts kubelet, logging to logs/NAME.log; containerd
// keeps the pods' containers running meanwhile.
func (c *Node) RestartKubelet(ctx context.Context, name string) error {
	var old *process
	for _, p := range c.procs {
		if strings.HasPrefix(p.name, "kubelet") {
			old = p
		}
	}
	if old == nil {
		return fmt.Errorf("no kubelet to restart")
	}
	old.stop()
	kubelet, err := c.startKubelet(name)
	if err != nil {
		return err
	}
	return WaitFor(ctx, "the restarted kubelet healthy", time.Minute, 200*time.Millisecond, kubelet, httpOK("http://127.0.0.1:10248/healthz", ""))
}

func writeKubeconfig(file, token string) error {
	config := clientcmdapi.NewConfig()
	config.Clusters["local"] = &clientcmdapi.Cluster{Server: APIServer, InsecureSkipTLSVerify: true}
	config.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	config.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	config.CurrentContext = "local"
	return clientcmd.WriteToFile(*config, file)
}
