package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

func (s *suite) checkSharedPortRollout(ctx context.Context) bool {
	name := "4d. rolling update with hostNetwork, both pods on one HTTP port (maxSurge 1): " + s.allowedGap() + ", no restart, kubelet's probes all answered"
	if err := s.redeploy(ctx, revSharedPort); err != nil {
		return s.report(name, false, "no registered DaemonSet on the shared port to start from: %v", err)
	}
	baseline, err := probeCounts(localnode.RegistrarName)
	if err != nil {
		return s.report(name, false, "kubelet's probe metrics: %v", err)
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := s.samplePods(sampleCtx, 100*time.Millisecond)
	polled := pollPort(sampleCtx, revSharedPort.port(), 10*time.Millisecond)
	r, err := s.rollUpdate(ctx, revSharedPortNext)
	stopSampling()
	pods, port := <-sampled, <-polled
	logsSaved := s.saveRegistrarLogs(pods.logs)
	if err != nil {
		return s.report(name, false, "%v; registrars' logs: %s", err, logsSaved)
	}

	var probeLines []string
	probeFailures := 0
	for _, pod := range []string{r.oldPod, r.newPod} {
		counts := map[string]float64{}
		for key, n := range pods.probes[pod] {
			counts[key] = n - baseline[pod][key]
		}
		for _, probe := range []string{"Liveness", "Readiness"} {
			probeFailures += int(counts[probe+"/failed"] + counts[probe+"/unknown"])
		}
		probeLines = append(probeLines, pod+": "+describeProbes(counts))
	}

	after, settled := s.settled(r)
	status, serving := statusOf(revSharedPortNext.port())
	handedOver := status != nil && status.State == "registered" && status.Publications["handover"] == 1 && len(status.Publications) == 1
	waited, waitedOK := pods.portWait(r.oldPod, r.newPod)
	restarted := r.restarted()
	ok := r.longestGap() <= s.maxRolloutGap && len(restarted) == 0 && probeFailures == 0 && waitedOK && handedOver && settled
	return s.report(name, ok, "%v: times without the driver: %d %v (allowed: none longer than %s); container restarts in %d containers: %d %v; "+
		"kubelet's liveness and readiness probes failed during the rollout: %d (prober_probe_total, read every 100ms while each pod had them: %s); "+
		"%s; %s; %s, new pod's registrar on port %d: %s; registrars' logs: %s",
		r, len(r.gaps), r.describeGaps(), s.maxRolloutGap, len(r.restarts), len(restarted), restarted,
		probeFailures, strings.Join(probeLines, "; "), waited, port.describe(r.began), after, revSharedPortNext.port(), serving, logsSaved)
}

// podSamples keeps what kubelet drops with a deleted pod.
type podSamples struct {
	probes map[string]map[string]float64
	logs   map[string]string
}

func (s *suite) samplePods(ctx context.Context, interval time.Duration) <-chan podSamples {
	seen := podSamples{probes: map[string]map[string]float64{}, logs: map[string]string{}}
	return sample(ctx, interval, seen, func(seen *podSamples) {
		if counts, err := probeCounts(localnode.RegistrarName); err == nil {
			for pod, c := range counts {
				seen.probes[pod] = c
			}
		}
		dirs, _ := filepath.Glob(s.Path("pod-logs", localnode.Namespace+"_*"))
		for _, dir := range dirs {
			log := readLogs(filepath.Join(dir, localnode.RegistrarName))
			if pod := strings.Split(filepath.Base(dir), "_")[1]; len(log) > len(seen.logs[pod]) {
				seen.logs[pod] = log
			}
		}
	})
}

func sample[T any](ctx context.Context, interval time.Duration, v T, step func(*T)) <-chan T {
	out := make(chan T, 1)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			step(&v)
			select {
			case <-ctx.Done():
				out <- v
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

func (s *suite) saveRegistrarLogs(logs map[string]string) string {
	dir := filepath.Join(s.Logs, "pod-logs-4d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err.Error()
	}
	for pod, log := range logs {
		if err := os.WriteFile(filepath.Join(dir, pod+"."+localnode.RegistrarName+".log"), []byte(log), 0o644); err != nil {
			return err.Error()
		}
	}
	return "_logs/pod-logs-4d/"
}

// The registrars' log messages that mark the port's change of hands.
const (
	logPortWaiting  = "The HTTP endpoint's address is in use: waiting for it"
	logTookOver     = "Took the registration socket over"
	logListening    = "Listening on the HTTP endpoint's address"
	logHandedOver   = "Handed the registration socket over"
	logPortReleased = "Stopped listening on the HTTP endpoint's address"
)

// logTime returns klog's timestamp, the registrar's own clock, of the first
// line with message ("<runtime's time> stderr F I1123 12:20:18.361065 ...").
func logTime(log, message string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, message) {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 5 || len(fields[3]) != 5 {
			return time.Time{}, false
		}
		t, err := time.Parse("0102 15:04:05.000000", fields[3][1:]+" "+fields[4])
		return t, err == nil
	}
	return time.Time{}, false
}

func (p podSamples) portWait(oldPod, newPod string) (string, bool) {
	waiting, okWaiting := logTime(p.logs[newPod], logPortWaiting)
	listening, okListening := logTime(p.logs[newPod], logListening)
	if !okWaiting || !okListening {
		return fmt.Sprintf("the new registrar's log lacks %q or %q: the port was not shared, or not taken", logPortWaiting, logListening), false
	}
	detail := fmt.Sprintf("the new registrar waited %s for the port (log: %q to %q)", ms(listening.Sub(waiting)), logPortWaiting, logListening)
	if took, ok := logTime(p.logs[newPod], logTookOver); ok {
		detail += fmt.Sprintf(", listening %s after it took the socket over", ms(listening.Sub(took)))
	}
	handed, okHanded := logTime(p.logs[oldPod], logHandedOver)
	released, okReleased := logTime(p.logs[oldPod], logPortReleased)
	if okHanded && okReleased {
		detail += fmt.Sprintf("; the old one released it %s after handing the socket over, %s before the new one listened",
			ms(released.Sub(handed)), ms(listening.Sub(released)))
		return detail, true
	}
	return detail + fmt.Sprintf("; the old registrar's log (as last read) lacks %q or %q", logHandedOver, logPortReleased), false
}

// portPolls: kubelet probes both pods at this address.
type portPolls struct {
	answers map[string]int // by "path status" or "path error"
	// of one path, not 200
	longestFailure time.Duration
	longestAt      time.Time
}

func pollPort(ctx context.Context, port int32, interval time.Duration) <-chan portPolls {
	failingSince := map[string]time.Time{}
	client := &http.Client{Timeout: time.Second}
	return sample(ctx, interval, portPolls{answers: map[string]int{}}, func(p *portPolls) {
		for _, path := range []string{"/healthz", "/readyz"} {
			at := time.Now()
			outcome := "error"
			if resp, err := client.Get(fmt.Sprintf("http://%s:%d%s", localnode.NodeIP, port, path)); err == nil {
				resp.Body.Close()
				outcome = fmt.Sprint(resp.StatusCode)
			}
			p.answers[path+" "+outcome]++
			if outcome != "200" {
				if failingSince[path].IsZero() {
					failingSince[path] = at
				}
				if d := time.Since(failingSince[path]); d > p.longestFailure {
					p.longestFailure, p.longestAt = d, failingSince[path]
				}
			} else {
				failingSince[path] = time.Time{}
			}
		}
	})
}

func (p portPolls) describe(update time.Time) string {
	var answers []string
	for outcome, n := range p.answers {
		answers = append(answers, fmt.Sprintf("%s: %d", outcome, n))
	}
	sort.Strings(answers)
	longest := "none"
	if !p.longestAt.IsZero() {
		longest = fmt.Sprintf("%s from +%s", ms(p.longestFailure), ms(p.longestAt.Sub(update)))
	}
	return fmt.Sprintf("our own polls every 10ms of the address where kubelet probes both pods (not asserted): %s; longest stretch without 200: %s", strings.Join(answers, ", "), longest)
}
