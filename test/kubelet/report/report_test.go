package report

import "testing"

func TestParseOperationFailure(t *testing.T) {
	const prefix = `E1121 06:27:00.032603   27942 goroutinemap.go:150] Operation for "/tmp/e2e1/registry/a.example.com-reg.sock" failed. No retries permitted until 2026-11-21 06:27:00.532517612 +0000 UTC m=+1.663095753 (durationBeforeRetry 500ms). Error: `
	const reason = "RegisterPlugin error -- plugin registration failed with err: rpc error: code = Internal desc = mockdriver: NodeGetInfo fails on request"
	tests := []struct {
		name   string
		line   string
		want   OperationFailure
		wantOK bool
	}{
		{
			name:   "notification delivered",
			line:   prefix + reason,
			want:   OperationFailure{Socket: "/tmp/e2e1/registry/a.example.com-reg.sock", Error: reason},
			wantOK: true,
		},
		{
			name:   "notification failed",
			line:   prefix + reason + ": rpc error: code = Unavailable desc = error reading from server: EOF",
			want:   OperationFailure{Socket: "/tmp/e2e1/registry/a.example.com-reg.sock", Error: reason + ": rpc error: code = Unavailable desc = error reading from server: EOF"},
			wantOK: true,
		},
		{
			name: "other log line",
			line: `I1121 06:27:00.023910   27942 reconciler.go:161] "OperationExecutor.RegisterPlugin started"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseOperationFailure(tt.line)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("ParseOperationFailure() = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestEventRoundTrip(t *testing.T) {
	in := Event{Kind: Register, Driver: "a.example.com", Endpoint: "/csi.sock", Versions: []string{"1.0.0"},
		State: State{Drivers: []Driver{{Name: "a.example.com", NodeID: "n1"}}, NodeIDs: map[string]string{"a.example.com": "n1"}}}
	out, err := Decode(in.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := out.State.Driver("a.example.com"); !ok || d.NodeID != "n1" || out.Endpoint != in.Endpoint || out.State.NodeIDs["a.example.com"] != "n1" {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}
