package logging

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
)

// FuzzParseByteSize checks the --log-*-info-buffer-size parser: an accepted
// size is the quantity rounded up to a whole byte and capped, never
// negative; leading and trailing zeros change nothing, a larger number
// never gives fewer bytes, nor a binary suffix fewer than the decimal one;
// the flag shows the text it was given; an error quotes the text.
func FuzzParseByteSize(f *testing.F) {
	for _, seed := range []string{
		"0", "512", "64Ki", "1Mi", "1M", "500k", "500K", "1.5Ki", "0.1k", "0.0001k", ".5", "5.", "2Gi", "3Gi",
		"8Ei", "9223372036854775807", "9223372036854775808", "", "-1", "+1", "1e3", "1/2", "Ki", ".", "1.2.3",
		"100m", "1KiB", "10 Ki", "1ki", "1iK", "0x10", "1_000", "١٢",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		n, err := parseByteSize(text)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", text)) {
				t.Errorf("parseByteSize(%q) error %q does not quote the text", text, err)
			}
			return
		}
		if n < 0 || n > maxInfoBufferSize {
			t.Fatalf("parseByteSize(%q) = %d, outside [0, %d]", text, n, maxInfoBufferSize)
		}
		number := strings.TrimRight(text, "kKMGTPEi")
		suffix := text[len(number):]
		multiplier, known := sizeMultipliers[suffix]
		if !known {
			t.Fatalf("parseByteSize(%q) accepted the suffix %q", text, suffix)
		}
		value, ok := new(big.Rat).SetString(number)
		if !ok || value.Sign() < 0 || strings.ContainsAny(number, "+-eE/") {
			t.Fatalf("parseByteSize(%q) accepted the number %q", text, number)
		}
		value.Mul(value, new(big.Rat).SetInt64(multiplier))
		if value.Cmp(new(big.Rat).SetInt64(maxInfoBufferSize)) >= 0 {
			if n != maxInfoBufferSize {
				t.Fatalf("parseByteSize(%q) = %d, want the cap %d", text, n, maxInfoBufferSize)
			}
		} else if below := new(big.Rat).SetInt64(n - 1); new(big.Rat).SetInt64(n).Cmp(value) < 0 || n > 0 && below.Cmp(value) >= 0 {
			t.Fatalf("parseByteSize(%q) = %d, want %s rounded up", text, n, value.FloatString(3))
		}

		same := []string{"0" + text}
		if strings.Contains(number, ".") {
			same = append(same, number+"0"+suffix)
		}
		for _, other := range same {
			if m, err := parseByteSize(other); err != nil || m != n {
				t.Errorf("parseByteSize(%q) = %d, but parseByteSize(%q) = %d, %v", text, n, other, m, err)
			}
		}
		if m, err := parseByteSize("1" + text); err != nil || m < n {
			t.Errorf("parseByteSize(%q) = %d, but parseByteSize(%q) = %d, %v", text, n, "1"+text, m, err)
		}
		if len(suffix) == 1 {
			binary := strings.ToUpper(suffix) + "i"
			if m, err := parseByteSize(number + binary); err != nil || m < n {
				t.Errorf("parseByteSize(%q) = %d, but parseByteSize(%q) = %d, %v", text, n, number+binary, m, err)
			}
		}

		var size byteSize
		if err := size.Set(text); err != nil || size.String() != text || size.bytes != n {
			t.Errorf("byteSize.Set(%q) = %v, then String() = %q with %d bytes, want %q with %d", text, err, size.String(), size.bytes, text, n)
		}
	})
}

// parseByteSize returns what byteSize.Set makes of text: the number of
// bytes, or the error and 0.
func parseByteSize(text string) (int64, error) {
	var size byteSize
	err := size.Set(text)
	return size.bytes, err
}
