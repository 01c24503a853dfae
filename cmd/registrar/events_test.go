package main

import (
	"io"
	"strings"
	"testing"
)

// --events names the downward API entries that are missing, and only those.
func TestEventsNeedThePodFromTheDownwardAPI(t *testing.T) {
	for _, tc := range []struct {
		name, podName, podUID string
		want                  []string
		notWant               []string
	}{
		{"none", "", "", []string{"--events: ", "{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}", "{name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}", "{name: POD_UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}", "deploy/events"}, nil},
		{"the UID only", "csi-node-x", "", []string{"POD_UID", "POD_NAMESPACE"}, []string{"POD_NAME,"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(podNameEnv, tc.podName)
			t.Setenv(podNamespaceEnv, "")
			t.Setenv(podUIDEnv, tc.podUID)
			o, err := parseFlags("registrar", []string{"--kubelet-registration-path=/k", "--events"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = o.validate()
			if err == nil {
				t.Fatal("validate() = nil, want the missing variables")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("validate() = %v, want it to say %q", err, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(err.Error(), w) {
					t.Errorf("validate() = %v, want it not to say %q", err, w)
				}
			}
		})
	}
	t.Setenv(podNameEnv, "csi-node-x")
	t.Setenv(podNamespaceEnv, "storage")
	t.Setenv(podUIDEnv, "uid-1")
	o, err := parseFlags("registrar", []string{"--kubelet-registration-path=/k", "--events"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Errorf("validate() with the Pod known = %v", err)
	}
	if pod, _ := o.pod(); pod.Name != "csi-node-x" || pod.Namespace != "storage" || pod.UID != "uid-1" {
		t.Errorf("pod() = %+v", pod)
	}
}
