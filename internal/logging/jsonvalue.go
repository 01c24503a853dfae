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
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
)

// This file encodes key/value pairs as component-base's JSON format does:
// zapr turns each pair into a zap field (zapr's zapIt, then zap.Any) and
// zap's JSON encoder writes it. The rules, from those three:
//   - a logr.Marshaler is replaced by what MarshalLog returns (keyError and
//     "PANIC=..." if it panics), a slog.LogValuer by its resolved value;
//   - strings, numbers, bools, time.Duration, time.Time and []byte, pointers
//     to them and slices of them are written by zap itself: floats without
//     an exponent, NaN and infinities as strings, complex numbers as
//     strings, durations as strings ("1.5s"), []byte as base64, a nil
//     pointer as null, a nil slice as [];
//   - an error as its message, plus keyVerbose (%+v, when it says more) or
//     keyCauses (for errors with an Errors method); []error as a list of
//     such objects under "error";
//   - a fmt.Stringer as its String;
//   - anything else as encoding/json writes it, without escaping HTML, or
//     keyError with the reason it cannot be;
//   - a panic in Error or String gives "<nil>" for a nil pointer, keyError
//     and "PANIC=..." otherwise.
//
// Strings are escaped as zap does, which is not quite encoding/json:
// U+2028 and U+2029 are written as they are (encoding/json, and so values
// that go through it, escape them), invalid UTF-8 as \ufffd, and <, >
// and & are not escaped.
//
// One deliberate difference: a time.Time value is written as its own
// milliseconds since the epoch. component-base's time encoder ignores the
// value it is given and writes the current time.

// appendKey appends a comma unless the key is the first of its object, and
// the key.
func appendKey(b []byte, key string) []byte {
	b = appendSeparator(b)
	b = appendString(b, key)
	return append(b, ':')
}

// appendSeparator appends the comma between two elements of an object or an
// array, as zap's encoder does: unless the last byte opens the object or
// array, or ends a key.
func appendSeparator(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	switch b[len(b)-1] {
	case '{', '[', ':', ',':
		return b
	}
	return append(b, ',')
}

const hexDigits = "0123456789abcdef"

// appendString appends s quoted and escaped as zap escapes it.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[last:i]...)
			b = append(b, `\ufffd`...)
			i++
			last = i
			continue
		}
		if c >= 0x20 && c != '\\' && c != '"' {
			i++
			continue
		}
		b = append(b, s[last:i]...)
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		last = i
	}
	b = append(b, s[last:]...)
	return append(b, '"')
}

// appendFloat writes a float without an exponent, with the precision of its
// type, and NaN and the infinities as strings.
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Inf"`...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, bits)
}

func appendComplex(b []byte, c complex128, bits int) []byte {
	b = append(b, '"')
	b = strconv.AppendFloat(b, real(c), 'f', -1, bits)
	if imag(c) >= 0 {
		b = append(b, '+')
	}
	b = strconv.AppendFloat(b, imag(c), 'f', -1, bits)
	return append(b, 'i', '"')
}

// appendField appends one key/value pair of a call or of WithValues, as
// zapr's zapIt converts it.
func appendField(b []byte, key string, value any) []byte {
	switch v := value.(type) {
	case logr.Marshaler:
		key, value = marshalLog(key, v)
	case slog.LogValuer:
		value = slog.AnyValue(v).Resolve()
	}
	if v, ok := value.(slog.Value); ok {
		return appendSlog(b, slog.Attr{Key: key, Value: v})
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

// appendAny appends a pair as zap.Any converts it, and writes keyError with
// the reason when the value cannot be written.
func appendAny(b []byte, key string, value any) []byte {
	switch v := value.(type) {
	case string:
		return appendString(appendKey(b, key), v)
	case int:
		return strconv.AppendInt(appendKey(b, key), int64(v), 10)
	case bool:
		return strconv.AppendBool(appendKey(b, key), v)
	case []byte:
		return appendBase64(appendKey(b, key), v)
	}
	// Before error and fmt.Stringer: time.Duration and time.Time are
	// Stringers, and so are pointers to them, nil or not.
	if encode := zapScalar(reflect.TypeOf(value)); encode != nil {
		return encode(appendKey(b, key), reflect.ValueOf(value))
	}
	var err error
	switch v := value.(type) {
	case error:
		b, err = appendErrorValue(b, key, v)
	case []error:
		b = appendKey(b, key)
		b, err = appendErrorList(b, v)
	case fmt.Stringer:
		b, err = appendStringer(b, key, v)
	default:
		var encoded []byte
		if encoded, err = marshalJSON(value); err == nil {
			return append(appendKey(b, key), encoded...)
		}
	}
	if err != nil {
		b = appendString(appendKey(b, key+"Error"), err.Error())
	}
	return b
}

func appendBase64(b []byte, data []byte) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, data)
	return append(b, '"')
}

// A scalarEncoder appends one value of a type that zap writes itself.
type scalarEncoder func(b []byte, v reflect.Value) []byte

// scalarEncoders are the types zap writes itself, with their pointers and
// slices: only these types, not types defined from them.
var scalarEncoders = map[reflect.Type]scalarEncoder{
	reflect.TypeFor[bool]():          func(b []byte, v reflect.Value) []byte { return strconv.AppendBool(b, v.Bool()) },
	reflect.TypeFor[string]():        func(b []byte, v reflect.Value) []byte { return appendString(b, v.String()) },
	reflect.TypeFor[int]():           appendIntValue,
	reflect.TypeFor[int8]():          appendIntValue,
	reflect.TypeFor[int16]():         appendIntValue,
	reflect.TypeFor[int32]():         appendIntValue,
	reflect.TypeFor[int64]():         appendIntValue,
	reflect.TypeFor[uint]():          appendUintValue,
	reflect.TypeFor[uint8]():         appendUintValue,
	reflect.TypeFor[uint16]():        appendUintValue,
	reflect.TypeFor[uint32]():        appendUintValue,
	reflect.TypeFor[uint64]():        appendUintValue,
	reflect.TypeFor[uintptr]():       appendUintValue,
	reflect.TypeFor[float32]():       func(b []byte, v reflect.Value) []byte { return appendFloat(b, v.Float(), 32) },
	reflect.TypeFor[float64]():       func(b []byte, v reflect.Value) []byte { return appendFloat(b, v.Float(), 64) },
	reflect.TypeFor[complex64]():     func(b []byte, v reflect.Value) []byte { return appendComplex(b, v.Complex(), 32) },
	reflect.TypeFor[complex128]():    func(b []byte, v reflect.Value) []byte { return appendComplex(b, v.Complex(), 64) },
	reflect.TypeFor[time.Duration](): func(b []byte, v reflect.Value) []byte { return appendString(b, time.Duration(v.Int()).String()) },
	reflect.TypeFor[time.Time]():     func(b []byte, v reflect.Value) []byte { return appendTime(b, v.Interface().(time.Time)) },
}

func appendIntValue(b []byte, v reflect.Value) []byte  { return strconv.AppendInt(b, v.Int(), 10) }
func appendUintValue(b []byte, v reflect.Value) []byte { return strconv.AppendUint(b, v.Uint(), 10) }

func appendTime(b []byte, t time.Time) []byte { return appendFloat(b, epochMillis(t), 64) }

// zapScalar returns the encoder of t if zap writes values of type t itself:
// one of scalarEncoders' types, a pointer to one or a slice of them ([]byte
// excepted, which is base64). It returns nil for other types.
func zapScalar(t reflect.Type) scalarEncoder {
	if t == nil {
		return nil
	}
	if encode := scalarEncoders[t]; encode != nil {
		return encode
	}
	if t.Name() != "" {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		if encode := scalarEncoders[t.Elem()]; encode != nil {
			return func(b []byte, v reflect.Value) []byte {
				if v.IsNil() {
					return append(b, "null"...)
				}
				return encode(b, v.Elem())
			}
		}
	case reflect.Slice:
		if encode := scalarEncoders[t.Elem()]; encode != nil {
			return func(b []byte, v reflect.Value) []byte {
				b = append(b, '[')
				for i := range v.Len() {
					b = encode(appendSeparator(b), v.Index(i))
				}
				return append(b, ']')
			}
		}
	}
	return nil
}

// marshalJSON encodes as zap's reflected encoder does: encoding/json without
// escaping HTML characters.
func marshalJSON(value any) ([]byte, error) {
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(value); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// appendError appends the err of an error line. A panicking Error method
// gives errError, as for any other value.
func appendError(b []byte, key string, err error) []byte {
	b, problem := appendErrorValue(b, key, err)
	if problem != nil {
		b = appendString(appendKey(b, key+"Error"), problem.Error())
	}
	return b
}

// appendErrorValue appends an error's message and, when it has them, its
// causes or its verbose form. The error returned is for keyError: a panic
// in err's methods.
func appendErrorValue(b []byte, key string, err error) (out []byte, problem error) {
	out = b
	defer func() {
		if r := recover(); r != nil {
			out, problem = recovered(out, key, err, r)
		}
	}()
	message := err.Error()
	out = appendString(appendKey(out, key), message)
	switch e := err.(type) {
	case interface{ Errors() []error }:
		out = appendKey(out, key+"Causes")
		return appendErrorList(out, e.Errors())
	case fmt.Formatter:
		if verbose := fmt.Sprintf("%+v", e); verbose != message {
			out = appendString(appendKey(out, key+"Verbose"), verbose)
		}
	}
	return out, nil
}

// appendErrorList appends a list of errors: an object for each error that is
// not nil, with the keys appendErrorValue writes under "error".
func appendErrorList(b []byte, errs []error) ([]byte, error) {
	b = append(b, '[')
	for _, err := range errs {
		if err == nil {
			continue
		}
		b = append(appendSeparator(b), '{')
		var problem error
		b, problem = appendErrorValue(b, "error", err)
		b = append(b, '}')
		if problem != nil {
			return append(b, ']'), problem
		}
	}
	return append(b, ']'), nil
}

func appendStringer(b []byte, key string, stringer fmt.Stringer) (out []byte, problem error) {
	out = b
	defer func() {
		if r := recover(); r != nil {
			out, problem = recovered(out, key, stringer, r)
		}
	}()
	return appendString(appendKey(out, key), stringer.String()), nil
}

// recovered handles a panic r in value's Error or String method: "<nil>"
// for a nil pointer, which most likely has a method that does not expect
// it, and a problem for keyError otherwise.
func recovered(b []byte, key string, value any, r any) ([]byte, error) {
	if v := reflect.ValueOf(value); v.Kind() == reflect.Pointer && v.IsNil() {
		return appendString(appendKey(b, key), "<nil>"), nil
	}
	return b, fmt.Errorf("PANIC=%v", r)
}

// appendSlog appends a slog value as zapr does: groups as objects (an empty
// group not at all, one without a key inline), other kinds as the
// corresponding Go value.
func appendSlog(b []byte, attr slog.Attr) []byte {
	if attr.Equal(slog.Attr{}) {
		return b
	}
	value := attr.Value
	switch value.Kind() {
	case slog.KindString:
		return appendString(appendKey(b, attr.Key), value.String())
	case slog.KindInt64:
		return strconv.AppendInt(appendKey(b, attr.Key), value.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(appendKey(b, attr.Key), value.Uint64(), 10)
	case slog.KindFloat64:
		return appendFloat(appendKey(b, attr.Key), value.Float64(), 64)
	case slog.KindBool:
		return strconv.AppendBool(appendKey(b, attr.Key), value.Bool())
	case slog.KindDuration:
		return appendString(appendKey(b, attr.Key), value.Duration().String())
	case slog.KindTime:
		return appendTime(appendKey(b, attr.Key), value.Time())
	case slog.KindLogValuer:
		return appendSlog(b, slog.Attr{Key: attr.Key, Value: value.Resolve()})
	case slog.KindGroup:
		group := value.Group()
		if attr.Key == "" {
			for _, member := range group {
				b = appendSlog(b, member)
			}
			return b
		}
		if len(group) == 0 {
			return b
		}
		b = append(appendKey(b, attr.Key), '{')
		for _, member := range group {
			b = appendSlog(b, member)
		}
		return append(b, '}')
	}
	return appendAny(b, attr.Key, value.Any())
}
