//go:build unix

package handover

import (
	"bytes"
	"io"
	"testing"
)

// chunkedReader returns data in reads of the sizes in splits (0: an empty
// read), the rest in one read, then io.EOF; with eofWithData, the last
// read that returns data returns io.EOF too.
type chunkedReader struct {
	data        []byte
	splits      []byte
	eofWithData bool
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.splits) > 0 {
		n = min(n, int(r.splits[0]))
		r.splits = r.splits[1:]
	}
	n = copy(p, r.data[:n])
	r.data = r.data[n:]
	if len(r.data) == 0 && r.eofWithData {
		return n, io.EOF
	}
	return n, nil
}

// FuzzReadLine reads the handover state as B does, from the bytes of the
// message that carried the socket (first) and further reads of any sizes:
// the outcome is the stream up to its first newline, however it is split,
// and never more than the limit. The limit is small (not
// maxStateBytes), so that the fuzzer reaches it with small inputs.
func FuzzReadLine(f *testing.F) {
	state := []byte(`{"driver":"csi.example.com","endpoint":"/csi.sock","dev":2049,"ino":1234}`)
	line := append(bytes.Clone(state), '\n')
	long := uint16(len(state))
	for _, seed := range []struct {
		first, rest, splits []byte
		eofWithData         bool
		limit               uint16
	}{
		{first: line},
		{first: line[:10], rest: line[10:]},
		{first: line[:10], rest: line[10:], splits: []byte{1, 0, 3, 200}},
		{first: line[:10], rest: line[10:], eofWithData: true},
		{rest: line, splits: []byte{0, 0, 1}},
		{first: []byte("\n")},
		{first: state},
		{first: state, eofWithData: true},
		{first: []byte("a\nb")},
		{first: []byte("a"), rest: []byte("\nb\n")},
		{first: line, limit: long},
		{first: line, limit: long - 1},
		{first: line[:10], rest: line[10:], limit: long - 1},
		{first: line[:10], rest: line[10:], splits: []byte{7, 7, 7}, limit: 20},
	} {
		f.Add(seed.first, seed.rest, seed.splits, seed.eofWithData, seed.limit)
	}
	f.Fuzz(func(t *testing.T, first, rest, splits []byte, eofWithData bool, limit uint16) {
		if limit == 0 {
			limit = 4096
		}
		stream := append(bytes.Clone(first), rest...)
		// readLine appends to first, as to the buffer of the message it
		// came in: it must not overwrite rest.
		got, err := readLine(&chunkedReader{data: rest, splits: splits, eofWithData: eofWithData}, bytes.Clone(first), int(limit))
		if len(got) > int(limit) {
			t.Fatalf("readLine returned %d bytes, more than its limit %d", len(got), limit)
		}
		end := bytes.IndexByte(stream, '\n')
		if end < 0 || end > int(limit) {
			if err == nil {
				t.Fatalf("readLine(%q in reads of %v, limit %d) = %q, want an error: no newline within the limit", stream, splits, limit, got)
			}
			return
		}
		if err != nil || !bytes.Equal(got, stream[:end]) {
			t.Fatalf("readLine(%q in reads of %v, limit %d) = %q, %v; want %q", stream, splits, limit, got, err, stream[:end])
		}
	})
}
