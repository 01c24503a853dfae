package main

// What reacts to the registration without being part of it: each observer
// is told of every change of its status (registration.Observer), on the
// registration's goroutine, and does one thing.

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/features/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/httpport"
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
		case now.State == registration.Unconfirmed && old.State == registration.Registered:
			gate.Unconfirmed(now.DriverName, now.Reason)
		case now.Withdrawn && !old.Withdrawn:
			gate.Withdrawn(now.DriverName)
		}
	}
}

// releaseOnStepAside passes the --http-endpoint port between the instances
// of a rolling update on one network (hostNetwork pods; see pkg/httpport):
// once this instance has stepped aside for another (after a handover, or
// when its socket was replaced), it stops listening if another instance
// waits for the port on this network, so that the new owner of the
// registration answers the probes of both pods; its own publications claim
// p back. On a pod network nobody waits, and it goes on answering its own.
func releaseOnStepAside(logger klog.Logger, p *httpport.Port) registration.Observer {
	return func(old, now registration.Status) {
		if newlyPublished(old, now) {
			p.Claim()
		}
		if now.State == registration.Superseded && old.State != registration.Superseded && p.Release() {
			logger.Info("Stopped listening on the HTTP endpoint's address: the instance that now serves the registration socket waits for it on this network, and answers the probes there from now on")
		}
	}
}
