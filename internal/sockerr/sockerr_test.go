package sockerr_test

import (
	"errors"
	"net"
	"os"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/internal/sockerr"
)

func TestAddrInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, busy := net.Listen("tcp", held.Addr().String())
	if busy == nil {
		t.Fatalf("a second listener on %s succeeded: the test needs a bind that fails", held.Addr())
	}
	_, refused := net.Dial("tcp", "127.0.0.1:1")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a second listener on a held port", busy, true},
		{"wrapped", errors.Join(errors.New("serving"), busy), true},
		{"a refused connection", refused, false},
		{"not found", os.ErrNotExist, false},
		{"nil", nil, false},
	} {
		if got := sockerr.AddrInUse(tc.err); got != tc.want {
			t.Errorf("AddrInUse(%v) (%s) = %v, want %v", tc.err, tc.name, got, tc.want)
		}
	}
}
