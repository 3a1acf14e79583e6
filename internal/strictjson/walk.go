package strictjson

// The walkers below find their way through a JSON text that is known to be
// valid (Check or CheckOuter accepted it, errors of syntax included), so
// that a caller can pick out the members or elements it needs without
// decoding the rest. On text that is not valid JSON their answers mean
// nothing, but they stay within b.

// SkipSpace returns the index of the first byte from i on that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index just after the JSON string starting at i.
func SkipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// SkipValue returns the index just after the valid JSON value starting at
// i (an object or an array with everything inside it).
func SkipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = SkipString(b, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the object holding a scalar
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}
