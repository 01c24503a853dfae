package harness

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// make demo builds the registrar with make's VERSION: --version must say it,
// and the progress lines must name each build.
func TestBuildBinariesRegistrarVersion(t *testing.T) {
	const version = "v9.8.7-test"
	t.Setenv("REGISTRAR_VERSION", version)
	t.Setenv("REGISTRAR_BIN", "")
	// Only the registrar is built: any existing file stands for the others.
	t.Setenv("MOCKDRIVER_BIN", os.Args[0])
	t.Setenv("FAKEKUBELET_BIN", os.Args[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var lines []string
	bins, err := BuildBinaries(ctx, t.TempDir(), func(line string) { lines = append(lines, line) })
	if err != nil {
		t.Fatal(err)
	}
	got, err := RegistrarBinaryVersion(ctx, bins.Registrar)
	if err != nil {
		t.Fatal(err)
	}
	if got != version {
		t.Errorf("--version says %q, want %q", got, version)
	}

	wantLines := []string{
		"using the mock CSI driver from MOCKDRIVER_BIN=",
		"using the e2e kubelet from FAKEKUBELET_BIN=",
		"building the registrar " + version + " (first build: ",
		"built the registrar " + version + " in ",
	}
	if len(lines) != len(wantLines) {
		t.Errorf("progress lines %q, want %d", lines, len(wantLines))
	}
	for _, want := range wantLines {
		found := false
		for _, line := range lines {
			found = found || strings.HasPrefix(line, want)
		}
		if !found {
			t.Errorf("no progress line starts with %q: %q", want, lines)
		}
	}
}

func TestBuildBinariesRefusesUnquotableVersion(t *testing.T) {
	t.Setenv("REGISTRAR_VERSION", "v1 -X main.other=x")
	t.Setenv("REGISTRAR_BIN", "")
	t.Setenv("MOCKDRIVER_BIN", os.Args[0])
	t.Setenv("FAKEKUBELET_BIN", os.Args[0])
	_, err := BuildBinaries(context.Background(), t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "REGISTRAR_VERSION") {
		t.Errorf("BuildBinaries = %v, want an error naming REGISTRAR_VERSION", err)
	}
}

// A build that runs on is said to, until it ends; its output comes back.
func TestRunSayingReportsWhileItRuns(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo started; read line; echo \"got $line\"")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	said := make(chan time.Duration, 1)
	result := make(chan string, 1)
	go func() {
		output, err := runSaying(cmd, time.Millisecond, func(took time.Duration) {
			select {
			case said <- took:
			default:
			}
		})
		if err != nil {
			t.Error(err)
		}
		result <- string(output)
	}()
	// The command waits for its input: the line must come before it ends.
	if took := <-said; took <= 0 {
		t.Errorf("still called with %v, want the time so far", took)
	}
	if _, err := stdin.Write([]byte("done\n")); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if output := <-result; !strings.Contains(output, "started\ngot done\n") {
		t.Errorf("output %q, want the command's", output)
	}
}
