package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// published starts the test driver named name and a registrar on a new
// node, and waits until the registrar has published its socket.
func published(t *testing.T, name string) (*node, *process) {
	t.Helper()
	n := newNode(t)
	n.startDriver(t, name)
	registrar := n.startRegistrar(t)
	n.waitForSocket(t, name, registrar)
	return n, registrar
}

// status reads the registrar's /status.
func (n *node) status(t *testing.T, addr string) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func get(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func dial(t *testing.T, network, address string) net.Conn {
	t.Helper()
	c, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Clients that connect and never finish their request must not hold the
// exit: kubelet's grace period (30 s by default) ends in SIGKILL, and a
// rolling update waits for every step.
func TestSIGTERMDoesNotWaitForSilentClients(t *testing.T) {
	const name = "silent.csi.example.com"
	n, registrar := published(t, name)
	socket := n.socketPath(name)

	silent := dial(t, "unix", socket)
	halfway := dial(t, "unix", socket)
	if _, err := halfway.Write([]byte("PRI * HTTP/2.0")); err != nil {
		t.Fatal(err)
	}
	dial(t, "tcp", n.httpAddr)
	if _, err := dial(t, "tcp", n.httpAddr).Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	// All four are accepted by now: a request on a fifth connection is
	// answered after them.
	if code, body := get(n.httpAddr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if _, err := kubeletClient(t, socket).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}

	socketGone := make(chan bool, 1)
	go func() {
		_, _ = io.Copy(io.Discard, silent)
		_, err := os.Lstat(socket)
		socketGone <- errors.Is(err, fs.ErrNotExist)
	}()
	sent := time.Now()
	if err := registrar.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-registrar.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the registrar did not exit within 5 s of SIGTERM")
	}
	t.Logf("exited %v after SIGTERM", time.Since(sent))
	if code := registrar.wait(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if gone := <-socketGone; !gone {
		t.Error("a client was disconnected before the registration socket was removed")
	}
}

// The older instance of a rolling update handed its socket over; the newer
// one is then killed, leaving its socket file behind. The older one must
// notice and publish again, so that kubelet can reach the driver.
func TestPublishesAgainWhenTheNewerInstanceIsKilled(t *testing.T) {
	const name = "killed.csi.example.com"
	n, _ := published(t, name)
	socket := n.socketPath(name)
	if _, err := kubeletClient(t, socket).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the older instance is ready", func() bool { code, _ := get(n.httpAddr, "/readyz"); return code == http.StatusOK })

	newerAddr := freeAddress(t)
	newer := n.startRegistrar(t, "--http-endpoint="+newerAddr)
	eventually(t, "the newer instance took the socket over", func() bool { code, _ := get(newerAddr, "/readyz"); return code == http.StatusOK })
	eventually(t, "the older instance steps aside", func() bool { return n.status(t, n.httpAddr)["state"] == "superseded" })
	handedOver, err := os.Lstat(socket)
	if err != nil {
		t.Fatal(err)
	}

	if err := newer.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-newer.exited
	eventually(t, "the older instance serves a socket of its own", func() bool {
		code, body := get(n.httpAddr, "/healthz")
		return code == http.StatusOK && strings.HasPrefix(body, "serving")
	})
	if now, err := os.Lstat(socket); err != nil || os.SameFile(now, handedOver) {
		t.Fatalf("the dead socket is still at the path (err %v)", err)
	}
	info, err := kubeletClient(t, socket).GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil || info.Name != name {
		t.Fatalf("GetInfo = %v, %v; want the driver's name", info, err)
	}
	pubs, _ := n.status(t, n.httpAddr)["socketPublications"].(map[string]any)
	if pubs["vacated"] != 1.0 {
		t.Errorf("socketPublications = %v, want one vacated", pubs)
	}
}
