package main

// What reacts to the registration without being part of it: each observer
// is told of every change of its status (registration.Observer), on the
// registration's goroutine, and does one thing.

import (
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
	"github.com/csi-registrar/node-driver-registrar/pkg/httpport"
	"github.com/csi-registrar/node-driver-registrar/pkg/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// newlyRegistered tells whether kubelet accepted the driver, or confirmed
// it again (after each of its restarts), or this instance took over a
// socket kubelet had registered.
func newlyRegistered(old, now registration.Status) bool {
	return now.State == registration.Registered && (old.State != registration.Registered || verdictTime(now) != verdictTime(old))
}

// newlyRejected tells whether kubelet rejected the driver once more.
func newlyRejected(old, now registration.Status) bool {
	return now.State == registration.Rejected && now.RegistrationFailures > old.RegistrationFailures
}

// newlyPublished tells whether the registration published its socket again.
func newlyPublished(old, now registration.Status) bool {
	return now.LastPublished != nil && (old.LastPublished == nil || !now.LastPublished.Equal(*old.LastPublished))
}

func verdictTime(st registration.Status) time.Time {
	if st.LastVerdict == nil {
		return time.Time{}
	}
	return st.LastVerdict.Time
}

// reportTermination leaves kubelet's rejection, or its silence, where
// kubectl describe pod shows it once the container stops.
func reportTermination(logger klog.Logger, t *terminationMessage) registration.Observer {
	return func(old, now registration.Status) {
		switch {
		case newlyRejected(old, now):
			t.write(logger, "kubelet rejected the plugin: "+now.LastVerdict.Reason)
		case now.State == registration.KubeletSilent && old.State != registration.KubeletSilent:
			t.write(logger, now.Reason)
		}
	}
}

// tellGate passes kubelet's verdicts, and the withdrawal of the socket, to
// the node gate.
func tellGate(gate *nodegate.Gate) registration.Observer {
	return func(old, now registration.Status) {
		switch {
		case newlyRegistered(old, now):
			gate.Registered(now.DriverName)
		case newlyRejected(old, now):
			gate.Rejected(now.DriverName, now.LastVerdict.Reason)
		case now.Withdrawn && !old.Withdrawn:
			gate.Withdrawn(now.DriverName)
		}
	}
}

// tightenOnceRegistered applies steadyGOGC (tuning.go) once kubelet first
// accepted the driver.
func tightenOnceRegistered(logger klog.Logger) registration.Observer {
	tighten := sync.OnceFunc(func() {
		if env, ok := os.LookupEnv("GOGC"); ok {
			logger.V(2).Info("Keeping GOGC from the environment", "GOGC", env)
			return
		}
		debug.SetGCPercent(steadyGOGC)
		logger.Info("Start-up is over: the garbage collector now keeps the heap small", "GOGC", steadyGOGC)
	})
	return func(old, now registration.Status) {
		if newlyRegistered(old, now) {
			tighten()
		}
	}
}

// selinuxWatch asks what SELinux says of the registration socket after
// each publication and when kubelet stays silent, each time on a goroutine
// of its own, and keeps the latest answer for /status.
type selinuxWatch struct {
	logger   klog.Logger
	inspect  func(socket string) *selinuxcheck.Report
	mu       sync.Mutex
	asked    time.Time // the publication that latest is about
	latest   atomic.Pointer[selinuxcheck.Report]
	inflight sync.WaitGroup
}

func (w *selinuxWatch) observe(old, now registration.Status) {
	silent := now.State == registration.KubeletSilent && old.State != registration.KubeletSilent
	if !silent && !newlyPublished(old, now) {
		return
	}
	publication, socket := *now.LastPublished, now.SocketPath
	w.inflight.Go(func() {
		report := w.inspect(socket)
		w.mu.Lock()
		stale := publication.Before(w.asked)
		if !stale {
			w.asked = publication
			w.latest.Store(report)
		}
		w.mu.Unlock()
		switch {
		case !silent || stale || report == nil:
		case report.Problem():
			w.logger.Info("kubelet has not called GetInfo on the registration socket, and SELinux does not let it: see the selinux value", "path", socket, "selinux", report.Summary())
		default:
			w.logger.Info("kubelet has not called GetInfo on the registration socket; SELinux may be why, which this registrar cannot tell: see the selinux value", "path", socket, "selinux", report.Summary())
		}
	})
}

// report is the latest answer, nil where SELinux is off or not asked yet.
func (w *selinuxWatch) report() *selinuxcheck.Report { return w.latest.Load() }

// releaseOnStepAside passes the --http-endpoint port between the instances
// of a rolling update on one network (hostNetwork pods; see pkg/httpport):
// once this instance has stepped aside for another (after a handover, or
// when its socket was replaced), it stops listening, so that the new owner
// of the registration, which waits for the port, answers the probes of both
// pods; its own publications claim p back. On a pod network nobody waits:
// the old pod is being replaced, and it no longer answers its probes.
func releaseOnStepAside(logger klog.Logger, p *httpport.Port) registration.Observer {
	return func(old, now registration.Status) {
		if newlyPublished(old, now) {
			p.Claim()
		}
		if now.State == registration.Superseded && old.State != registration.Superseded && p.Release() {
			logger.Info("Stopped listening on the HTTP endpoint's address: the instance that now serves the registration socket answers the probes there if it shares this network")
		}
	}
}
