// Command e2e-storage runs Kubernetes' storage e2e suite (make e2e-storage)
// on the one-node cluster of test/node/localnode, against
// csi-driver-host-path's plugin with each registrar image as its node
// sidecar. It expects to run as PID 1 of new network, mount and PID
// namespaces with a scratch directory prepared by hack/e2e-node.sh, which
// also removes what the node leaves outside that directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

func main() {
	work := flag.String("work", "", "scratch directory (required)")
	bin := flag.String("bin", "", "directory holding kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, e2e.test and kubectl (required)")
	repo := flag.String("repo", "", "the repository's root, for deploy/daemonset.yaml (required)")
	images := flag.String("images", "", "comma-separated image archives to import into containerd (required)")
	var opts storageOptions
	flag.StringVar(&opts.upstreamMissing, "upstream-missing", "", "why there is no image of upstream's registrar ("+localnode.UpstreamImage+"); set, its part is skipped with this reason")
	flag.StringVar(&opts.hostpathMissing, "hostpath-missing", "", "why there is no image of csi-driver-host-path's plugin ("+localnode.HostpathImage+"); set, the suite is skipped with this reason")
	flag.BoolVar(&opts.failOnSkip, "fail-on-skip", false, "a skipped part fails the run (CI)")
	tiers := flag.String("storage-tiers", "1", "the suite's tiers to run, comma-separated (1, 2)")
	flag.StringVar(&opts.repoList, "storage-repo-list", "", "the KUBE_TEST_REPO_LIST file mapping the suite's images to local names (required)")
	flag.StringVar(&opts.sidecarsMissing, "sidecars-missing", "", "why there are no images of csi-provisioner and csi-attacher; set, tier 2 is skipped with this reason")
	rbacFiles := flag.String("storage-rbac", "", "csi-provisioner's and csi-attacher's RBAC files (their modules' deploy/kubernetes/rbac.yaml), comma-separated; their roles are bound to the sidecars' ServiceAccount")
	flag.DurationVar(&opts.timeout, "storage-timeout", time.Hour, "the longest run of e2e.test (--ginkgo.timeout)")
	flag.Parse()
	if *work == "" || *bin == "" || *repo == "" || *images == "" || opts.repoList == "" {
		flag.Usage()
		os.Exit(2)
	}
	for _, t := range strings.Split(*tiers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(t))
		if err != nil || n < 1 || n > len(storageTiers) {
			fmt.Fprintf(os.Stderr, "e2e-storage: -storage-tiers %q: each tier is 1 or 2\n", *tiers)
			os.Exit(2)
		}
		opts.tiers = append(opts.tiers, n)
	}
	if *rbacFiles != "" {
		opts.rbacFiles = strings.Split(*rbacFiles, ",")
	}
	node := &localnode.Node{Work: *work, Bin: *bin, Repo: *repo, Logs: filepath.Join(*work, "logs"), Controllers: storageControllers, PodNetwork: true}
	os.Exit(run(node, strings.Split(*images, ","), opts))
}

func run(node *localnode.Node, images []string, opts storageOptions) int {
	// As PID 1 of its namespace this process gets no default signal
	// handling: SIGINT and SIGTERM must be caught to stop cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if err := os.MkdirAll(node.Logs, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-storage:", err)
		return 1
	}
	began := time.Now()
	defer func() {
		fmt.Println("e2e-storage: stopping the node")
		node.StopAll()
	}()

	fmt.Println("e2e-storage: starting etcd, containerd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, with a pod network")
	if err := writePodNetwork(node); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-storage: FAIL: the pod network:", err)
		return 1
	}
	if err := routeKubernetesService(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-storage: FAIL: the kubernetes Service's route:", err)
		return 1
	}
	if err := node.Up(ctx, images); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-storage: FAIL: the node did not come up:", err)
		return 1
	}
	fmt.Printf("e2e-storage: node %s up after %s, kubelet %s\n", localnode.NodeName, time.Since(began).Round(time.Millisecond), node.KubeletVersion)
	s := &suite{Node: node, storageOptions: opts}
	return s.runStorage(ctx)
}
