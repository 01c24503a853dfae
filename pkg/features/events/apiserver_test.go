//go:build apiserver

package events

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// A rejection loop against a real kube-apiserver, with deploy/events'
// Role and a token bound to the pod, as kubelet mounts it: one Warning
// Event with a count, then a Normal one once kubelet accepts the driver.
func TestAgainstKubeAPIServer(t *testing.T) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	s := apiserver.StartForTest(t, repo)
	const account = "csi-node"
	if _, err := s.Do(http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "application/json", []byte(`{"metadata":{"name":"`+account+`"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyNamespacedRBAC(filepath.Join(repo, "deploy", "events", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreatePod("csi-node-x7k2p", "node-1", account); err != nil {
		t.Fatal(err)
	}
	var created corev1.Pod
	answer, err := s.Do(http.MethodGet, "/api/v1/namespaces/default/pods/csi-node-x7k2p", "", nil)
	if err == nil {
		err = json.Unmarshal(answer, &created)
	}
	if err != nil {
		t.Fatal(err)
	}
	token, err := s.Token(account, created.Name)
	if err != nil {
		t.Fatal(err)
	}
	pod := Pod{Name: created.Name, Namespace: "default", UID: string(created.UID), Node: "node-1"}
	cfg := &rest.Config{Host: s.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}}
	// The authorizer learns of the RoleBinding a moment after its creation,
	// and the recorder drops an Event it was refused.
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the pod's token may create Events", func() bool {
		resp, err := client.Post(s.URL+"/api/v1/namespaces/default/events?dryRun=All", "application/json",
			strings.NewReader(`{"metadata":{"generateName":"probe-"},"involvedObject":{"kind":"Pod","namespace":"default","name":"`+pod.Name+`"},"reason":"Probe","type":"Normal"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusCreated
	})
	r, err := New(t.Context(), Config{Pod: pod, REST: cfg})
	if err != nil {
		t.Fatal(err)
	}
	events := func() []corev1.Event {
		t.Helper()
		// kubectl describe pod's selection.
		selector := url.QueryEscape("involvedObject.kind=Pod,involvedObject.name=" + pod.Name + ",involvedObject.uid=" + pod.UID)
		answer, err := s.Do(http.MethodGet, "/api/v1/namespaces/default/events?fieldSelector="+selector, "", nil)
		var list corev1.EventList
		if err == nil {
			err = json.Unmarshal(answer, &list)
		}
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	st := registration.Status{DriverName: "test.csi.example.com", State: registration.Rejected}
	for range 3 {
		r.Observe(st, []registration.Transition{registration.KubeletRejected{Reason: "no"}})
	}
	poll.Until(t, "three rejections counted in one Event", func() bool {
		e := events()
		return len(e) == 1 && e[0].Count == 3
	})
	if e := events()[0]; e.Type != corev1.EventTypeWarning || e.Reason != ReasonRejected || e.Source.Component != Component || e.Source.Host != pod.Node {
		t.Errorf("the rejection's Event is %+v, want a Warning %s from %s on %s", e, ReasonRejected, Component, pod.Node)
	}
	st.State = registration.Registered
	r.Observe(st, []registration.Transition{registration.KubeletAccepted{}, registration.DriverRegistered{}})
	poll.Until(t, "the registration's Normal Event", func() bool {
		for _, e := range events() {
			if e.Type == corev1.EventTypeNormal && e.Reason == ReasonRegistered {
				return true
			}
		}
		return false
	})
}
