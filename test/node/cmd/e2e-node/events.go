package main

// Check 12b's Events (issue 46): the registrar of a driver that kubelet
// rejects three times runs with deploy/events' flag, variables and Role;
// its Pod then shows one Warning Event with count 3, and a Normal one once
// kubelet accepted the driver, as kubectl describe pod selects them.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// checkEvents waits for the Pod's Events after kubelet accepted the driver
// that it rejected n times, and returns the problems, and the Events as
// kubectl describe pod would list them.
func (s *suite) checkEvents(ctx context.Context, pod corev1.Pod, n int) (problems []string, seen string) {
	selector := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod.Name, "involvedObject.uid": string(pod.UID)}.String()
	var rejected, registered *corev1.Event
	err := waitFor(ctx, "the registrar's Events", 30*time.Second, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		list, err := s.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		var lines []string
		rejected, registered = nil, nil
		for i, e := range list.Items {
			lines = append(lines, fmt.Sprintf("%s %s (x%d) from %s: %s", e.Type, e.Reason, e.Count, e.Source.Component, e.Message))
			switch {
			case e.Type == corev1.EventTypeWarning && e.Reason == "RegistrationRejected":
				rejected = &list.Items[i]
			case e.Type == corev1.EventTypeNormal && e.Reason == "Registered":
				registered = &list.Items[i]
			}
		}
		seen = strings.Join(lines, "; ")
		return rejected != nil && rejected.Count == int32(n) && registered != nil, nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("want one Warning RegistrationRejected with count %d and a Normal Registered on the registrar's Pod: %v; Events: %s", n, err, seen))
	}
	return problems, seen
}
