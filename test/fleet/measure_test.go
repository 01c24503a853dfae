package main

import (
	"math"
	"net/http"
	"testing"
)

func TestOperation(t *testing.T) {
	for _, tc := range []struct{ method, url, want string }{
		{http.MethodGet, "https://h/api/v1/nodes/node-1", "GET nodes"},
		{http.MethodPatch, "https://h/api/v1/nodes/node-1/status", "PATCH nodes/status"},
		{http.MethodGet, "https://h/apis/storage.k8s.io/v1/csinodes?fieldSelector=metadata.name%3Dn", "LIST csinodes"},
		{http.MethodGet, "https://h/apis/storage.k8s.io/v1/csinodes?watch=true&fieldSelector=metadata.name%3Dn", "WATCH csinodes"},
		{http.MethodPut, "https://h/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1", "PUT leases"},
		{http.MethodPost, "https://h/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", "POST leases"},
		{http.MethodGet, "https://h/healthz", "GET /healthz"},
	} {
		req, err := http.NewRequest(tc.method, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := operation(req); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.url, got, tc.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	// 100 observations: 50 up to 0.1 s, 49 more up to 0.2 s, one up to 1 s.
	buckets := []bucket{{0.1, 50}, {0.2, 99}, {1, 100}, {math.Inf(1), 100}}
	for _, tc := range []struct{ q, want float64 }{
		{0.5, 0.1},
		{0.99, 0.2},
		{0.995, 0.6},
	} {
		if got := quantile(tc.q, buckets); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(0.99, []bucket{{0.1, 0}, {math.Inf(1), 0}}); !math.IsNaN(got) {
		t.Errorf("quantile of no observations = %v, want NaN", got)
	}
}
