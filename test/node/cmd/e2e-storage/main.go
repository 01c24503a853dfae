// Command e2e-storage runs Kubernetes' storage e2e suite (make e2e-storage)
// on the one-node cluster of test/node/localnode, against
// csi-driver-host-path's plugin with each registrar image as its node
// sidecar. It expects to run as PID 1 of new network, mount and PID
// namespaces with a scratch directory prepared by hack/e2e-node.sh, which
// also removes what the node leaves outside that directory.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

func main() {
	flags := localnode.RegisterFlags()
	var opts storageOptions
	tiers := flag.String("storage-tiers", "1", "the suite's tiers to run, comma-separated (1, 2)")
	flag.StringVar(&opts.repoList, "storage-repo-list", "", "the KUBE_TEST_REPO_LIST file mapping the suite's images to local names (required)")
	flag.StringVar(&opts.sidecarsMissing, "sidecars-missing", "", "why there are no images of csi-provisioner and csi-attacher; set, tier 2 is skipped with this reason")
	rbacFiles := flag.String("storage-rbac", "", "csi-provisioner's and csi-attacher's RBAC files (their modules' deploy/kubernetes/rbac.yaml), comma-separated; their roles are bound to the sidecars' ServiceAccount")
	flag.DurationVar(&opts.timeout, "storage-timeout", time.Hour, "the longest run of e2e.test (--ginkgo.timeout)")
	flags.Parse(&opts.repoList)
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
	s := &suite{Node: &localnode.Node{Flags: flags, Controllers: storageControllers, PodNetwork: true}, storageOptions: opts}
	// The pod network, before containerd reads its configuration.
	if err := writePodNetwork(s.Node); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-storage: FAIL: the pod network:", err)
		os.Exit(1)
	}
	if err := routeKubernetesService(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-storage: FAIL: the kubernetes Service's route:", err)
		os.Exit(1)
	}
	os.Exit(s.Run("e2e-storage", s.runStorage))
}
