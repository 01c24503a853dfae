package driver

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLength is the longest driver name the CSI specification allows.
const MaxNameLength = 63

const nameRule = "a CSI driver name is at most 63 characters, begins and ends with a letter or digit [a-zA-Z0-9], " +
	"and has only letters, digits, '-' and '.' in between"

// ValidateName checks GetPluginInfo's name against the CSI spec's rule, which
// keeps "<name>-reg.sock" inside kubelet's registry directory (no separator,
// never "." or "..") and not a dot-file, which kubelet's plugin watcher ignores.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("the CSI driver name is empty: " + nameRule + "; check the CSI driver's GetPluginInfo")
	}
	first, _ := utf8.DecodeRuneInString(name)
	last, _ := utf8.DecodeLastRuneInString(name)
	other := strings.IndexFunc(name, func(c rune) bool { return !isAlphanumeric(c) && c != '-' && c != '.' })
	var problem string
	switch {
	case !isAlphanumeric(first):
		problem = fmt.Sprintf("it begins with %q", first)
	case !isAlphanumeric(last):
		problem = fmt.Sprintf("it ends with %q", last)
	case other >= 0:
		c, _ := utf8.DecodeRuneInString(name[other:])
		problem = fmt.Sprintf("it contains %q", c)
	case len(name) > MaxNameLength:
		// Only ASCII is left, so bytes and characters count the same.
		problem = fmt.Sprintf("it is %d characters long", len(name))
	default:
		return nil
	}
	return fmt.Errorf("driver name %q is not valid: %s; %s; check the CSI driver's GetPluginInfo", name, problem, nameRule)
}

func isAlphanumeric(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
