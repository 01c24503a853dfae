package main

// What reacts to the registration without being part of it: each observer
// runs on the registration's goroutine and does one thing.

import (
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/features/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/httpport"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// reportTermination leaves kubelet's rejection, or its silence, where
// kubectl describe pod shows it once the container stops.
func reportTermination(logger klog.Logger, t *terminationMessage) registration.Observer {
	return func(now registration.Status, happened []registration.Transition) {
		for _, tr := range happened {
			switch tr := tr.(type) {
			case registration.KubeletRejected:
				t.write(logger, "kubelet rejected the plugin: "+tr.Reason)
			case registration.KubeletWentSilent:
				t.write(logger, now.Reason)
			}
		}
	}
}

// tellGate passes kubelet's verdicts and the socket's withdrawal to the gate.
func tellGate(gate *nodegate.Gate) registration.Observer {
	return func(now registration.Status, happened []registration.Transition) {
		for _, tr := range happened {
			switch tr := tr.(type) {
			case registration.DriverRegistered:
				gate.Registered(now.DriverName)
			case registration.KubeletRejected:
				gate.Rejected(now.DriverName, tr.Reason)
			case registration.CSINodeUnconfirmed:
				gate.Unconfirmed(now.DriverName, now.Reason)
			case registration.Withdrawn:
				gate.Withdrawn(now.DriverName)
			}
		}
	}
}

// releaseOnStepAside passes the --http-endpoint port between the instances of
// a rolling update on hostNetwork (pkg/httpport): once stepped aside, this one
// stops listening if another waits for the port, so that the registration's
// owner answers both pods' probes; its own publications claim it back.
func releaseOnStepAside(logger klog.Logger, p *httpport.Port) registration.Observer {
	return func(_ registration.Status, happened []registration.Transition) {
		for _, tr := range happened {
			switch tr.(type) {
			case registration.Published:
				p.Claim()
			case registration.SteppedAside:
				if p.Release() {
					logger.Info("Stopped listening on the HTTP endpoint's address: the instance that now serves the registration socket waits for it on this network, and answers the probes there from now on")
				}
			}
		}
	}
}
