//go:build linux

package guest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestCompareSELinuxReport runs on the host too (go test ./guest): the
// comparison of a registrar's SELinux report with the kernel's log, on
// recorded AVC lines and reports.
func TestCompareSELinuxReport(t *testing.T) {
	const (
		connectto = `audit: type=1400 audit(1795450164.208:4): avc:  denied  { connectto } for  pid=268 comm="kubelet" path="/var/lib/kubelet/plugins_registry/.x.sock" scontext=system_u:system_r:kubelet_t:s0 tcontext=system_u:system_r:nokubelet_spc_t:s0 tclass=unix_stream_socket permissive=0`
		dirRead   = `audit: type=1400 audit(1795449885.472:9): avc:  denied  { read } for  pid=129 comm="kubelet" name="plugins_registry" dev="tmpfs" ino=4 scontext=system_u:system_r:kubelet_t:s0 tcontext=system_u:object_r:pod_private_t:s0 tclass=dir permissive=0`
		registrar = `audit: type=1400 audit(1795450164.208:5): avc:  denied  { write } for  pid=178 comm="registrar" name="access" dev="selinuxfs" ino=6 scontext=system_u:system_r:nokubelet_spc_t:s0 tcontext=system_u:object_r:security_t:s0 tclass=file permissive=0`
	)
	sc := scenario{name: "test", registrar: "nokubelet_spc_t", enforcing: true}
	socketDenial := map[string]any{"who": "kubelet", "scontext": Context("kubelet_t"), "tcontext": Context("nokubelet_spc_t"), "tclass": "unix_stream_socket", "permissions": []string{"connectto"}}
	dirDenial := map[string]any{"who": "kubelet", "scontext": Context("kubelet_t"), "tcontext": FileContext("pod_private_t"), "tclass": "dir", "permissions": []string{"open", "read", "watch"}}
	report := func(change func(map[string]any)) map[string]any {
		r := map[string]any{
			"mode":      "enforcing",
			"registrar": Context("nokubelet_spc_t"),
			"files": []map[string]any{
				{"what": "registry directory", "path": registryDir, "label": FileContext("container_file_t")},
			},
			"kubeletCanReach": false,
			"denials":         []map[string]any{socketDenial},
		}
		if change != nil {
			change(r)
		}
		// As the registrar's JSON decodes.
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		return back
	}
	tests := []struct {
		name     string
		status   map[string]any // nil: no selinux section
		err      error
		avcs     []string
		want     []string // a substring of each problem, in order
		wantNote string
	}{
		{name: "the registrar predicts the kernel's denial", status: report(nil), avcs: []string{connectto, registrar}},
		{name: "a kernel denial is a subset of the predicted permissions",
			status: report(func(r map[string]any) { r["denials"] = []map[string]any{dirDenial} }), avcs: []string{dirRead}},
		{name: "the registrar says kubelet can reach, the kernel denied",
			status: report(func(r map[string]any) { r["kubeletCanReach"] = true; r["denials"] = nil }), avcs: []string{connectto},
			want: []string{"kubeletCanReach = true", "does not predict"}},
		{name: "the registrar predicts a denial the kernel never logged",
			status: report(nil), avcs: nil,
			want: []string{"kubeletCanReach = false", "never logged"}},
		{name: "another denial than the kernel's",
			status: report(func(r map[string]any) { r["denials"] = []map[string]any{dirDenial} }), avcs: []string{connectto},
			want: []string{"does not predict", "never logged"}},
		{name: "a label other than the kernel's",
			status: report(func(r map[string]any) {
				r["files"] = []map[string]any{{"what": "registry directory", "path": registryDir, "label": FileContext("var_lib_t")}}
			}), avcs: []string{connectto},
			want: []string{"the kernel says"}},
		{name: "the wrong mode and domain",
			status: report(func(r map[string]any) { r["mode"] = "permissive"; r["registrar"] = Context("spc_t") }), avcs: []string{connectto},
			want: []string{"selinux.mode", "selinux.registrar"}},
		{name: "unchecked", status: report(func(r map[string]any) {
			delete(r, "kubeletCanReach")
			r["unchecked"] = "may not ask the policy"
		}), avcs: []string{connectto}},
		{name: "neither checked nor unchecked", status: report(func(r map[string]any) { delete(r, "kubeletCanReach") }),
			avcs: []string{connectto}, want: []string{"neither kubeletCanReach nor unchecked"}},
		{name: "no selinux section", want: []string{"no selinux section"}},
		{name: "no /status", err: errors.New("connection refused"), wantNote: "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &outputs{
				Labels:     map[string]string{registryDir: FileContext("container_file_t")},
				AVCs:       tc.avcs,
				StatusErr:  tc.err,
				StatusJSON: map[string]any{"state": "waiting-for-kubelet"},
			}
			if tc.status != nil {
				o.StatusJSON["selinux"] = tc.status
			}
			problems, note := compareSELinuxReport(sc, o)
			if len(problems) != len(tc.want) {
				t.Fatalf("problems %q, want %d matching %q", problems, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(problems[i], w) {
					t.Errorf("problem %d %q does not say %q", i, problems[i], w)
				}
			}
			if !strings.Contains(note, tc.wantNote) || (tc.wantNote == "") != (note == "") {
				t.Errorf("note %q, want one with %q", note, tc.wantNote)
			}
		})
	}
}
