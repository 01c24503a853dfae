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
	switch {
	case hasPrefix && !isDNSSubdomain(prefix):
		return fmt.Errorf("taint key %q: the prefix %q is not a DNS subdomain: %s", key, prefix, rule)
	case !isQualifiedName(name):
		return fmt.Errorf("taint key %q is not valid: %s", key, rule)
	}
	return nil
}

func isAlphanumeric(c byte, upper bool) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || upper && c >= 'A' && c <= 'Z'
}

// isQualifiedName: 1-63 characters of [A-Za-z0-9-_.], alphanumeric at
// both ends.
func isQualifiedName(s string) bool {
	if s == "" || len(s) > 63 || !isAlphanumeric(s[0], true) || !isAlphanumeric(s[len(s)-1], true) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlphanumeric(c, true) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// isDNSSubdomain: at most 253 characters, dot-separated labels of
// [a-z0-9-] that are alphanumeric at both ends.
func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || !isAlphanumeric(label[0], false) || !isAlphanumeric(label[len(label)-1], false) {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !isAlphanumeric(c, false) && c != '-' {
				return false
			}
		}
	}
	return true
}
