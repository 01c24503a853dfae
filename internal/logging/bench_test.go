package logging

import (
	"errors"
	"io"
	"testing"

	"k8s.io/klog/v2"
)

// BenchmarkLogging measures one structured info or error call per format,
// written to io.Discard.
func BenchmarkLogging(b *testing.B) {
	errBoom := errors.New("boom")
	for _, config := range []struct {
		name string
		args []string
	}{
		{name: "text"},
		{name: "text split buffered", args: []string{"--log-text-split-stream", "--log-text-info-buffer-size=64Ki"}},
		{name: "json", args: []string{"--logging-format=json"}},
		{name: "json split buffered", args: []string{"--logging-format=json", "--log-json-split-stream", "--log-json-info-buffer-size=64Ki"}},
	} {
		b.Run(config.name, func(b *testing.B) {
			restoreKlog(b)
			options, fs := parse(b, config.args...)
			if err := options.Apply(fs, io.Discard, io.Discard); err != nil {
				b.Fatal(err)
			}
			b.Run("InfoS", func(b *testing.B) {
				for b.Loop() {
					klog.InfoS("Registration status", "driver", "hostpath.csi.k8s.io", "registered", true)
				}
			})
			b.Run("ErrorS", func(b *testing.B) {
				for b.Loop() {
					klog.ErrorS(errBoom, "Registration failed", "driver", "hostpath.csi.k8s.io")
				}
			})
			b.Run("V(5) off", func(b *testing.B) {
				for b.Loop() {
					klog.Background().V(5).Info("Probe", "driver", "hostpath.csi.k8s.io")
				}
			})
		})
	}
}
