#!/usr/bin/env bash
# The registrar's image as the sidecar of a CSI driver's DaemonSet under a
# real kubelet, on this machine, from one command (make e2e-node):
#
#  1. installs etcd-server, containerd, runc and buildah (and busybox-static
#     for the hostpath checks) with apt-get when missing;
#  2. builds kubelet, kube-apiserver, kube-controller-manager and
#     kube-scheduler of KUBE_VERSION (below) into test/node/_bin (the Go
#     build cache makes later runs fast), the registrar's binary (make
#     build-all) and the test driver;
#  3. builds four images with buildah (vfs storage in the scratch
#     directory): the registrar from the project's Dockerfile on scratch, the
#     test driver (test/mockdriver), a pause image and upstream's registrar
#     (../shared/interop/, at /csi-node-driver-registrar as in upstream's
#     image), all three FROM scratch; where csi-driver-host-path's plugin
#     is (../shared/realdrivers/), two more FROM scratch: the plugin with
#     busybox-static's mount and umount, and busybox for the volume pods;
#  4. runs test/node's e2e-node program (e2e-storage for make e2e-storage)
#     as PID 1 of new network, mount and
#     PID namespaces: the node's processes, iptables chains, mounts and
#     containers cannot outlive it, and /run, /var/log and /var/lib are
#     private tmpfs there, so what containerd and kubelet write to fixed
#     paths (shim sockets, /var/log/containers, kubelet's device plugin
#     socket in /var/lib/kubelet) vanishes too;
#  5. on every exit (success, failure, Ctrl-C, SIGTERM) stops the node,
#     removes kubelet's cgroups (cgroupRoot /e2e-node in every hierarchy),
#     restores the sysctls kubelet sets, copies the logs to test/node/_logs
#     and removes the scratch directory.
#
#   hack/e2e-node.sh        (make e2e-node; needs root)
#
# KUBE_VERSION (default: test/node's k8s.io/kubernetes, the newest
# supported): the Kubernetes release whose kubelet, kube-apiserver,
# kube-controller-manager and kube-scheduler the node runs. Each other
# release has a module of its own, test/node/kubernetes/v1.NN, whose go.mod
# pins it (k8s.io/kubernetes and its staging modules); its components are
# built into test/node/_bin/<version>. The node test's program is test/node's
# whatever the version. make e2e-storage runs test/node's version only.
# E2E_NODE_MAX_ROLLOUT_GAP (a Go duration, default 0s): the longest time
# without the driver in CSINode that the rolling update check (4a) accepts.
# kubelet v1.37 unregisters a plugin whose socket is replaced and registers
# it again one reconcile period (1 s) later, so 0s fails on every rollout.
# E2E_NODE_UPSTREAM_REGISTRAR (default ../shared/interop/upstream-csi-node-
# driver-registrar from the repository's root): upstream's binary, for
# checks 4b and 4c (rollouts from this registrar to upstream's image and
# back). Where it is missing those checks are reported as SKIPPED with the
# reason, and with CI set (not to false or 0) the run fails: a skip in CI is
# a failure to look at.
# E2E_NODE_HOSTPATHPLUGIN (default ../shared/realdrivers/hostpathplugin
# from the repository's root): csi-driver-host-path's plugin, for checks
# 8a-8c (a CSI inline volume through it, and rolling updates of its
# DaemonSet with a volume pod running). Missing, they are SKIPPED as 4b/4c.
#
#   hack/e2e-node.sh storage        (make e2e-storage; needs root)
#
# runs Kubernetes' storage e2e suite on the same node instead of the checks
# (test/node/cmd/e2e-storage, docs/storage-e2e.md): it also installs
# Debian's containernetworking-plugins (the test pods' network), builds
# kubectl, agnhost and e2e.test (go test -c k8s.io/kubernetes/test/e2e) from
# test/node's go.mod and, for tier 2, csi-provisioner and csi-attacher from
# their modules, and imports the suite's images under the local names that
# KUBE_TEST_REPO_LIST gives them. E2E_STORAGE_TIERS (default "1 2"): the
# tiers to run. Logs, with each run's JUnit file, go to
# test/node/_logs-storage.
# E2E_NODE_CHECKS (default: all): the checks to run after check 1, which
# every run does, comma-separated, e.g. E2E_NODE_CHECKS=13 or 8,13; they run
# in the usual order. A developer's shortcut: the report says PARTIAL RUN
# and the others are not run (test/node/README.md).
# E2E_NODE_KEEP=1 keeps the scratch directory (its path is printed) until
# the next run. A run killed with SIGKILL leaves its cgroups, scratch
# directory and kubelet's sysctls: the next run restores and removes them.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
case ${1:-} in
"") mode=node logs_dir=test/node/_logs ;;
storage) mode=storage logs_dir=test/node/_logs-storage ;;
*)
	echo "usage: hack/e2e-node.sh [storage]" >&2
	exit 2
	;;
esac

say() { echo "e2e-node: $*"; }
fail() {
	echo "e2e-node: FAIL: $*" >&2
	exit 1
}

# The Kubernetes release to run, and the module that pins it.
node_version=$(sed -n 's|^\tk8s\.io/kubernetes \(v[^ ]*\)$|\1|p' test/node/go.mod)
[[ -n $node_version ]] || fail "test/node/go.mod requires no k8s.io/kubernetes version"
kube_version=${KUBE_VERSION:-$node_version}
kube_module=
if [[ $kube_version == "$node_version" ]]; then
	kube_module=test/node
else
	for m in test/node/kubernetes/*/go.mod; do
		grep -Eq "^(require )?[[:space:]]*k8s\.io/kubernetes $kube_version\$" "$m" && kube_module=${m%/go.mod}
	done
fi
if [[ -z $kube_module ]]; then
	fail "KUBE_VERSION=$kube_version: no module pins it; supported: $node_version (test/node)$(
		sed -nE 's|^(require )?[[:space:]]*k8s\.io/kubernetes (v[^ ]*)$|, \2|p' test/node/kubernetes/*/go.mod | tr -d '\n'
	) (test/node/kubernetes/v1.NN; see docs/compatibility.md to add one)"
fi
[[ $mode == node || $kube_module == test/node ]] || fail "KUBE_VERSION=$kube_version: make e2e-storage runs test/node's version only ($node_version)"

[[ $(id -u) == 0 ]] || fail "needs root: it runs containerd and kubelet, and creates namespaces and cgroups"

# 1. Packages.
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
# Checks 8a-8c: hostpathplugin's image needs a static mount.
hostpath_bin=${E2E_NODE_HOSTPATHPLUGIN:-$repo/../shared/realdrivers/hostpathplugin}
if [[ -f $hostpath_bin || $mode == storage ]] && { [[ ! -x /bin/busybox ]] || ldd /bin/busybox >/dev/null 2>&1; }; then
	missing+=(busybox-static)
fi
# The storage suite's pods are not on the host's network: a CNI plugin.
cni_plugins=/usr/lib/cni
if [[ $mode == storage && ! -x $cni_plugins/ptp ]]; then
	missing+=(containernetworking-plugins)
fi
# ... and iptables, to route the kubernetes Service to the API server
# without kube-proxy.
if [[ $mode == storage ]] && ! command -v iptables >/dev/null 2>&1; then
	missing+=(iptables)
fi
if ((${#missing[@]})); then
	say "installing ${missing[*]} with apt-get"
	apt-get update -q || fail "apt-get update failed"
	# policy-rc.d: the packages' own services (etcd, containerd) must not
	# start on the host; this run starts its own, in its namespaces.
	policy=/usr/sbin/policy-rc.d
	own_policy=
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" || install_failed=1
	[[ -n $own_policy ]] && rm -f "$policy"
	[[ -z ${install_failed:-} ]] || fail "apt-get install ${missing[*]} failed"
fi

# kubelet's cgroup root, /e2e-node in every cgroup hierarchy (cgroup v1:
# one per controller; v2: the one). A run's processes are gone when its PID
# namespace is; a populated root means another run is going on.
hierarchies() { findmnt -rn -t cgroup,cgroup2 -o TARGET; }
cgroup_dirs() {
	local h
	for h in $(hierarchies); do
		[[ -d $h/e2e-node ]] && echo "$h/e2e-node"
	done
	return 0
}
cgroup_tasks() {
	local d
	for d in $(cgroup_dirs); do
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
	done
}
remove_cgroups() {
	local d i
	for i in $(seq 1 60); do
		[[ -z $(cgroup_tasks) ]] && break
		sleep 0.5
	done
	for d in $(cgroup_dirs); do
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	[[ -z $(cgroup_dirs) ]] || {
		echo "e2e-node: could not remove $(cgroup_dirs | tr '\n' ' ')(processes: $(cgroup_tasks | tr '\n' ' '))" >&2
		return 1
	}
}

# One run at a time on this machine, whichever checkout it comes from: the
# runs share the cgroup /e2e-node and clean up each other's scratch
# directories. A lock on /run/lock/e2e-node.lock, held by every process of
# the run (the descriptor is inherited), so also by a node whose script was
# killed. E2E_NODE_LOCK_WAIT=<seconds> waits that long for it.
mkdir -p /run/lock
exec 9>>/run/lock/e2e-node.lock
flock -w "${E2E_NODE_LOCK_WAIT:-0}" 9 || fail "another e2e-node run is going on (it holds /run/lock/e2e-node.lock); E2E_NODE_LOCK_WAIT=<seconds> waits for it"

# What a run killed with SIGKILL left: its cgroups, its scratch directory
# and the sysctls kubelet changed, saved there.
if [[ -n $(cgroup_dirs) ]]; then
	[[ -z $(cgroup_tasks) ]] || fail "processes of an earlier run are still in $(cgroup_dirs | tr '\n' ' ')"
	say "removing an earlier run's empty cgroups"
	remove_cgroups || fail "cannot remove an earlier run's cgroups"
fi
for stale in /tmp/e2e-node.??????; do
	[[ -d $stale ]] || continue
	if [[ -f $stale/sysctl.saved ]]; then
		while read -r key value; do echo "$value" >"/proc/sys/$key"; done <"$stale/sysctl.saved"
	fi
	grep -q " $stale" /proc/self/mountinfo && fail "$stale, left by an earlier run, has mounts: unmount them, then remove it"
	say "removing $stale, left by an earlier run (its sysctls restored)"
	rm -rf "$stale"
done

# 2. Binaries. CGO_ENABLED=0 everywhere: static binaries for FROM scratch
# images, and one build cache entry whoever calls this.
export CGO_ENABLED=0
arch=$(go env GOARCH)
version=${VERSION:-$(hack/version.sh)}
# test/node's own release in _bin (where make deploy-test and the node
# gate's test look for kube-apiserver), another in a directory of its own.
bin=$repo/test/node/_bin
[[ $kube_module == test/node ]] || bin=$bin/$kube_version
say "building kubelet, kube-apiserver, kube-controller-manager, kube-scheduler $kube_version (k8s.io/kubernetes from $kube_module/go.mod) into ${bin#"$repo/"}"
# The release's version, as Kubernetes' own build stamps it: kubelet reports
# it in its Node's status, where the checks read which kubelet they test.
IFS=. read -r kube_major kube_minor _ <<<"${kube_version#v}"
kube_ldflags="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=$kube_major -X k8s.io/component-base/version.gitMinor=$kube_minor"
started=$SECONDS
(cd "$kube_module" && go build -trimpath -ldflags "$kube_ldflags" -o "$bin/" \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler) &&
	(cd test/node && go build -trimpath -o "$bin/" ./cmd/e2e-node ./cmd/e2e-storage ./cmd/pause) || fail "building the Kubernetes components failed"
say "built in $((SECONDS - started))s"
if [[ $mode == storage ]]; then
	say "building kubectl, agnhost (the suite's test image) and e2e.test (go test -c k8s.io/kubernetes/test/e2e, unmodified) into test/node/_bin"
	started=$SECONDS
	(cd test/node && go build -trimpath -o "$bin/" k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/test/images/agnhost &&
		go test -c -trimpath -o "$bin/e2e.test" k8s.io/kubernetes/test/e2e) || fail "building kubectl, agnhost or e2e.test failed"
	say "built in $((SECONDS - started))s"
	# Tier 2's controller sidecars, at the versions csi-driver-host-path
	# deploys. Their go.mod has replace lines, which go install refuses:
	# built in their module's directory, with its go.mod and go.sum.
	read -ra tiers <<<"${E2E_STORAGE_TIERS:-1 2}"
	sidecars_missing=
	sidecar_rbac=()
	if [[ " ${tiers[*]} " == *" 2 "* ]]; then
		# hello-populator, the provisioning suite's volume populator: the
		# library's example. Its v1.0.x modules are not served by the module
		# proxy, v1.2.0 is. GOFLAGS=-mod=mod: its module has a vendor directory
		# with only modules.txt; the other two have none.
		say "building csi-provisioner, csi-attacher and hello-populator from the Go module proxy"
		started=$SECONDS
		for sidecar in github.com/kubernetes-csi/external-provisioner/v6@v6.3.0:./cmd/csi-provisioner \
			github.com/kubernetes-csi/external-attacher/v4@v4.12.0:./cmd/csi-attacher \
			github.com/kubernetes-csi/lib-volume-populator@v1.2.0:./example/hello-populator; do
			module=${sidecar%:*} package=${sidecar##*:}
			dir=$(go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
			if [[ -z $dir ]] || ! (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath -o "$bin/" "$package"); then
				sidecars_missing="${package##*/} could not be built from $module (see the output above)"
				say "$sidecars_missing: tier 2 will be SKIPPED"
				break
			fi
			# the sidecars' own RBAC, bound to their ServiceAccount
			[[ ! -f $dir/deploy/kubernetes/rbac.yaml ]] || sidecar_rbac+=("$dir/deploy/kubernetes/rbac.yaml")
		done
		say "built in $((SECONDS - started))s"
	fi
fi
make build-all PLATFORMS="linux/$arch" VERSION="$version" >/dev/null || fail "make build-all failed"

work=$(mktemp -d /tmp/e2e-node.XXXXXX)
chmod 755 "$work"
declare -A sysctl_saved
for key in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
	sysctl_saved[$key]=$(cat "/proc/sys/$key")
	echo "$key ${sysctl_saved[$key]}" >>"$work/sysctl.saved"
done
# Paths a node writes by default: none may appear on the host.
host_paths=(/var/lib/kubelet /var/lib/containerd /run/containerd /opt/containerd /var/log/pods
	/var/log/containers /etc/kubernetes /var/run/kubernetes /var/lib/cni /run/netns)
declare -A host_path_existed
for p in "${host_paths[@]}"; do
	[[ -e $p ]] && host_path_existed[$p]=1
done
node_pid=
node_ns=
cgroup_name=/e2e-node

cleanup() {
	local status=$? cleanup_began=$SECONDS
	trap - EXIT INT TERM
	set +e # clean up as much as possible, whatever fails
	if [[ -n $node_pid ]] && kill -0 "$node_pid" 2>/dev/null; then
		# PID 1 of the namespaces: SIGTERM makes it stop the node in order;
		# if it does not, SIGKILL ends every process in the namespace.
		kill -TERM "$(pgrep -P "$node_pid" || echo "$node_pid")" 2>/dev/null || true
		for _ in $(seq 1 120); do
			kill -0 "$node_pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$(pgrep -P "$node_pid" || echo "$node_pid")" 2>/dev/null || true
		wait "$node_pid" 2>/dev/null || true
	fi
	remove_cgroups || status=1
	local key
	for key in "${!sysctl_saved[@]}"; do
		echo "${sysctl_saved[$key]}" >"/proc/sys/$key" 2>/dev/null || {
			echo "e2e-node: could not restore $key" >&2
			status=1
		}
	done
	if [[ -d $work/logs ]]; then
		rm -rf "$logs_dir"
		cp -r "$work/logs" "$logs_dir"
		cp "$work"/*.yaml "$work"/*.toml "$logs_dir/" 2>/dev/null || true
		# The containers' logs of the pods still there at the end (kubelet
		# removes a deleted pod's): the last registrar's among them.
		cp -r "$work/pod-logs" "$logs_dir/" 2>/dev/null || true
		say "logs: $logs_dir"
	fi
	if grep -q " $work" /proc/self/mountinfo; then
		echo "e2e-node: mounts left under $work:" >&2
		grep " $work" /proc/self/mountinfo >&2
		status=1
	fi
	if [[ -n ${E2E_NODE_KEEP:-} ]]; then
		say "kept $work"
	else
		rm -rf "$work"
	fi

	# Check 6: nothing of the node is left outside the scratch directory.
	local left=() p ns
	[[ -z $(cgroup_dirs) ]] || left+=("cgroups $(cgroup_dirs | tr '\n' ' ')")
	if [[ -n $node_ns ]]; then
		for p in /proc/[0-9]*; do
			ns="$(readlink "$p/ns/pid" 2>/dev/null || true) $(readlink "$p/ns/net" 2>/dev/null || true)"
			[[ " $ns " == *" ${node_ns% *} "* || " $ns " == *" ${node_ns#* } "* ]] && left+=("process ${p#/proc/}")
		done
	fi
	for key in "${!sysctl_saved[@]}"; do
		[[ $(cat "/proc/sys/$key") == "${sysctl_saved[$key]}" ]] || left+=("sysctl $key")
	done
	grep -q " $work" /proc/self/mountinfo && left+=("mounts under $work")
	for p in "${host_paths[@]}"; do
		[[ -e $p && -z ${host_path_existed[$p]:-} ]] && left+=("$p")
	done
	[[ -n ${E2E_NODE_KEEP:-} || ! -e $work ]] || left+=("$work")
	if ((${#left[@]})); then
		echo "e2e-node: FAIL 6. clean-up: left behind: ${left[*]}" >&2
		status=1
	elif [[ -n $node_ns ]]; then
		say "PASS 6. clean-up in $((SECONDS - cleanup_began))s: no process in the node's PID or network namespace, no cgroup under $cgroup_name, no mount, nothing new in ${host_paths[*]}, kubelet's sysctls restored, scratch directory removed"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 3. Images.
bah() { TMPDIR=$work/tmp buildah --storage-driver vfs --root "$work/buildah/root" --runroot "$work/buildah/run" "$@"; }
mkdir -p "$work/images" "$work/build" "$work/tmp"
go build -trimpath -o "$work/build/mockdriver" ./test/mockdriver || fail "building test/mockdriver failed"
say "building the registrar's image from Dockerfile (BASE_IMAGE=scratch)"
bah bud --quiet --platform "linux/$arch" --build-arg BASE_IMAGE=scratch --build-arg VERSION="$version" \
	-f Dockerfile -t localhost/csi-node-driver-registrar:e2e-node . >/dev/null || fail "buildah could not build Dockerfile"
from_scratch() { # IMAGE BINARY
	local ctr
	ctr=$(bah from scratch)
	bah copy "$ctr" "$2" "/$(basename "$2")" >/dev/null
	bah config --entrypoint "[\"/$(basename "$2")\"]" --os linux --arch "$arch" "$ctr"
	bah commit --quiet "$ctr" "$1" >/dev/null
	bah rm "$ctr" >/dev/null
}
from_scratch localhost/e2e-node/mockdriver:1 "$work/build/mockdriver"
from_scratch localhost/e2e-node/pause:1 "$bin/pause"
image_names=(localhost/csi-node-driver-registrar:e2e-node localhost/e2e-node/mockdriver:1 localhost/e2e-node/pause:1)
upstream_bin=${E2E_NODE_UPSTREAM_REGISTRAR:-$repo/../shared/interop/upstream-csi-node-driver-registrar}
storage_args=()
upstream_missing=
if [[ -f $upstream_bin && -x $upstream_bin ]]; then
	say "building an image of upstream's registrar ($upstream_bin) FROM scratch"
	mkdir -p "$work/build/upstream"
	cp "$upstream_bin" "$work/build/upstream/csi-node-driver-registrar"
	from_scratch localhost/e2e-node/upstream-registrar:1 "$work/build/upstream/csi-node-driver-registrar"
	image_names+=(localhost/e2e-node/upstream-registrar:1)
else
	upstream_missing="no executable file at $upstream_bin, upstream's registrar (../shared/interop/README.md)"
	say "$upstream_missing: checks 4b and 4c will be SKIPPED"
fi
tree_image() { # IMAGE DIRECTORY ENTRYPOINT [CONFIG-FLAG...]: DIRECTORY's tree at /, PATH=/bin
	local ctr
	ctr=$(bah from scratch)
	bah copy "$ctr" "$2" / >/dev/null
	bah config --entrypoint "[\"$3\"]" --env PATH=/bin --os linux --arch "$arch" "${@:4}" "$ctr"
	bah commit --quiet "$ctr" "$1" >/dev/null
	bah rm "$ctr" >/dev/null
}
hostpath_missing=
if [[ -f $hostpath_bin && -x $hostpath_bin ]]; then
	# Checks 8a-8c: csi-driver-host-path's plugin, with busybox-static's
	# mount and umount, which it runs, and busybox as the volume pods' shell.
	say "building images of hostpathplugin ($hostpath_bin) and of busybox FROM scratch"
	mkdir -p "$work/build/hostpath/bin" "$work/build/busybox/bin"
	cp "$hostpath_bin" "$work/build/hostpath/hostpathplugin"
	cp /bin/busybox "$work/build/hostpath/bin/busybox"
	cp /bin/busybox "$work/build/busybox/bin/busybox"
	for applet in mount umount; do ln -s busybox "$work/build/hostpath/bin/$applet"; done
	for applet in sh sleep cat; do ln -s busybox "$work/build/busybox/bin/$applet"; done
	# On SIGTERM the plugin removes its socket, also one that the new pod's
	# driver has put at the path since (a maxSurge rollout, check 8b);
	# stopped with SIGKILL it leaves it. Its state is on disk at every change.
	tree_image localhost/e2e-node/hostpathplugin:1 "$work/build/hostpath" /hostpathplugin --stop-signal SIGKILL
	tree_image localhost/e2e-node/busybox:1 "$work/build/busybox" /bin/sh
	image_names+=(localhost/e2e-node/hostpathplugin:1 localhost/e2e-node/busybox:1)
else
	hostpath_missing="no executable file at $hostpath_bin, csi-driver-host-path's plugin (../shared/realdrivers/README.md)"
	say "$hostpath_missing: checks 8a-8c will be SKIPPED"
fi
if [[ $mode == storage ]]; then
	# The suite's images under local names: KUBE_TEST_REPO_LIST maps every
	# registry e2e.test knows to localhost (nothing is pulled), keeping the
	# images' names and tags, which e2e.test --list-images then prints.
	repo_list=$work/e2e-repo-list.yaml
	for key in promoterE2eRegistry buildImageRegistry invalidRegistry gcEtcdRegistry gcRegistry \
		sigStorageRegistry privateRegistry dockerLibraryRegistry cloudProviderGcpRegistry; do
		echo "$key: localhost/e2e-storage/${key,,}"
	done >"$repo_list"
	suite_images=$(KUBE_TEST_REPO_LIST=$repo_list "$bin/e2e.test" --list-images) || fail "e2e.test --list-images failed"
	suite_image() { # REGISTRY NAME: the suite's images of that name (tags differ), remapped
		grep "^localhost/e2e-storage/${1,,}/$2:" <<<"$suite_images" || fail "e2e.test --list-images names no $2 image in $1"
	}
	busybox_image=$(suite_image promoterE2eRegistry busybox | head -n1)
	# Tests ask for agnhost at several tags; the one binary answers them all.
	mapfile -t agnhost_images < <(suite_image promoterE2eRegistry agnhost)
	agnhost_image=${agnhost_images[0]}
	pause_image=$(suite_image gcRegistry pause | head -n1)
	mapfile -t nginx_images < <(suite_image promoterE2eRegistry nginx)
	# busybox: Debian's busybox-static with every applet, as the suite's
	# image has them. agnhost: built from k8s.io/kubernetes, on that busybox
	# rather than the real image's Alpine (its extra tools are for network
	# tests). pause: test/node's, the sandbox image already. nginx: a
	# stand-in, the busybox image under nginx's name; the volumes suite's
	# exec test runs only a shell script in it.
	say "building the suite's images: $busybox_image, ${agnhost_images[*]}, $pause_image, and busybox as ${nginx_images[*]}"
	mkdir -p "$work/build/suite-busybox/bin" "$work/build/suite-agnhost/bin"
	for tree in suite-busybox suite-agnhost; do
		cp /bin/busybox "$work/build/$tree/bin/busybox"
		for applet in $(/bin/busybox --list); do
			[[ $applet == busybox ]] || ln -s busybox "$work/build/$tree/bin/$applet"
		done
	done
	cp "$bin/agnhost" "$work/build/suite-agnhost/agnhost"
	tree_image "$busybox_image" "$work/build/suite-busybox" /bin/sh
	for name in "${nginx_images[@]}"; do bah tag "$busybox_image" "$name"; done
	tree_image "$agnhost_image" "$work/build/suite-agnhost" /agnhost --cmd pause
	for name in "${agnhost_images[@]:1}"; do bah tag "$agnhost_image" "$name"; done
	from_scratch "$pause_image" "$bin/pause"
	image_names+=("$busybox_image" "${nginx_images[@]}" "${agnhost_images[@]}" "$pause_image")
	storage_args=(-storage-repo-list "$repo_list" -storage-tiers "$(
		IFS=,
		echo "${tiers[*]}"
	)" -sidecars-missing "$sidecars_missing")
	if [[ " ${tiers[*]} " == *" 2 "* && -z $sidecars_missing ]]; then
		from_scratch localhost/e2e-node/csi-provisioner:1 "$bin/csi-provisioner"
		from_scratch localhost/e2e-node/csi-attacher:1 "$bin/csi-attacher"
		image_names+=(localhost/e2e-node/csi-provisioner:1 localhost/e2e-node/csi-attacher:1)
		# hello-populator under the name and tag of the suite's manifest,
		# which e2e.test embeds and --list-images does not print.
		populator_manifest=$(cd test/node && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/e2e/testing-manifests/storage-csi/any-volume-datasource/hello-populator-deploy.yaml
		populator_image=$(sed -n 's|^ *image: registry\.k8s\.io/sig-storage/\(hello-populator:.*\)$|localhost/e2e-storage/sigstorageregistry/\1|p' "$populator_manifest")
		[[ -n $populator_image ]] || fail "$populator_manifest names no registry.k8s.io/sig-storage/hello-populator image"
		from_scratch "$populator_image" "$bin/hello-populator"
		image_names+=("$populator_image")
		storage_args+=(-storage-rbac "$(
			IFS=,
			echo "${sidecar_rbac[*]}"
		)")
	fi
fi
fail_on_skip=false
case ${CI:-} in
"" | false | 0) ;;
*) fail_on_skip=true ;;
esac
archives=()
for image in "${image_names[@]}"; do
	archive=$work/images/$(tr /: __ <<<"$image").tar
	bah push --quiet "$image" "docker-archive:$archive:$image" >/dev/null || fail "buildah push $image failed"
	archives+=("$archive")
done
rm -rf "$work/buildah"

# 4. The node. kubelet's cgroup root must exist in every hierarchy, cpuset's
# with its parent's CPUs and memory nodes.
for h in $(hierarchies); do
	mkdir -p "$h/e2e-node"
	if [[ -f $h/cpuset.cpus && ! -f $h/cgroup.controllers ]]; then
		cat "$h/cpuset.cpus" >"$h/e2e-node/cpuset.cpus"
		cat "$h/cpuset.mems" >"$h/e2e-node/cpuset.mems"
	fi
done

say "scratch directory $work"
images=$(
	IFS=,
	echo "${archives[*]}"
)
if [[ $mode == storage ]]; then
	program=("$bin/e2e-storage" "${storage_args[@]}")
else
	program=("$bin/e2e-node" -max-rollout-gap "${E2E_NODE_MAX_ROLLOUT_GAP:-0s}" -checks "${E2E_NODE_CHECKS:-}")
fi
unshare --net --mount --pid --fork --mount-proc --propagation private -- \
	bash -c 'mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/log && mount -t tmpfs tmpfs /var/lib && exec "$@"' e2e-node-ns \
	"${program[@]}" -work "$work" -bin "$bin" -repo "$repo" -images "$images" \
	-upstream-missing "$upstream_missing" -fail-on-skip="$fail_on_skip" -hostpath-missing "$hostpath_missing" &
node_pid=$!
# The namespaces' identities, to check at the end that nothing runs in them.
for _ in $(seq 1 100); do
	child=$(pgrep -P "$node_pid" || true)
	[[ -n $child ]] && node_ns="$(readlink "/proc/$child/ns/pid") $(readlink "/proc/$child/ns/net")" && break
	sleep 0.1
done
wait "$node_pid"
