package registration

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"
)

// Backoff of a publication that failed for want of a resource: the same as
// the registrar's other transient faults (the calls to the driver).
const (
	publishRetryInitial = 100 * time.Millisecond
	publishRetryMax     = 5 * time.Second
)

// isShortage tells whether err comes from a resource of the node or the
// process that runs out for a while: file descriptors, inodes, disk quota,
// memory or socket buffers. Publishing again later may well work; exiting
// would leave the node without a registration until a restart.
func isShortage(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC, syscall.EDQUOT, syscall.ENOMEM, syscall.ENOBUFS} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// pendingPublication is a publication that failed for want of a resource,
// to be tried again when its timer fires.
type pendingPublication struct {
	reason string
	timer  *time.Timer
}

// publish puts a new socket in place (see publishNow). When the node or
// the process is short of a resource, it tries again after a backoff
// instead of failing, and says why in the log and the status.
func (l *loop) publish(reason string) error {
	err := l.publishNow(reason)
	if errors.Is(err, fs.ErrPermission) && l.cfg.InspectSELinux != nil {
		// The registry directory's label may be why.
		if report := l.cfg.InspectSELinux(""); report != nil {
			return fmt.Errorf("%w; %s", err, report.Summary())
		}
	}
	if err == nil || !isShortage(err) {
		return err
	}
	previous := l.st.publishError
	l.st.publishError = err.Error()
	l.st.nextPublish = time.Now().Add(l.publishBackoff)
	if previous != err.Error() {
		l.logger.Error(err, "Cannot publish the registration socket: trying again after a backoff", "reason", reason, "backoff", l.publishBackoff)
	} else {
		l.logger.V(2).Info("Cannot publish the registration socket yet", "reason", reason, "backoff", l.publishBackoff, "err", err)
	}
	l.cancelPendingPublication()
	l.pending = &pendingPublication{reason: reason, timer: time.NewTimer(l.publishBackoff)}
	l.publishBackoff = min(2*l.publishBackoff, publishRetryMax)
	return nil
}

func (l *loop) pendingChannel() <-chan time.Time {
	if l.pending == nil {
		return nil
	}
	return l.pending.timer.C
}

// cancelPendingPublication forgets a publication to be tried again: a
// socket was published, or another instance owns the path now.
func (l *loop) cancelPendingPublication() {
	if l.pending != nil {
		l.pending.timer.Stop()
		l.pending = nil
	}
}

// publishPending tries a failed publication again, unless another
// instance published a socket meanwhile.
func (l *loop) publishPending() error {
	reason := l.pending.reason
	l.pending = nil
	pub, path := l.pub, l.st.socketPath
	found := inspect(path)
	if found.err == nil && found.socket && (pub == nil || !pub.sock.isOurs(found.info)) {
		return l.foreignSocket(pub, path, found.info)
	}
	return l.publish(reason)
}
