package main

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

// revision is a DaemonSet template's. hostNetwork (there is no CNI here)
// puts both pods of a maxSurge update in one network namespace, so each
// revision has its own HTTP port, except check 4d's.
type revision int

const (
	revSharedPort     revision = 6
	revSharedPortNext revision = 7
)

func (r revision) sharesPort() bool { return r == revSharedPort || r == revSharedPortNext }

func (r revision) port() int32 {
	if r.sharesPort() {
		return 9820
	}
	return 9808 + int32(r)
}

const (
	revOurs      revision = 3
	revUpstream  revision = 4
	revOursAgain revision = 5
)

func (r revision) upstream() bool {
	return r == revUpstream || r == revConfirmUpstream
}

func (r revision) template() localnode.Template {
	return localnode.Template{Revision: int(r), Port: r.port(), Upstream: r.upstream()}
}

func (s *suite) daemonSet(rev revision) (*appsv1.DaemonSet, error) {
	ds, err := s.DaemonSet(rev.template())
	if err != nil {
		return nil, err
	}
	reg := localnode.Container(&ds.Spec.Template.Spec, localnode.RegistrarName)
	if rev.sharesPort() {
		if err := dropHostPort(reg, rev.port()); err != nil {
			return nil, fmt.Errorf("deploy/daemonset.yaml: %w", err)
		}
	}
	if rev == revNodeGate {
		withAccount(&ds.Spec.Template.Spec, reg)
		reg.Args = append(reg.Args, "--remove-node-taint="+startupTaint, "--node-condition")
	}
	if rev == revDriverLiveness {
		return ds, withDriverLiveness(s.Repo, ds)
	}
	return ds, nil
}

// dropHostPort: with hostNetwork a declared port is a host port, and the
// scheduler does not place a pod whose host port another pod on the node
// declares: the new pod of a maxSurge update would stay Pending.
func dropHostPort(ctr *corev1.Container, port int32) error {
	ctr.Ports = nil
	for _, probe := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe} {
		if probe.HTTPGet == nil {
			return fmt.Errorf("the registrar's liveness and readiness probes are no longer httpGet; adapt test/node")
		}
		probe.HTTPGet.Port = intstr.FromInt32(port)
	}
	return nil
}

// own is a check's own DaemonSet, with deploy/csinode's service account
// (account) or deploy/events' flag and variables (events).
type own struct {
	localnode.Own
	account, events bool
}

func (s *suite) ownDaemonSet(rev revision, o own) (*appsv1.DaemonSet, error) {
	ds, err := s.OwnDaemonSet(rev.template(), o.Own)
	if err != nil {
		return nil, err
	}
	pod := &ds.Spec.Template.Spec
	reg := localnode.Container(pod, localnode.RegistrarName)
	if o.account || o.events {
		withAccount(pod, reg)
	}
	if o.events {
		for name, field := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"} {
			reg.Env = append(reg.Env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: field}}})
		}
		reg.Args = append(reg.Args, "--events")
	}
	return ds, nil
}

// createOwn creates a check's own DaemonSet ds, with a watch of its
// driver. end (endOwn) acts once.
func (s *suite) createOwn(ctx context.Context, check string, ds *appsv1.DaemonSet, driver string) (watch *localnode.Watch, end func() error, err error) {
	watch, stopWatch := s.StartWatch(ctx, driver)
	var once sync.Once
	var endErr error
	end = func() error {
		once.Do(func() {
			defer stopWatch()
			endErr = s.endOwn(ctx, check, ds.Name, driver)
		})
		return endErr
	}
	if _, err := s.Client.AppsV1().DaemonSets(localnode.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return watch, end, fmt.Errorf("create DaemonSet %s: %w", ds.Name, err)
	}
	return watch, end, nil
}

// endOwn keeps the pods' logs in _logs/pod-logs-<check>/ and removes the
// DaemonSet.
func (s *suite) endOwn(ctx context.Context, check, dsName, driver string) error {
	s.savePodLogs(check, dsName)
	err := s.RemoveDaemonSet(ctx, dsName, driver)
	if err != nil {
		fmt.Printf("e2e-node: check %s: %v\n", check, err)
	}
	return err
}
