package handover_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// The instance A that the fuzzed handover requests reach.
const (
	fuzzDriver   = "csi.example.com"
	fuzzEndpoint = "/var/lib/kubelet/plugins/csi.example.com/csi.sock"
)

// requestJSON is a request as B encodes it.
func requestJSON(driver, endpoint, address string) []byte {
	body, err := json.Marshal(handover.Request{Version: handover.Version, Driver: driver, Endpoint: endpoint, Address: address})
	if err != nil {
		panic(err)
	}
	return body
}

// owner is A as registration makes it, for the registry directory dir.
func owner(dir string) *handover.Owner {
	path := registration.SocketPath(dir, fuzzDriver)
	return &handover.Owner{Socket: &sockfile.Socket{Path: path}, Driver: fuzzDriver, Endpoint: fuzzEndpoint}
}

// FuzzHandoverRequest decodes what a new instance B asks of the owner A
// and checks it as A does: whatever passes is of version 1 and names a
// hidden socket of A's driver directly in A's registry directory, where A
// sends its listening socket and renames its own hidden name.
func FuzzHandoverRequest(f *testing.F) {
	const hidden = "." + fuzzDriver + ".0a1b2c"
	for _, dir := range []string{"/registration", "/registration/", "reg", "/"} {
		f.Add(requestJSON(fuzzDriver, fuzzEndpoint, filepath.Join(dir, hidden)), dir)
	}
	for _, address := range []string{
		"", "/registration", "/registration/" + fuzzDriver + "-reg.sock", "/elsewhere/" + hidden,
		"/registration/.other.example.com.0a1b2c", "/registration/." + fuzzDriver + ".0A1B2C",
		"/registration/." + fuzzDriver + ".0a1b2c3", "/registration/." + fuzzDriver + ".0a1b2c\x00",
		"/registration/." + fuzzDriver + ".0a1b2\x00", "/registration/" + hidden + "/",
		"registration/" + hidden, "/registration/sub/../" + hidden, "/registration/../registration/" + hidden,
		"/registration//" + hidden, "/registration/./" + hidden,
	} {
		f.Add(requestJSON(fuzzDriver, fuzzEndpoint, address), "/registration")
	}
	for _, body := range []string{
		// As the builds before the version field sent it.
		`{"driver":"csi.example.com","endpoint":"` + fuzzEndpoint + `","address":"/registration/` + hidden + `"}`,
		`{"version":2,"driver":"csi.example.com","endpoint":"` + fuzzEndpoint + `","address":"/registration/` + hidden + `"}`,
		`{"version":"1","driver":"csi.example.com"}`, `{"version":-1}`, `{"version":1,"version":3}`,
		`{"driver":"other.example.com","endpoint":"` + fuzzEndpoint + `","address":"/registration/` + hidden + `"}`,
		`{"driver":"csi.example.com","endpoint":"/other.sock","address":"/registration/` + hidden + `"}`,
		`{"DRIVER":"csi.example.com","Endpoint":"` + fuzzEndpoint + `","address":"/registration/` + hidden + `","extra":1}`,
		`{"driver":"csi.example.com","driver":"x"}`, `{"address":"\u002fregistration\u002f` + hidden + `"}`,
		`{}`, `null`, `[]`, `"x"`, `{"driver":1}`, `{"driver":"\xff"}`, ``, `{`,
	} {
		f.Add([]byte(body), "/registration")
	}
	f.Fuzz(func(t *testing.T, data []byte, dir string) {
		req, err := handover.DecodeRequest(data)
		if err != nil {
			return
		}
		if req.Version != handover.Version {
			t.Fatalf("request %s decoded as version %d, want %d", data, req.Version, handover.Version)
		}
		var raw struct{ Version int }
		if json.Unmarshal(data, &raw) == nil && raw.Version != 0 && raw.Version != handover.Version {
			t.Fatalf("request %s of version %d accepted", data, raw.Version)
		}
		// What B encodes is what A decodes.
		if again, err := handover.DecodeRequest(requestJSON(req.Driver, req.Endpoint, req.Address)); err != nil || again != req {
			t.Fatalf("request %+v encodes and decodes to %+v, %v", req, again, err)
		}
		a := owner(dir)
		if err := a.Check(req); err != nil {
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
			t.Fatalf("request %+v passed, but %q is not a hidden name of %s", req, name, a.Socket.Path)
		}
		// Exactly that name in the directory: no "..", "." or empty
		// element that the kernel would resolve through other
		// directories (or symbolic links) than filepath.Clean does.
		if want := filepath.Join(dir, name); req.Address != want {
			t.Fatalf("request %+v passed for directory %q, but its address is not %q", req, dir, want)
		}
	})
}
