package logging

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

func TestJSONLineShape(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name     string
		log      func() (line int)
		wantKeys []string
		want     map[string]any // values of some of the keys
	}{{
		name: "InfoS",
		log: func() int {
			line := callerLine() + 1
			klog.InfoS("Pod status updated", "pod", "x", "status", "ready")
			return line
		},
		wantKeys: []string{"ts", "caller", "msg", "v", "pod", "status"},
		want:     map[string]any{"msg": "Pod status updated", "v": 0.0, "pod": "x", "status": "ready"},
	}, {
		name: "V(3).InfoS",
		log: func() int {
			line := callerLine() + 1
			klog.V(3).InfoS("Probe", "ok", true)
			return line
		},
		wantKeys: []string{"ts", "caller", "msg", "v", "ok"},
		want:     map[string]any{"msg": "Probe", "v": 3.0, "ok": true},
	}, {
		name: "ErrorS",
		log: func() int {
			line := callerLine() + 1
			klog.ErrorS(errBoom, "Registration failed", "pod", "x")
			return line
		},
		wantKeys: []string{"ts", "caller", "msg", "pod", "err"},
		want:     map[string]any{"msg": "Registration failed", "err": "boom", "pod": "x"},
	}, {
		name: "ErrorS without error",
		log: func() int {
			line := callerLine() + 1
			klog.ErrorS(nil, "Registration failed")
			return line
		},
		wantKeys: []string{"ts", "caller", "msg"},
		want:     map[string]any{"msg": "Registration failed"},
	}, {
		name: "contextual Info with values",
		log: func() int {
			logger := klog.LoggerWithValues(klog.Background(), "driver", "d")
			line := callerLine() + 1
			logger.V(2).Info("Connected", "address", "a")
			return line
		},
		wantKeys: []string{"ts", "caller", "msg", "driver", "v", "address"},
		want:     map[string]any{"msg": "Connected", "v": 2.0, "driver": "d", "address": "a"},
	}, {
		name: "contextual Error with values",
		log: func() int {
			logger := klog.LoggerWithValues(klog.Background(), "driver", "d")
			line := callerLine() + 1
			logger.Error(errBoom, "Lost", "address", "a")
			return line
		},
		wantKeys: []string{"ts", "caller", "msg", "driver", "address", "err"},
		want:     map[string]any{"msg": "Lost", "err": "boom", "driver": "d", "address": "a"},
	}, {
		name: "contextual Info with name",
		log: func() int {
			line := callerLine() + 1
			klog.LoggerWithName(klog.Background(), "registrar").Info("Named")
			return line
		},
		wantKeys: []string{"ts", "logger", "caller", "msg", "v"},
		want:     map[string]any{"logger": "registrar", "msg": "Named", "v": 0.0},
	}, {
		name: "Infof",
		log: func() int {
			line := callerLine() + 1
			klog.Infof("formatted %d", 1)
			return line
		},
		wantKeys: []string{"ts", "caller", "msg", "v"},
		want:     map[string]any{"msg": "formatted 1", "v": 0.0},
	}, {
		name: "Errorf",
		log: func() int {
			line := callerLine() + 1
			klog.Errorf("formatted %s", "error")
			return line
		},
		wantKeys: []string{"ts", "caller", "msg"},
		want:     map[string]any{"msg": "formatted error"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := apply(t, "--logging-format=json", "-v=3")
			before := time.Now()
			line := tc.log()
			after := time.Now()

			lines := stderr.lines()
			if len(lines) != 1 {
				t.Fatalf("want one line, got %d: %q", len(lines), lines)
			}
			if keys := jsonKeys(t, lines[0]); !slices.Equal(keys, tc.wantKeys) {
				t.Errorf("keys %q, want %q in %s", keys, tc.wantKeys, lines[0])
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatalf("not JSON: %v: %s", err, lines[0])
			}
			for key, want := range tc.want {
				if got[key] != want {
					t.Errorf("%s = %#v, want %#v in %s", key, got[key], want, lines[0])
				}
			}
			if wantCaller := fmt.Sprintf("logging/json_test.go:%d", line); got["caller"] != wantCaller {
				t.Errorf("caller = %v, want %s", got["caller"], wantCaller)
			}
			// Kubernetes writes milliseconds since the epoch.
			ts, _ := got["ts"].(float64)
			low, high := float64(before.UnixMicro())/1e3, float64(after.UnixMicro()+1)/1e3
			if ts < low || ts > high {
				t.Errorf("ts = %f, want between %f and %f (milliseconds)", ts, low, high)
			}
		})
	}
}

// jsonKeys returns the keys of the JSON object in line in the order in which
// they appear.
func jsonKeys(t *testing.T, line string) []string {
	t.Helper()
	decoder := json.NewDecoder(strings.NewReader(line))
	if token, err := decoder.Token(); err != nil || token != json.Delim('{') {
		t.Fatalf("line does not start an object (%v, %v): %s", token, err, line)
	}
	var keys []string
	for decoder.More() {
		token, err := decoder.Token()
		if err != nil {
			t.Fatalf("reading key: %v: %s", err, line)
		}
		keys = append(keys, token.(string))
		var value json.RawMessage
		if err := decoder.Decode(&value); err != nil {
			t.Fatalf("reading value of %s: %v: %s", token, err, line)
		}
	}
	return keys
}
