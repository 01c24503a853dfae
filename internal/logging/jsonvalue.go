package logging

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
)

// This file encodes key/value pairs as component-base's JSON format does:
// zapr turns each into a zap field with zap.Any, which zap's JSON encoder
// writes. One deliberate difference: a time.Time value is written as its own
// time, where component-base's time encoder writes the current time.

// appendKey appends the key, after a comma where one is due.
func appendKey(b []byte, key string) []byte {
	return append(appendString(appendSeparator(b), key), ':')
}

// appendSeparator appends the comma before an element of an object or an
// array, as zap does: unless b is empty or ends with '{', '[', ':' or ','.
func appendSeparator(b []byte) []byte {
	if len(b) == 0 || strings.IndexByte("{[:,", b[len(b)-1]) >= 0 {
		return b
	}
	return append(b, ',')
}

// appendString appends s quoted and escaped as zap escapes it: each byte
// that is not UTF-8 as \ufffd, and <, >, & and U+2028 as they are.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\ufffd"):
			b = append(b, `\ufffd`...)
		case r == '\\' || r == '"':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r < 0x20:
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

// appendFloat writes a float without an exponent, with the precision of its
// type, and NaN, +Inf and -Inf as strings.
func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.AppendQuote(b, strconv.FormatFloat(f, 'f', -1, bits))
	}
	return strconv.AppendFloat(b, f, 'f', -1, bits)
}

// appendTime writes a time as Kubernetes' JSON format writes ts: a float
// number of milliseconds since the Unix epoch.
func appendTime(b []byte, t time.Time) []byte {
	return appendFloat(b, float64(t.UnixNano())/float64(time.Millisecond), 64)
}

// appendField appends one key/value pair of a call or of WithValues, as
// zapr converts it.
func appendField(b []byte, key string, value any) []byte {
	switch v := value.(type) {
	case logr.Marshaler:
		key, value = marshalLog(key, v)
	case slog.LogValuer:
		value = slog.AnyValue(v).Resolve()
	}
	if v, ok := value.(slog.Value); ok {
		return appendSlog(b, key, v)
	}
	return appendAny(b, key, value)
}

func marshalLog(key string, marshaler logr.Marshaler) (replacedKey string, replacement any) {
	defer func() {
		if r := recover(); r != nil {
			replacedKey, replacement = key+"Error", fmt.Sprintf("PANIC=%s", r)
		}
	}()
	return key, marshaler.MarshalLog()
}

// appendAny appends a pair as zap.Any converts it: []byte as base64, zap's
// own types, errors and Stringers as their text, []error as a list of
// objects, anything else through encoding/json without HTML escaping (which
// still escapes U+2028 and U+2029). keyError says why a value failed.
func appendAny(b []byte, key string, value any) []byte {
	if data, ok := value.([]byte); ok {
		b = append(appendKey(b, key), '"')
		return append(base64.StdEncoding.AppendEncode(b, data), '"')
	}
	// Before fmt.Stringer, which time.Duration and time.Time are. For other
	// types, the key appended for it is left out again: b goes on as it was.
	if out, ok := appendZapValue(appendKey(b, key), value); ok {
		return out
	}
	var problem error
	switch v := value.(type) {
	case error, fmt.Stringer:
		b, problem = appendText(b, key, v)
	case []error:
		b, problem = appendErrors(appendKey(b, key), v)
	default:
		var encoded bytes.Buffer
		encoder := json.NewEncoder(&encoded)
		encoder.SetEscapeHTML(false)
		if problem = encoder.Encode(value); problem == nil {
			b = append(appendKey(b, key), bytes.TrimSuffix(encoded.Bytes(), []byte("\n"))...)
		}
	}
	if problem != nil {
		b = appendString(appendKey(b, key+"Error"), problem.Error())
	}
	return b
}

// appendZapValue appends value if zap writes its type itself: one of
// appendScalar's types, or an unnamed pointer to one (nil as null) or slice
// of them (nil as []). Types defined from them are not zap's.
func appendZapValue(b []byte, value any) ([]byte, bool) {
	if out, ok := appendScalar(b, value); ok {
		return out, true
	}
	t := reflect.TypeOf(value)
	if t == nil || t.Name() != "" || t.Kind() != reflect.Pointer && t.Kind() != reflect.Slice {
		return b, false
	}
	if _, ok := appendScalar(nil, reflect.Zero(t.Elem()).Interface()); !ok {
		return b, false
	}
	v := reflect.ValueOf(value)
	if t.Kind() == reflect.Pointer {
		if v.IsNil() {
			return append(b, "null"...), true
		}
		return appendScalar(b, v.Elem().Interface())
	}
	b = append(b, '[')
	for i := range v.Len() {
		b, _ = appendScalar(appendSeparator(b), v.Index(i).Interface())
	}
	return append(b, ']'), true
}

// appendScalar appends value if its type is one that zap writes itself.
func appendScalar(b []byte, value any) ([]byte, bool) {
	switch v := value.(type) {
	case string:
		return appendString(b, v), true
	case bool:
		return strconv.AppendBool(b, v), true
	case int, int8, int16, int32, int64:
		return strconv.AppendInt(b, reflect.ValueOf(v).Int(), 10), true
	case uint, uint8, uint16, uint32, uint64, uintptr:
		return strconv.AppendUint(b, reflect.ValueOf(v).Uint(), 10), true
	case float32, float64:
		return appendFloat(b, reflect.ValueOf(v).Float(), reflect.TypeOf(v).Bits()), true
	case complex64, complex128:
		// As a string such as "1-2i", each part in the precision of its type.
		c, bits := reflect.ValueOf(v).Complex(), reflect.TypeOf(v).Bits()/2
		b = strconv.AppendFloat(append(b, '"'), real(c), 'f', -1, bits)
		if imag(c) >= 0 {
			b = append(b, '+')
		}
		return append(strconv.AppendFloat(b, imag(c), 'f', -1, bits), 'i', '"'), true
	case time.Duration:
		return appendString(b, v.String()), true
	case time.Time:
		return appendTime(b, v), true
	}
	return b, false
}

// appendText appends a fmt.Stringer's String, or an error's message and its
// causes or verbose form, if any. A panic in those methods is returned for
// keyError, but for a nil pointer's, which is written as "<nil>".
func appendText(b []byte, key string, value any) (out []byte, problem error) {
	out = b
	defer func() {
		if r := recover(); r != nil {
			if v := reflect.ValueOf(value); v.Kind() == reflect.Pointer && v.IsNil() {
				out = appendString(appendKey(out, key), "<nil>")
			} else {
				problem = fmt.Errorf("PANIC=%v", r)
			}
		}
	}()
	err, isError := value.(error)
	if !isError {
		return appendString(appendKey(out, key), value.(fmt.Stringer).String()), nil
	}
	message := err.Error()
	out = appendString(appendKey(out, key), message)
	switch e := err.(type) {
	case interface{ Errors() []error }:
		return appendErrors(appendKey(out, key+"Causes"), e.Errors())
	case fmt.Formatter:
		if verbose := fmt.Sprintf("%+v", e); verbose != message {
			out = appendString(appendKey(out, key+"Verbose"), verbose)
		}
	}
	return out, nil
}

// appendErrors appends a list of errors: an object for each error that is
// not nil, with the keys appendText writes under "error", up to a problem.
func appendErrors(b []byte, errs []error) ([]byte, error) {
	var problem error
	b = append(b, '[')
	for i := 0; i < len(errs) && problem == nil; i++ {
		if errs[i] != nil {
			b, problem = appendText(append(appendSeparator(b), '{'), "error", errs[i])
			b = append(b, '}')
		}
	}
	return append(b, ']'), problem
}

// appendSlog appends a slog value as zapr does: a group as an object (an
// empty one not at all, one without a key inline), else its Go value.
func appendSlog(b []byte, key string, value slog.Value) []byte {
	if key == "" && value.Equal(slog.Value{}) {
		return b
	}
	value = value.Resolve()
	if value.Kind() != slog.KindGroup {
		return appendAny(b, key, value.Any())
	}
	if key == "" {
		for _, member := range value.Group() {
			b = appendSlog(b, member.Key, member.Value)
		}
		return b
	}
	if len(value.Group()) == 0 {
		return b
	}
	return append(appendSlog(append(appendKey(b, key), '{'), "", value), '}')
}
