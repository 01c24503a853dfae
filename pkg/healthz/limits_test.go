package healthz

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/internal/httpserver"
)

// generous bounds each wait on the server: it is never reached when the
// server does what it should.
const generous = 30 * time.Second

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(generous)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// getHealthz sends GET /healthz on conn with the extra header lines and
// returns the answer's status code.
func getHealthz(t *testing.T, conn net.Conn, reader *bufio.Reader, extra string) int {
	t.Helper()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: test\r\nUser-Agent: kube-probe/1.37\r\n"+extra+"\r\n"); err != nil {
		t.Fatalf("sending GET /healthz: %v", err)
	}
	resp, err := http.ReadResponse(reader, nil)
	if err != nil {
		t.Fatalf("reading the answer to GET /healthz: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("reading the body of the answer to GET /healthz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// expectClosedByServer reads from conn until the server closes it.
func expectClosedByServer(t *testing.T, conn net.Conn, reader io.Reader, what string) {
	t.Helper()
	_, err := io.Copy(io.Discard, reader)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s: the server did not close the connection within %s", what, generous)
	}
}

func TestRequestHeadSize(t *testing.T) {
	addr, _ := runLoopback(t)
	for _, tc := range []struct {
		name     string
		token    int // bytes of the bearer token
		wantCode int
	}{
		{"a bearer token of 8 KiB, as a scrape may send", 8 << 10, http.StatusOK},
		{"a head over the limit and net/http's slack", httpserver.MaxHeaderBytes + 4096, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dial(t, addr)
			reader := bufio.NewReader(conn)
			code := getHealthz(t, conn, reader, "Authorization: Bearer "+strings.Repeat("a", tc.token)+"\r\n")
			if code != tc.wantCode {
				t.Fatalf("GET /healthz with a %d-byte token = %d, want %d", tc.token, code, tc.wantCode)
			}
			if code == http.StatusRequestHeaderFieldsTooLarge {
				expectClosedByServer(t, conn, reader, "after 431")
			}
		})
	}
}

// TestHeldConnectionsOverTheLimit holds more connections than the limit,
// none of which sends a byte, as a flood from another pod would: a new
// client is still answered, the least recently used connections are
// closed, and the others are still served.
func TestHeldConnectionsOverTheLimit(t *testing.T) {
	addr, _ := runLoopback(t)
	const over = 8
	held := make([]net.Conn, httpserver.MaxConnections+over)
	for i := range held {
		held[i] = dial(t, addr)
	}

	// As kubelet's prober: a new connection, closed after the answer.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: generous}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz with %d connections held: %v", len(held), err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz with %d connections held = %d, want 200", len(held), resp.StatusCode)
	}

	// The prober's connection was the limit's over+1-th too many.
	for i, conn := range held[:over+1] {
		expectClosedByServer(t, conn, conn, fmt.Sprintf("held connection %d", i))
	}
	for _, conn := range held[over+1:] {
		if code := getHealthz(t, conn, bufio.NewReader(conn), ""); code != http.StatusOK {
			t.Fatalf("GET /healthz on a held connection = %d, want 200", code)
		}
	}
}
