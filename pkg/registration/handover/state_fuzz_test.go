package handover

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// The instance B that the fuzzed state reaches.
const (
	fuzzDriver   = "csi.example.com"
	fuzzEndpoint = "/var/lib/kubelet/plugins/csi.example.com/csi.sock"
)

// FuzzHandoverState decodes what the owner A sends with its socket and
// checks it as the new instance B does: whatever passes is for B's driver
// and endpoint and for the file B found at the path, and of version 1.
func FuzzHandoverState(f *testing.F) {
	// A file of its own, removed by name, which every system can: Wine 8's
	// os.RemoveAll cannot remove a f.TempDir holding it.
	file, err := os.CreateTemp("", fuzzDriver+"-reg.sock.")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.Remove(file.Name()) })
	if err := file.Close(); err != nil {
		f.Fatal(err)
	}
	before, _, err := sockfile.Lstat(file.Name())
	if err != nil {
		f.Fatal(err)
	}
	dev, ino := before.Dev, before.Ino
	verdict := &Verdict{Registered: true, Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)}
	for _, st := range []State{
		{Version: Version, Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino, Verdict: verdict},
		{Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino, Verdict: verdict},
		{Version: 2, Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino},
		{Version: -1, Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino},
		{Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino + 1},
		{Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev + 1, Ino: ino},
		{Driver: "other.example.com", Endpoint: fuzzEndpoint, Dev: dev, Ino: ino},
		{Driver: fuzzDriver, Endpoint: "/other.sock", Dev: dev, Ino: ino},
		{Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino, Verdict: &Verdict{Reason: "rejected\x00"}},
	} {
		body, err := json.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	for _, body := range []string{
		`{}`, `null`, `{"dev":-1}`, `{"ino":1e30}`, `{"dev":1.5}`, `{"verdict":{"time":"x"}}`,
		`{"verdict":{"time":"2025-01-02T03:04:05+23:59"}}`, `{"verdict":null}`, `{"Verdict":{}}`, ``, `[`,
		`{"version":"1"}`, `{"version":1.0}`, `{"version":1e0}`, `{"version":null}`, `{"Version":2}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeState(data)
		if err != nil {
			return
		}
		if st.Version != Version {
			t.Fatalf("state %s decoded as version %d, want %d", data, st.Version, Version)
		}
		var raw struct{ Version int }
		if json.Unmarshal(data, &raw) == nil && raw.Version != 0 && raw.Version != Version {
			t.Fatalf("state %s of version %d accepted", data, raw.Version)
		}
		if err := checkState(st, fuzzDriver, fuzzEndpoint, before); err != nil {
			if err.Error() == "" {
				t.Fatalf("state %+v refused with an empty error", st)
			}
			return
		}
		if st.Driver != fuzzDriver || st.Endpoint != fuzzEndpoint || st.Dev != dev || st.Ino != ino {
			t.Fatalf("state %+v passed for driver %q, endpoint %q, device %d, inode %d", st, fuzzDriver, fuzzEndpoint, dev, ino)
		}
		// A's encoding of a state that passes decodes to the same state.
		body, err := json.Marshal(st)
		if err != nil {
			return // a time that JSON cannot carry: A never sends one
		}
		again, err := decodeState(body)
		if err != nil || again.Version != st.Version || again.Driver != st.Driver || again.Endpoint != st.Endpoint || again.Dev != st.Dev || again.Ino != st.Ino ||
			(again.Verdict == nil) != (st.Verdict == nil) ||
			st.Verdict != nil && (again.Verdict.Registered != st.Verdict.Registered || again.Verdict.Reason != st.Verdict.Reason || !again.Verdict.Time.Equal(st.Verdict.Time)) {
			t.Fatalf("state %+v encodes as %s and decodes to %+v, %v", st, body, again, err)
		}
	})
}
