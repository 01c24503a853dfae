package nodegate

import (
	"fmt"
	"strings"
)

// ValidateTaintKey checks key as the API server checks a taint's key: an
// optional DNS subdomain prefix and "/", then a name of at most 63
// characters. Written out rather than with regexp: a package-level regexp
// is compiled at start-up, paging in code that a registrar without the
// flag never needs.
func ValidateTaintKey(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	const rule = "a taint key is an optional DNS subdomain prefix and '/', then at most 63 characters of [A-Za-z0-9-_.] that start and end with a letter or digit, e.g. example.com/agent-not-ready"
	isDNSSubdomain := len(prefix) <= 253
	for label := range strings.SplitSeq(prefix, ".") {
		isDNSSubdomain = isDNSSubdomain && isName(label, 253, false, "-")
	}
	switch {
	case hasPrefix && !isDNSSubdomain:
		return fmt.Errorf("taint key %q: the prefix %q is not a DNS subdomain: %s", key, prefix, rule)
	case !isName(name, 63, true, "-_."):
		return fmt.Errorf("taint key %q is not valid: %s", key, rule)
	}
	return nil
}

// isName: 1 to maxLen characters, alphanumeric at both ends (upper case
// too when upper), and otherwise alphanumeric or one of middle.
func isName(s string, maxLen int, upper bool, middle string) bool {
	if s == "" || len(s) > maxLen || !isAlphanumeric(s[0], upper) || !isAlphanumeric(s[len(s)-1], upper) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlphanumeric(s[i], upper) && !strings.ContainsRune(middle, rune(s[i])) {
			return false
		}
	}
	return true
}

func isAlphanumeric(c byte, upper bool) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || upper && c >= 'A' && c <= 'Z'
}
