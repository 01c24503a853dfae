package csinode

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
)

// cmd/registrar adds the watcher to the HTTP endpoint as a feature.
var _ healthz.Feature = (*Watcher)(nil)

// The watcher reports its status as it stands: its /status section and its
// counter, read at each request.
func TestWatcherReportsItsStatus(t *testing.T) {
	w := New("n1", nil, nil, func(Finding) {})
	w.count("get", nil)
	w.count("get", nil)
	w.count("watch", nil)
	w.st.Requests["get"]["404"] = 1
	w.st.Requests["watch"]["error"] = 3

	families, err := w.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		for _, m := range f.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			got = append(got, fmt.Sprintf("%s %s %s %s %v", f.GetName(), f.GetType(), labels["verb"], labels["code"], m.Counter.GetValue()))
		}
	}
	slices.Sort(got) // Gather sorts by the labels' values, code first
	want := []string{
		"csi_node_driver_registrar_csinode_api_requests_total COUNTER get 200 2",
		"csi_node_driver_registrar_csinode_api_requests_total COUNTER get 404 1",
		"csi_node_driver_registrar_csinode_api_requests_total COUNTER watch 200 1",
		"csi_node_driver_registrar_csinode_api_requests_total COUNTER watch error 3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("metrics:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	w.SetDriver("d")
	w.failed(errTest("no route to host"))
	key, section := w.StatusSection()
	if key != "csiNode" {
		t.Errorf("/status section %q, want csiNode", key)
	}
	encoded, err := json.Marshal(section)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(encoded, &st); err != nil {
		t.Fatal(err)
	}
	finding, _ := st["finding"].(map[string]any)
	if st["node"] != "n1" || st["driver"] != "d" || st["lastError"] != "no route to host" || st["lastErrorTime"] == nil ||
		finding["reason"] != "cannot read CSINode n1 yet: no route to host" || finding["listed"] != false || st["findingTime"] == nil {
		t.Errorf("/status csiNode = %s", encoded)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }
