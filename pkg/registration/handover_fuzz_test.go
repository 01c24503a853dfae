package registration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The instance A that the fuzzed handover messages reach.
const (
	fuzzDriver   = "csi.example.com"
	fuzzEndpoint = "/var/lib/kubelet/plugins/csi.example.com/csi.sock"
)

// handoverRequestJSON is a request as B encodes it.
func handoverRequestJSON(driver, endpoint, address string) []byte {
	body, err := json.Marshal(handoverRequest{Driver: driver, Endpoint: endpoint, Address: address})
	if err != nil {
		panic(err)
	}
	return body
}

// FuzzHandoverRequest decodes what a new instance B asks of the owner A
// and checks it as A does: whatever passes names a hidden socket of A's
// driver directly in A's registry directory, where A sends its listening
// socket and renames its own hidden name.
func FuzzHandoverRequest(f *testing.F) {
	const hidden = "." + fuzzDriver + ".0a1b2c"
	for _, dir := range []string{"/registration", "/registration/", "reg", "/"} {
		f.Add(handoverRequestJSON(fuzzDriver, fuzzEndpoint, filepath.Join(dir, hidden)), dir)
	}
	for _, address := range []string{
		"", "/registration", "/registration/" + fuzzDriver + "-reg.sock", "/elsewhere/" + hidden,
		"/registration/.other.example.com.0a1b2c", "/registration/." + fuzzDriver + ".0A1B2C",
		"/registration/." + fuzzDriver + ".0a1b2c3", "/registration/." + fuzzDriver + ".0a1b2c\x00",
		"/registration/." + fuzzDriver + ".0a1b2\x00", "/registration/" + hidden + "/",
		"registration/" + hidden, "/registration/sub/../" + hidden, "/registration/../registration/" + hidden,
		"/registration//" + hidden, "/registration/./" + hidden,
	} {
		f.Add(handoverRequestJSON(fuzzDriver, fuzzEndpoint, address), "/registration")
	}
	for _, body := range []string{
		`{"driver":"other.example.com","endpoint":"` + fuzzEndpoint + `","address":"/registration/` + hidden + `"}`,
		`{"driver":"csi.example.com","endpoint":"/other.sock","address":"/registration/` + hidden + `"}`,
		`{"DRIVER":"csi.example.com","Endpoint":"` + fuzzEndpoint + `","address":"/registration/` + hidden + `","extra":1}`,
		`{"driver":"csi.example.com","driver":"x"}`, `{"address":"\u002fregistration\u002f` + hidden + `"}`,
		`{}`, `null`, `[]`, `"x"`, `{"driver":1}`, `{"driver":"\xff"}`, ``, `{`,
	} {
		f.Add([]byte(body), "/registration")
	}
	f.Fuzz(func(t *testing.T, data []byte, dir string) {
		req, err := decodeHandoverRequest(data)
		if err != nil {
			return
		}
		// What B encodes is what A decodes.
		if again, err := decodeHandoverRequest(handoverRequestJSON(req.Driver, req.Endpoint, req.Address)); err != nil || again != req {
			t.Fatalf("request %+v encodes and decodes to %+v, %v", req, again, err)
		}
		socketPath := SocketPath(dir, fuzzDriver)
		if err := checkHandoverRequest(req, fuzzDriver, fuzzEndpoint, dir, socketPath); err != nil {
			if err.Error() == "" {
				t.Fatalf("request %+v refused with an empty error", req)
			}
			return
		}
		if req.Driver != fuzzDriver || req.Endpoint != fuzzEndpoint {
			t.Fatalf("request %+v passed for driver %q with endpoint %q", req, fuzzDriver, fuzzEndpoint)
		}
		name := filepath.Base(req.Address)
		suffix, ok := strings.CutPrefix(name, "."+fuzzDriver+".")
		if !ok || len(suffix) != 6 || strings.Trim(suffix, "0123456789abcdef") != "" {
			t.Fatalf("request %+v passed, but %q is not a hidden name of %s", req, name, socketPath)
		}
		// Exactly that name in the directory: no "..", "." or empty
		// element that the kernel would resolve through other
		// directories (or symbolic links) than filepath.Clean does.
		if want := filepath.Join(dir, name); req.Address != want {
			t.Fatalf("request %+v passed for directory %q, but its address is not %q", req, dir, want)
		}
	})
}

// FuzzHandoverState decodes what the owner A sends with its socket and
// checks it as the new instance B does: whatever passes is for B's driver
// and endpoint and for the file B found at the path.
func FuzzHandoverState(f *testing.F) {
	path := filepath.Join(f.TempDir(), fuzzDriver+"-reg.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		f.Fatal(err)
	}
	before, err := os.Lstat(path)
	if err != nil {
		f.Fatal(err)
	}
	dev, ino, _ := fileID(before)
	verdict := &Verdict{Registered: true, Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)}
	for _, st := range []handoverState{
		{Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino, Verdict: verdict},
		{Driver: fuzzDriver, Endpoint: fuzzEndpoint, Dev: dev, Ino: ino},
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
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeHandoverState(data)
		if err != nil {
			return
		}
		if err := checkHandoverState(st, fuzzDriver, fuzzEndpoint, before); err != nil {
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
		again, err := decodeHandoverState(body)
		if err != nil || again.Driver != st.Driver || again.Endpoint != st.Endpoint || again.Dev != st.Dev || again.Ino != st.Ino ||
			(again.Verdict == nil) != (st.Verdict == nil) ||
			st.Verdict != nil && (again.Verdict.Registered != st.Verdict.Registered || again.Verdict.Reason != st.Verdict.Reason || !again.Verdict.Time.Equal(st.Verdict.Time)) {
			t.Fatalf("state %+v encodes as %s and decodes to %+v, %v", st, body, again, err)
		}
	})
}
