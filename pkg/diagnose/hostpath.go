package diagnose

import (
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// hostPathOf tells where a file of this container is on the host, from the
// mount that holds it (/proc/self/mountinfo): that mount's root within its
// file system, followed by the rest of the path. The result is the host's
// path when that file system is the host's root file system, and a suffix
// of it otherwise (a file system mounted at /var/lib/kubelet, say). ok is
// false when no bind mount of a part of a file system holds the file (the
// mount's root is "/": the container's own file system, or a whole one),
// or when the mounts cannot be read.
func hostPathOf(path string) (hostPath string, mount *mountinfo.Info, ok bool) {
	path = filepath.Clean(path)
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(path))
	if err != nil || len(mounts) == 0 {
		return "", nil, false
	}
	// The mount nearest to the file; the last one listed wins a tie, as
	// it is mounted over the others.
	nearest := mounts[0]
	for _, m := range mounts[1:] {
		if len(m.Mountpoint) >= len(nearest.Mountpoint) {
			nearest = m
		}
	}
	if nearest.Root == "/" {
		return "", nil, false
	}
	rest := strings.TrimPrefix(path, nearest.Mountpoint)
	return filepath.Join(nearest.Root, rest), nearest, true
}
