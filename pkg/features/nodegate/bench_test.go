package nodegate

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
)

// BenchmarkVerdict is the cost of the gate with both features on: one
// acceptance by kubelet applied to the node (three requests), over HTTPS to a local server that
// answers as the API server does (a GET of the node and a JSON patch of
// its taints, a strategic merge patch of its status), the connection kept.
// With the features off the gate does not exist: the registration's hooks
// are nil checks.
func BenchmarkVerdict(b *testing.B) {
	f := newFakeAPI(b, "n1")
	client := f.client()
	g := New(Config{NodeName: "n1", TaintKeys: []string{"example.com/agent-not-ready"}, Condition: true, Client: client})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := logr.Discard()
	var done applied
	b.ReportAllocs()
	for b.Loop() {
		f.mu.Lock()
		f.taints = []taint{{"node.kubernetes.io/not-ready", "NoSchedule"}, {"example.com/agent-not-ready", "NoSchedule"}}
		f.mu.Unlock()
		// The condition must change for its patch to be sent again.
		g.Rejected("example.com", "no")
		g.Registered("example.com")
		if err := g.sync(ctx, logger, &done); err != nil {
			b.Fatal(err)
		}
		for len(f.requests) > 0 {
			<-f.requests
		}
	}
}
