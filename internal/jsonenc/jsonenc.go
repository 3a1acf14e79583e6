// Package jsonenc writes JSON the way sombus shows it everywhere: the
// server's answers, the SDK's requests and the CLI's output.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Marshal is json.Marshal without HTML escaping: ">", "<" and "&" are
// written as they are (a topic pattern reads "som.story.>", not
// "som.story.\u003e"), which every JSON parser reads alike. encoding/json
// keeps what a MarshalJSON method returns unescaped when the outer encoder
// does not escape either, so MarshalJSON methods use it too.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// AppendString appends s as a JSON string to dst, escaped byte for byte as
// encoding/json escapes it: with escapeHTML as json.Marshal (which writes
// "<", ">" and "&" as \u003c, \u003e and \u0026), without as Marshal here.
// Bytes that are not UTF-8 become \ufffd, and U+2028 and U+2029 are
// escaped, as there. Hand-written answers on the message path use it, so
// that they read exactly as the reflective encoder wrote them.
func AppendString(dst []byte, s string, escapeHTML bool) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (!escapeHTML || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
