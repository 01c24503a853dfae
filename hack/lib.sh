# Sourced by the scripts in hack/: their messages, and the tools they
# install with apt-get when missing.

script=$(basename "$0" .sh)

fail() {
	echo "$script: FAIL: $*" >&2
	exit 1
}
step() { echo "$script: $*"; }

# install_missing COMMAND PACKAGE [APT_OPTION...]: installs Debian's
# PACKAGE when COMMAND is not found. Needs root.
install_missing() {
	command -v "$1" >/dev/null 2>&1 && return
	step "$1 is missing: installing Debian's $2 package with apt-get"
	[[ $(id -u) == 0 ]] || fail "$1 is not installed and installing it needs root: apt-get install $2"
	apt-get update -q || fail "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${@:3}" "$2" ||
		fail "apt-get install $2 failed"
}

# install_promtool: Prometheus' promtool, from Debian's prometheus package
# (without prometheus-node-exporter, which the package recommends), when
# missing; says which version runs.
install_promtool() {
	install_missing promtool prometheus --no-install-recommends
	promtool --version 2>&1 | head -1
}

# scratch_dir PREFIX: a new directory under /tmp (Unix socket paths are
# short: it stays near the root), in $work. At exit, the processes whose
# PIDs are added to pids are killed, and $work is removed.
pids=()
scratch_dir() {
	work=$(mktemp -d "/tmp/$1.XXXXXX")
	trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
}

# buildah_storage PREFIX: a new directory $work under /tmp for buildah's
# storage (vfs), used by bah; at exit, its containers and the directory are
# removed.
buildah_storage() {
	work=$(mktemp -d "/tmp/$1.XXXXXX")
	trap 'bah rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
}
bah() {
	buildah --storage-driver vfs --root "$work/root" --runroot "$work/run" "$@"
}
