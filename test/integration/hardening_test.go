package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

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

// logTime returns the time of day of the first klog line of logs that
// contains msg.
func logTime(logs, msg string) (time.Time, bool) {
	for _, line := range strings.Split(logs, "\n") {
		// I1123 13:06:37.060464   18863 file.go:1] "msg" ...
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.Contains(line, msg) {
			continue
		}
		at, err := time.Parse("15:04:05.000000", fields[1])
		return at, err == nil
	}
	return time.Time{}, false
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
	poll.UntilWithin(t, slowTimeout, "the older instance is ready", func() bool { code, _ := get(n.httpAddr, "/readyz"); return code == http.StatusOK })

	newerAddr := freeAddress(t)
	newer := n.startRegistrar(t, "--http-endpoint="+newerAddr)
	poll.UntilWithin(t, slowTimeout, "the newer instance took the socket over", func() bool { code, _ := get(newerAddr, "/readyz"); return code == http.StatusOK })
	poll.UntilWithin(t, slowTimeout, "the older instance steps aside", func() bool { return n.status(t, n.httpAddr)["state"] == "superseded" })
	handedOver, err := os.Lstat(socket)
	if err != nil {
		t.Fatal(err)
	}

	killed := time.Now()
	if err := newer.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-newer.exited
	poll.UntilWithin(t, slowTimeout, "the older instance serves a socket of its own", func() bool {
		code, body := get(n.httpAddr, "/healthz")
		return code == http.StatusOK && strings.HasPrefix(body, "serving")
	})
	t.Logf("the older instance serves again %v after the SIGKILL", time.Since(killed))
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

// Outside Kubernetes there is no termination message file: that is said
// once, at V(2), and not as a warning at each rejection.
func TestMissingTerminationFileIsSaidOnce(t *testing.T) {
	const name = "noterm.csi.example.com"
	n := newNode(t)
	n.startDriver(t, name)
	registrar := n.startRegistrar(t, "--termination-message-path="+n.root+"/missing/termination-log", "-v=2")
	n.waitForSocket(t, name, registrar)
	socket := n.socketPath(name)
	for i := range 2 {
		before, err := os.Lstat(socket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubeletClient(t, socket).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		// Published again after the backoff: the rejection was handled.
		poll.UntilWithin(t, slowTimeout, "the socket is published again", func() bool {
			now, err := os.Lstat(socket)
			return err == nil && !os.SameFile(before, now)
		})
		t.Logf("rejection %d handled", i+1)
	}
	logs := registrar.stderr.String()
	if n := strings.Count(logs, "No termination message file"); n != 1 {
		t.Errorf("the missing file was reported %d times, want once", n)
	}
	if strings.Contains(logs, "cannot write the termination message") {
		t.Error("a missing termination message file is logged as a warning")
	}
}

// --diagnose without flags borrows the running registrar's, found by its
// executable when PID 1 is another program (here, as in a pod that shares
// its process namespace); without one it says so and how to pass them.
func TestDiagnoseFindsTheRunningRegistrar(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		if registrarEmulator != "" {
			// Both processes run the emulator's executable, and the running
			// one's /proc/<pid>/cmdline starts with the emulator.
			t.Skipf("under %s (%s): the running registrar is an emulator's process", registrarEmulatorEnv, registrarEmulator)
		}
		n, registrar := published(t, "diag.csi.example.com")
		out, _ := registrarCommand("--diagnose").CombinedOutput()
		want := fmt.Sprintf("Using the flags of the running registrar (PID %d).", registrar.cmd.Process.Pid)
		if !strings.Contains(string(out), want) {
			t.Fatalf("--diagnose printed:\n%s\nwant %q", out, want)
		}
		if !strings.Contains(string(out), n.registry) {
			t.Errorf("--diagnose did not check the running registrar's registry %s:\n%s", n.registry, out)
		}
	})
	t.Run("none", func(t *testing.T) {
		out, _ := registrarCommand("--diagnose").CombinedOutput()
		for _, want := range []string{"Could not read the running registrar's flags", "Pass the registrar's flags after --diagnose"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("--diagnose printed:\n%s\nwant %q", out, want)
			}
		}
	})
}

// hostNetwork: the pods of a rolling update share the node's network, and
// so --http-endpoint's address. The newer instance waits for it; the older
// one stops listening when it hands the registration over, and from then on
// the newer one answers every probe on the address.
func TestHandsTheHTTPPortOverOnASharedNetwork(t *testing.T) {
	const name = "hostnet.csi.example.com"
	n, older := published(t, name)
	if _, err := kubeletClient(t, n.socketPath(name)).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	poll.UntilWithin(t, slowTimeout, "the older instance is ready", func() bool { code, _ := get(n.httpAddr, "/readyz"); return code == http.StatusOK })

	newer := n.startRegistrar(t)
	poll.UntilWithin(t, slowTimeout, "the newer instance answers on the address", func() bool { return registeredByHandover(n.httpAddr) })
	// The older instance says so once its listener is closed, which may
	// be just after the newer one listens.
	const releasedLine = "Stopped listening on the HTTP endpoint's address"
	poll.UntilWithin(t, slowTimeout, "the older instance says it released the port", func() bool { return strings.Contains(older.stderr.String(), releasedLine) })
	released, _ := logTime(older.stderr.String(), releasedLine)
	if listening, ok := logTime(newer.stderr.String(), "Listening on the HTTP endpoint's address"); ok && !released.IsZero() {
		t.Logf("the port was free for %v, from the release to the newer instance's listen (their log lines)", listening.Sub(released))
	}
	if !newer.running() || !older.running() {
		t.Fatal("an instance exited")
	}

	if err := older.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := older.wait(t); code != 0 {
		t.Errorf("the older instance's exit code = %d, want 0", code)
	}
	if code, body := get(n.httpAddr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the older instance exited = %d %q, want 200 from the newer one", code, body)
	}
	if _, err := kubeletClient(t, n.socketPath(name)).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Errorf("GetInfo after the older instance exited: %v", err)
	}
}

// registeredByHandover tells whether the registrar answering /status on
// addr is registered through a socket it took over.
func registeredByHandover(addr string) bool {
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		State        string            `json:"state"`
		Publications map[string]uint64 `json:"socketPublications"`
	}
	return json.NewDecoder(resp.Body).Decode(&st) == nil && st.State == "registered" && st.Publications["handover"] == 1
}

// A driver killed with SIGKILL leaves its socket file: the registrar must
// still see that it no longer answers, and see it come back.
func TestDriverReachableFollowsADriverKilledInPlace(t *testing.T) {
	const name = "killeddriver.csi.example.com"
	n := newNode(t)
	driverProc := n.startDriver(t, name)
	registrar := n.startRegistrar(t)
	n.waitForSocket(t, name, registrar)
	reachable := func() any { return n.status(t, n.httpAddr)["driverReachable"] }
	poll.UntilWithin(t, slowTimeout, "the driver is reachable", func() bool { return reachable() == true })

	if err := driverProc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-driverProc.exited
	if _, err := os.Lstat(n.driverSocket); err != nil {
		t.Fatalf("the killed driver's socket is gone (%v): this test needs it left behind", err)
	}
	poll.UntilWithin(t, slowTimeout, "the driver is reported unreachable", func() bool { return reachable() == false })
	if code, _ := get(n.httpAddr, "/readyz"); code == 0 {
		t.Fatal("the registrar stopped answering")
	}

	n.startDriver(t, name)
	poll.UntilWithin(t, slowTimeout, "the driver is reachable again", func() bool { return reachable() == true })
}
