package logging

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// maxInfoBufferSize is Kubernetes' cap, 2 GiB, as the buffer is allocated
// up front; one byte less where int has 32 bits (linux/arm), where bufio
// would replace the negative size 2 GiB wraps to with 4 KiB.
const maxInfoBufferSize = min(2<<30, math.MaxInt)

// sizeMultipliers are the suffixes of Kubernetes quantities that make sense
// for bytes, and "K", which Kubernetes' own flag help writes for "k".
var sizeMultipliers = map[string]int64{
	"":   1,
	"k":  1e3,
	"K":  1e3,
	"M":  1e6,
	"G":  1e9,
	"T":  1e12,
	"P":  1e15,
	"E":  1e18,
	"Ki": 1 << 10,
	"Mi": 1 << 20,
	"Gi": 1 << 30,
	"Ti": 1 << 40,
	"Pi": 1 << 50,
	"Ei": 1 << 60,
}

// byteSize is a flag.Value holding a number of bytes, given as such or as a
// Kubernetes quantity such as 64Ki or 1.5M.
type byteSize struct {
	bytes int64
	text  string
}

func (s *byteSize) String() string {
	if s.text == "" {
		return "0"
	}
	return s.text
}

// Set takes a number of bytes or a quantity, rounded up to a whole byte and
// capped at maxInfoBufferSize.
func (s *byteSize) Set(text string) error {
	number := strings.TrimRight(text, "kKMGTPEi")
	multiplier, knownSuffix := sizeMultipliers[text[len(number):]]
	size, isNumber := new(big.Rat).SetString(number)
	// Digits and a point only: big.Rat also takes signs, fractions and
	// exponents.
	if !knownSuffix || !isNumber || strings.Trim(number, "0123456789.") != "" {
		return fmt.Errorf("%q is not a size: use a number of bytes (65536) or a quantity such as 64Ki, 1Mi or 500k", text)
	}
	size.Mul(size, new(big.Rat).SetInt64(multiplier))
	s.bytes, s.text = maxInfoBufferSize, text
	if size.Cmp(new(big.Rat).SetInt64(maxInfoBufferSize)) < 0 {
		// Rounded up: (numerator + denominator - 1) / denominator.
		whole := new(big.Int).Add(size.Num(), size.Denom())
		s.bytes = whole.Sub(whole, big.NewInt(1)).Quo(whole, size.Denom()).Int64()
	}
	return nil
}
