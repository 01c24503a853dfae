package main

// The suite reaches the driver only through what the registrar registered.

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

type suite struct {
	*localnode.Node
	storageOptions
}

// built by hack/e2e-node.sh from their modules for tier 2
const (
	provisionerImage = "localhost/e2e-node/csi-provisioner:1"
	attacherImage    = "localhost/e2e-node/csi-attacher:1"
)

// storageLogs is where hack/e2e-node.sh copies the logs at the end.
const storageLogs = "test/node/_logs-storage"

type storageOptions struct {
	tiers           []int
	repoList        string
	sidecarsMissing string
	rbacFiles       []string
	timeout         time.Duration
}

type storageTier struct {
	number int
	what   string
	focus  string
}

// The driver's tests, as the suite names them: "External Storage [Driver:
// hostpath.csi.k8s.io] [Testpattern: ...] <suite> <test>".
const driverTests = `External Storage \[Driver: hostpath\.csi\.k8s\.io\] `

var storageTiers = []storageTier{
	{1, "CSI Ephemeral-volume (default fs)", driverTests + `\[Testpattern: CSI Ephemeral-volume \(default fs\)\] `},
	{2, "Generic Ephemeral-volume and Dynamic PV (default fs): volumes, volumeIO, subPath, provisioning, ephemeral",
		driverTests + `\[Testpattern: (Generic Ephemeral-volume \(default fs\) \((immediate|late)-binding\)|Dynamic PV \(default fs\))\] (volumes|volumeIO|subPath|provisioning|ephemeral) `},
}

// storageSkip leaves out what upstream's CI leaves out. What the
// deployment lacks, the test driver's capabilities leave out.
const storageSkip = `\[Disruptive\]|\[Feature:`

type storageImage struct {
	key      string // file names: logs/storage/<key>-tier<n>/
	what     string
	template localnode.Template
}

type storageResult struct {
	tier                    storageTier
	image                   storageImage
	passed, failed, skipped int
	took                    time.Duration
	junit                   string
	// outcomes are the tier's tests that ran: "passed" or "failed".
	outcomes map[string]string
	err      error // the run could not be judged
}

func (r storageResult) String() string {
	s := fmt.Sprintf("tier %d, %s: passed %d, failed %d, skipped %d, %s; JUnit %s",
		r.tier.number, r.image.what, r.passed, r.failed, r.skipped, r.took.Round(time.Second), r.junit)
	if r.err != nil {
		s += "; " + r.err.Error()
	}
	return s
}

func (r storageResult) ok() bool { return r.err == nil && r.failed == 0 && r.passed > 0 }

func (s *suite) runStorage(ctx context.Context, _ time.Time) int {
	opts := s.storageOptions
	images := []storageImage{
		{"this-registrar", "this registrar (" + localnode.RegistrarImage + ")", localnode.Template{Revision: 24, Port: 9832}},
		{"upstream", "upstream's registrar (" + localnode.UpstreamImage + ")", localnode.Template{Revision: 25, Port: 9833, Upstream: true}},
	}
	var tiers []storageTier
	for _, t := range storageTiers {
		if slices.Contains(opts.tiers, t.number) {
			tiers = append(tiers, t)
		}
	}
	if len(tiers) == 0 {
		fmt.Fprintf(os.Stderr, "e2e-storage: no tier chosen among %v: set E2E_STORAGE_TIERS to 1, 2 or \"1 2\"\n", opts.tiers)
		return 2
	}
	if s.HostpathMissing != "" {
		fmt.Println("e2e-storage: SKIPPED: the suite needs csi-driver-host-path's plugin:", s.HostpathMissing)
		if s.FailOnSkip {
			fmt.Println("e2e-storage: FAIL: skipped in CI: a skip there is a failure to look at")
			return 1
		}
		return 0
	}
	var results []storageResult
	var problems []string
	for _, image := range images {
		if image.template.Upstream && s.UpstreamMissing != "" {
			problems = append(problems, "SKIPPED "+image.what+": "+s.UpstreamMissing)
			continue
		}
		if err := s.deployHostpath(ctx, image.template, opts); err != nil {
			problems = append(problems, fmt.Sprintf("FAIL deploying hostpathplugin with %s: %v", image.what, err))
			continue
		}
		for _, t := range tiers {
			if t.number == 2 && opts.sidecarsMissing != "" {
				problems = append(problems, fmt.Sprintf("SKIPPED tier 2 with %s: %s", image.what, opts.sidecarsMissing))
				continue
			}
			r := s.runSuite(ctx, t, image, opts)
			fmt.Println("e2e-storage:", r)
			results = append(results, r)
		}
		if err := s.RemoveDaemonSet(ctx, localnode.HostpathDaemonSet, localnode.HostpathDriver); err != nil {
			problems = append(problems, fmt.Sprintf("FAIL removing hostpathplugin with %s: %v", image.what, err))
		}
		if ctx.Err() != nil {
			break
		}
	}

	return s.storageReport(ctx, results, problems)
}

func (s *suite) storageReport(ctx context.Context, results []storageResult, problems []string) int {
	fmt.Println()
	fmt.Println("e2e-storage report")
	for _, t := range s.Timings {
		fmt.Printf("  %s: %s\n", t.What, t.Took.Round(time.Millisecond))
	}
	failed := false
	for _, r := range results {
		status := "PASS"
		if !r.ok() {
			status, failed = "FAIL", true
		}
		fmt.Printf("  %-7s %s\n", status, r)
	}
	skipped := false
	for _, p := range problems {
		fmt.Println("  " + p)
		skipped = skipped || strings.HasPrefix(p, "SKIPPED")
		failed = failed || strings.HasPrefix(p, "FAIL")
	}
	for _, d := range compareImages(results) {
		fmt.Println("  " + d)
	}
	if skipped && s.FailOnSkip {
		fmt.Println("  FAIL: a part was skipped in CI: a skip there is a failure to look at")
		failed = true
	}
	if ctx.Err() != nil {
		fmt.Println("  interrupted")
		failed = true
	}
	if failed {
		return 1
	}
	return 0
}

func compareImages(results []storageResult) []string {
	var lines []string
	for _, t := range storageTiers {
		var ours, theirs *storageResult
		for i := range results {
			r := &results[i]
			if r.tier.number != t.number {
				continue
			}
			if r.image.template.Upstream {
				theirs = r
			} else {
				ours = r
			}
		}
		if ours == nil || theirs == nil {
			continue
		}
		var both, oneOnly int
		var differ []string
		for name, outcome := range ours.outcomes {
			other, ran := theirs.outcomes[name]
			switch {
			case !ran:
				oneOnly++
			case other != outcome:
				differ = append(differ, fmt.Sprintf("tier %d: %s with this registrar, %s with upstream's: %s", t.number, outcome, other, name))
			default:
				both++
			}
		}
		for name := range theirs.outcomes {
			if _, ran := ours.outcomes[name]; !ran {
				oneOnly++
			}
		}
		slices.Sort(differ)
		lines = append(lines, fmt.Sprintf("tier %d: %d tests ran with both images, %d with the same outcome; %d ran with one image only",
			t.number, both+len(differ), both, oneOnly))
		lines = append(lines, differ...)
	}
	return lines
}

func (s *suite) deployHostpath(ctx context.Context, t localnode.Template, opts storageOptions) error {
	began := time.Now()
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: localnode.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", localnode.Namespace, err)
	}
	sidecars := opts.sidecarsMissing == "" && slices.Contains(opts.tiers, 2)
	// As csi-driver-host-path deploys it: persistent and inline volumes,
	// attached through csi-attacher where it runs.
	driver, fsGroup := localnode.HostpathCSIDriver(), storagev1.FileFSGroupPolicy
	driver.Spec.AttachRequired = &sidecars
	driver.Spec.FSGroupPolicy = &fsGroup
	driver.Spec.VolumeLifecycleModes = append(driver.Spec.VolumeLifecycleModes, storagev1.VolumeLifecyclePersistent)
	if _, err := s.Client.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CSIDriver %s: %w", localnode.HostpathDriver, err)
	}
	ds, err := s.OwnDaemonSet(t, localnode.Own{Name: localnode.HostpathDaemonSet, Hostpath: true})
	if err != nil {
		return err
	}
	if sidecars {
		if err := s.createSidecarRBAC(ctx, opts.rbacFiles); err != nil {
			return err
		}
		addControllerSidecars(&ds.Spec.Template.Spec)
	}
	watch, stopWatch := s.StartWatch(ctx, localnode.HostpathDriver)
	defer stopWatch()
	if _, _, err := s.Deploy(ctx, ds, watch); err != nil {
		return err
	}
	s.Timing(fmt.Sprintf("hostpath DaemonSet (revision %d) created → Ready, driver in CSINode", t.Revision), time.Since(began))
	return nil
}

// addControllerSidecars: as csi-driver-host-path's single-node deployment.
func addControllerSidecars(pod *corev1.PodSpec) {
	pod.ServiceAccountName = sidecarAccount
	expiry := int64(3600)
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
			}}},
		}},
	}})
	mounts := []corev1.VolumeMount{
		{Name: "socket-dir", MountPath: "/csi"},
		{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
	}
	common := []string{"--v=5", "--csi-address=/csi/csi.sock"}
	pod.Containers = append(pod.Containers,
		corev1.Container{
			Name: "csi-provisioner", Image: provisionerImage, ImagePullPolicy: corev1.PullNever,
			// Topology: the provisioner reads the node's topology keys from
			// CSINode, where kubelet wrote what the registrar's driver said.
			Args:                     append(slices.Clone(common), "--feature-gates=Topology=true"),
			VolumeMounts:             mounts,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		},
		corev1.Container{
			Name: "csi-attacher", Image: attacherImage, ImagePullPolicy: corev1.PullNever,
			Args:                     common,
			VolumeMounts:             mounts,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		},
	)
}

const sidecarAccount = "csi-hostpathplugin-sa"

// createSidecarRBAC binds the sidecars' own roles to sidecarAccount.
func (s *suite) createSidecarRBAC(ctx context.Context, files []string) error {
	if len(files) == 0 {
		return errors.New("no RBAC file of csi-provisioner and csi-attacher given (-storage-rbac)")
	}
	_, err := s.Client.CoreV1().ServiceAccounts(localnode.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sidecarAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s: %w", sidecarAccount, err)
	}
	toAccount := func(obj *unstructured.Unstructured) bool {
		subjects, _ := obj.Object["subjects"].([]any)
		for _, subject := range subjects {
			if m, ok := subject.(map[string]any); ok && m["kind"] == "ServiceAccount" {
				m["name"] = sidecarAccount
			}
		}
		return obj.GetKind() != "ServiceAccount" // sidecarAccount replaces the files' accounts
	}
	return s.ApplyManifests(ctx, toAccount, files...)
}

func (s *suite) runSuite(ctx context.Context, t storageTier, image storageImage, opts storageOptions) storageResult {
	r := storageResult{tier: t, image: image, outcomes: map[string]string{}}
	name := fmt.Sprintf("%s-tier%d", image.key, t.number)
	reportDir := filepath.Join(s.Logs, "storage", name)
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		r.err = err
		return r
	}
	r.junit = filepath.Join(storageLogs, "storage", name, "junit_01.xml")
	logFile, err := os.Create(filepath.Join(reportDir, "e2e.log"))
	if err != nil {
		r.err = err
		return r
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(s.Bin, "e2e.test"),
		"--provider=local",
		"--kubeconfig="+s.Path("admin.kubeconfig"),
		"--kubectl-path="+filepath.Join(s.Bin, "kubectl"),
		"--storage.testdriver="+filepath.Join(s.Repo, "test", "node", "storage", "test-driver.yaml"),
		"--report-dir="+reportDir,
		"--ginkgo.focus="+t.focus,
		"--ginkgo.skip="+storageSkip,
		"--ginkgo.timeout="+opts.timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
		// nothing to gather logs from: the node's logs are in _logs
		"--disable-log-dump",
	)
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+opts.repoList)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// SIGTERM lets the suite clean up its namespaces and write its report.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	fmt.Printf("e2e-storage: running tier %d (%s) with %s; its log: %s\n", t.number, t.what, image.what, filepath.Join(storageLogs, "storage", name, "e2e.log"))
	began := time.Now()
	runErr := cmd.Run()
	r.took = time.Since(began)
	s.Timing(fmt.Sprintf("e2e.test, tier %d, %s", t.number, image.what), r.took)
	cases, err := readJUnit(filepath.Join(reportDir, "junit_01.xml"))
	if err != nil {
		r.err = fmt.Errorf("e2e.test: %v; its JUnit file: %w", runErr, err)
		return r
	}
	focus := regexp.MustCompile(t.focus)
	for _, c := range cases {
		if !focus.MatchString(c.Name) {
			continue
		}
		switch {
		case c.Status == "passed":
			r.passed++
			r.outcomes[c.Name] = "passed"
		case c.Status == "skipped" || c.Status == "pending":
			r.skipped++
		default: // failed, panicked, interrupted, timedout, aborted
			r.failed++
			r.outcomes[c.Name] = "failed"
		}
	}
	var exit *exec.ExitError
	switch {
	case runErr != nil && !errors.As(runErr, &exit):
		r.err = fmt.Errorf("e2e.test: %w", runErr)
	case runErr != nil && r.failed == 0:
		// The suite failed outside the tier's tests (its set-up).
		r.err = fmt.Errorf("e2e.test: %w with no failed test of the tier: see its log", runErr)
	case r.passed == 0:
		r.err = fmt.Errorf("no test of the tier passed: does --ginkgo.focus %q still match the suite's names?", t.focus)
	}
	return r
}

type junitCase struct {
	Name   string `xml:"name,attr"`
	Status string `xml:"status,attr"`
}

func readJUnit(file string) ([]junitCase, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var report struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &report); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var cases []junitCase
	for _, suite := range report.Suites {
		cases = append(cases, suite.Cases...)
	}
	return cases, nil
}

var storageControllers = []string{
	"serviceaccount", "root-ca-cert-publisher", "namespace", "nodelifecycle",
	"persistentvolume-binder", "pv-protection", "pvc-protection", "attachdetach", "ephemeral-volume",
	// the provisioning suite's volume populator is a Deployment
	"deployment", "replicaset",
}

// kubernetesService is the first of --service-cluster-ip-range: kubelet
// gives every container this address (KUBERNETES_SERVICE_HOST).
const kubernetesService = "10.96.0.1"

// routeKubernetesService does what kube-proxy would, so that the sidecars
// use their in-cluster configuration unchanged.
func routeKubernetesService() error {
	if err := localnode.Command("ip", "addr", "add", kubernetesService+"/32", "dev", "lo"); err != nil {
		return err
	}
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		if err := localnode.Command("iptables", "-t", "nat", "-A", chain, "-d", kubernetesService+"/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", localnode.NodeIP+":6443"); err != nil {
			return err
		}
	}
	return nil
}

// podNetwork: veth pairs to the node, which routes to the kubernetes Service.
const podNetwork = `{
  "cniVersion": "1.0.0",
  "name": "e2e-storage",
  "plugins": [{
    "type": "ptp",
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`

func writePodNetwork(c *localnode.Node) error {
	if err := os.MkdirAll(c.Path("cni", "conf"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink(cniPlugins, c.Path("cni", "bin")); err != nil {
		return err
	}
	return os.WriteFile(c.Path("cni", "conf", "10-e2e-storage.conflist"), []byte(fmt.Sprintf(podNetwork, c.Path("cni", "ipam"))), 0o644)
}

// Debian's containernetworking-plugins'
const cniPlugins = "/usr/lib/cni"
