//go:build linux

package guest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// selinuxReport is the "selinux" section of the registrar's /status.
type selinuxReport struct {
	Mode      string `json:"mode"`
	Registrar string `json:"registrar"`
	Files     []struct {
		What  string `json:"what"`
		Path  string `json:"path"`
		Label string `json:"label"`
	} `json:"files"`
	// KubeletCanReach is nil when the registrar could not ask the policy
	// (Unchecked says why).
	KubeletCanReach *bool          `json:"kubeletCanReach"`
	Unchecked       string         `json:"unchecked"`
	Denials         []reportDenial `json:"denials"`
}

type reportDenial struct {
	Who         string   `json:"who"`
	Scontext    string   `json:"scontext"`
	Tcontext    string   `json:"tcontext"`
	Tclass      string   `json:"tclass"`
	Permissions []string `json:"permissions"`
}

// avcDenial is one AVC denial of the kernel log.
type avcDenial struct {
	perms                      []string
	scontext, tcontext, tclass string
}

var avcDenialLine = regexp.MustCompile(`avc:\s+denied\s+\{ ([^}]*) \} .* scontext=(\S+) tcontext=(\S+) tclass=(\S+)`)

// kernelDenials are the kernel's AVC denials with source context scontext.
func (o *outputs) kernelDenials(scontext string) []avcDenial {
	var out []avcDenial
	for _, l := range o.AVCs {
		m := avcDenialLine.FindStringSubmatch(l)
		if m == nil || m[2] != scontext {
			continue
		}
		out = append(out, avcDenial{perms: strings.Fields(m[1]), scontext: m[2], tcontext: m[3], tclass: m[4]})
	}
	return out
}

// checkSELinuxReport fails the test with each of compareSELinuxReport's
// problems.
func (s scenario) checkSELinuxReport(t *testing.T, o *outputs) {
	t.Helper()
	problems, note := compareSELinuxReport(s, o)
	if note != "" {
		t.Log(note)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// compareSELinuxReport compares the registrar's SELinux report in /status
// with the kernel: the mode, the registrar's domain and the files' labels
// as the kernel has them, and, where the registrar could ask the policy,
// its verdict on kubelet against kubelet's denials in the kernel log: each
// denial the kernel logged for kubelet must be among those the registrar
// predicted (same contexts and class, the permissions among the predicted
// ones), each predicted one must have been logged, and kubeletCanReach must
// be false exactly when the kernel denied kubelet something. note says why
// nothing was compared.
func compareSELinuxReport(s scenario, o *outputs) (problems []string, note string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if o.StatusErr != nil {
		return nil, "no /status to compare with the kernel: " + o.StatusErr.Error()
	}
	wantMode := map[bool]string{true: "enforcing", false: "permissive"}[s.enforcing]
	raw, ok := o.StatusJSON["selinux"]
	if !ok {
		bad("/status has no selinux section though SELinux is %s", wantMode)
		return problems, ""
	}
	b, err := json.Marshal(raw)
	if err != nil {
		bad("/status selinux: %v", err)
		return problems, ""
	}
	var r selinuxReport
	if err := json.Unmarshal(b, &r); err != nil {
		bad("/status selinux: %v: %s", err, b)
		return problems, ""
	}
	if r.Mode != wantMode {
		bad("/status selinux.mode = %q, the kernel is %s", r.Mode, wantMode)
	}
	if r.Registrar != Context(s.registrar) {
		bad("/status selinux.registrar = %q, the registrar runs in %s", r.Registrar, Context(s.registrar))
	}
	for _, f := range r.Files {
		if want, known := o.Labels[f.Path]; known && f.Label != want {
			bad("/status selinux says %s %s is labelled %q, the kernel says %q", f.What, f.Path, f.Label, want)
		}
	}
	kernel := o.kernelDenials(Context("kubelet_t"))
	if r.KubeletCanReach == nil {
		if r.Unchecked == "" {
			bad("/status selinux has neither kubeletCanReach nor unchecked")
		}
		return problems, ""
	}
	if *r.KubeletCanReach != (len(kernel) == 0) {
		bad("/status selinux.kubeletCanReach = %v, but the kernel denied kubelet %d times: %+v", *r.KubeletCanReach, len(kernel), kernel)
	}
	var predicted []reportDenial
	for _, d := range r.Denials {
		if d.Scontext == Context("kubelet_t") {
			predicted = append(predicted, d)
		}
	}
	for _, k := range kernel {
		if !slices.ContainsFunc(predicted, k.matches) {
			bad("the kernel denied kubelet { %s } on %s %s, which /status selinux.denials does not predict: %+v",
				strings.Join(k.perms, " "), k.tclass, k.tcontext, predicted)
		}
	}
	for _, d := range predicted {
		if !slices.ContainsFunc(kernel, func(k avcDenial) bool { return k.matches(d) }) {
			bad("/status selinux.denials predicts %+v, which the kernel never logged", d)
		}
	}
	return problems, ""
}

// matches: the kernel's denial is the predicted one, or part of it.
func (k avcDenial) matches(d reportDenial) bool {
	if k.scontext != d.Scontext || k.tcontext != d.Tcontext || k.tclass != d.Tclass {
		return false
	}
	for _, p := range k.perms {
		if !slices.Contains(d.Permissions, p) {
			return false
		}
	}
	return true
}
