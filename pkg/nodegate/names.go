package nodegate

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	// A qualified name's name part, as Kubernetes validates label keys
	// and taint keys.
	qualifiedName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	// A DNS-1123 subdomain, the optional prefix.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// ValidateTaintKey checks key as the API server checks a taint's key: an
// optional DNS subdomain prefix and "/", then a name of at most 63
// characters.
func ValidateTaintKey(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	const rule = "a taint key is an optional DNS subdomain prefix and '/', then at most 63 characters of [A-Za-z0-9-_.] that start and end with a letter or digit, e.g. example.com/agent-not-ready"
	switch {
	case hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)):
		return fmt.Errorf("taint key %q: the prefix %q is not a DNS subdomain: %s", key, prefix, rule)
	case name == "" || len(name) > 63 || !qualifiedName.MatchString(name):
		return fmt.Errorf("taint key %q is not valid: %s", key, rule)
	}
	return nil
}
