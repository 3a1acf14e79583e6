// Package strictjson checks that a JSON text is one every common parser
// reads the same way: the I-JSON profile (RFC 7493) with limits. It refuses
// what encoding/json lets through silently: bytes that are not UTF-8
// (encoding/json replaces them with U+FFFD), escaped lone surrogates,
// member names repeated within an object (encoding/json keeps the last),
// nesting deeper than MaxDepth and numbers longer than MaxNumberLength
// characters or beyond the range of a float64.
//
// Check makes one pass over the bytes and allocates nothing on the way
// (its scratch space is pooled); only a refusal allocates.
//
// Members then checks a text against the Go type encoding/json will decode
// it into: member names exactly the fields' (encoding/json ignores case),
// no null where the type has no place for it, required members given.
package strictjson

import (
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Limits of an accepted JSON text.
const (
	// MaxDepth is the deepest nesting of objects and arrays: the outermost
	// object is level 1.
	MaxDepth = 64
	// MaxNumberLength is the most characters a number may have, sign,
	// fraction and exponent included.
	MaxNumberLength = 100
)

// maxOpaqueDepth bounds nesting in the part CheckOuter leaves to a later
// check (as encoding/json does), so that the scratch space stays bounded.
const maxOpaqueDepth = 10000

// Kind says what is wrong.
type Kind int

// The kinds of refusal.
const (
	Syntax    Kind = iota + 1 // not JSON
	UTF8                      // a byte sequence that is not UTF-8
	Surrogate                 // an escaped lone UTF-16 surrogate (\ud800)
	Duplicate                 // a member name given twice in one object
	Depth                     // nested deeper than MaxDepth
	Number                    // a number too long or beyond a float64
)

// Error is a refusal: what is wrong, at which byte (counted from 0) and in
// which member.
type Error struct {
	Kind   Kind
	Offset int
	// Path names the member where it went wrong, such as payload.items[2].name
	// ("" at the top level).
	Path   string
	Detail string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s at byte %d", e.Detail, e.Offset)
	}
	return fmt.Sprintf("%s at byte %d (in %s)", e.Detail, e.Offset, e.Path)
}

// Check checks the JSON text b: one value with only whitespace around it.
func Check(b []byte) *Error { return check(b, -1) }

// CheckOuter checks b as Check does down to the given nesting level; values
// nested deeper (at level > outer, e.g. the elements of an array at level
// outer) are only checked for syntax, to be checked on their own later.
func CheckOuter(b []byte, outer int) *Error { return check(b, outer) }

func check(b []byte, outer int) *Error {
	s := pool.Get().(*state)
	s.reset(b, outer)
	err := s.run()
	if len(s.frames) <= 4*MaxDepth && cap(s.names) <= 1<<12 && cap(s.scratch) <= 1<<16 {
		s.b = nil
		pool.Put(s)
	}
	return err
}

var pool = sync.Pool{New: func() any {
	return &state{seed: maphash.MakeSeed(), frames: make([]frame, 0, MaxDepth)}
}}

// smallObject is the most members an object may have before its names are
// also kept in a hash map (below it a linear scan is faster).
const smallObject = 16

type frame struct {
	obj       bool
	opaque    bool // only syntax is checked inside
	hashed    bool // names are in the map
	count     int  // members or elements so far
	nameStart int  // first of this object's names in state.names
	scratch   int  // length of state.scratch when the object opened
	serial    uint32
}

// name is a member name: raw bytes of the input or, when it had escapes,
// decoded bytes in state.scratch.
type name struct {
	off, n  int
	decoded bool
}

type bigKey struct {
	serial uint32
	h      uint64
}

type state struct {
	b       []byte
	i       int
	outer   int
	frames  []frame
	names   []name
	scratch []byte
	big     map[bigKey]int
	serial  uint32
	seed    maphash.Seed
}

func (s *state) reset(b []byte, outer int) {
	s.b, s.i, s.outer = b, 0, outer
	s.frames = s.frames[:0]
	s.names = s.names[:0]
	s.scratch = s.scratch[:0]
	if len(s.big) > 0 {
		clear(s.big)
	}
}

func (s *state) nameBytes(n name) []byte {
	if n.decoded {
		return s.scratch[n.off : n.off+n.n]
	}
	return s.b[n.off : n.off+n.n]
}

// opaque says whether a value starting now is only syntax-checked.
func (s *state) opaque() bool {
	if s.outer < 0 {
		return false
	}
	if d := len(s.frames); d > 0 && s.frames[d-1].opaque {
		return true
	}
	return len(s.frames) >= s.outer
}

func (s *state) fail(k Kind, off int, format string, args ...any) *Error {
	return &Error{Kind: k, Offset: off, Path: s.path(), Detail: fmt.Sprintf(format, args...)}
}

// path names the member being read, from the open frames.
func (s *state) path() string {
	var p strings.Builder
	for _, f := range s.frames {
		if f.count == 0 {
			break
		}
		if f.obj {
			// The frame's last name is its member being read.
			n := s.names[f.nameStart+f.count-1]
			if p.Len() > 0 {
				p.WriteByte('.')
			}
			p.WriteString(strings.ToValidUTF8(string(s.nameBytes(n)), "\uFFFD"))
		} else {
			fmt.Fprintf(&p, "[%d]", f.count-1)
		}
	}
	return p.String()
}

func (s *state) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *state) run() *Error {
	s.ws()
	if err := s.value(); err != nil {
		return err
	}
	for {
		// After a value: close containers or go on to the next member.
		if len(s.frames) == 0 {
			s.ws()
			if s.i != len(s.b) {
				return s.fail(Syntax, s.i, "data after the JSON value")
			}
			return nil
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.fail(Syntax, s.i, "unexpected end of JSON")
		}
		f := &s.frames[len(s.frames)-1]
		c := s.b[s.i]
		switch {
		case c == ',':
			s.i++
			s.ws()
			if f.obj {
				if err := s.member(); err != nil {
					return err
				}
			} else {
				f.count++
			}
			if err := s.value(); err != nil {
				return err
			}
		case c == '}' && f.obj, c == ']' && !f.obj:
			s.i++
			s.pop()
		default:
			if f.obj {
				return s.fail(Syntax, s.i, "expected ',' or '}'")
			}
			return s.fail(Syntax, s.i, "expected ',' or ']'")
		}
	}
}

func (s *state) pop() {
	f := s.frames[len(s.frames)-1]
	if f.obj {
		s.names = s.names[:f.nameStart]
		s.scratch = s.scratch[:f.scratch]
	}
	s.frames = s.frames[:len(s.frames)-1]
}

// value reads one value; a container is opened (and its first member's
// name read), not read through.
func (s *state) value() *Error {
	if s.i >= len(s.b) {
		return s.fail(Syntax, s.i, "unexpected end of JSON")
	}
	opaque := s.opaque()
	switch c := s.b[s.i]; c {
	case '{', '[':
		depth := len(s.frames) + 1
		if !opaque && depth > MaxDepth || depth > maxOpaqueDepth+max(s.outer, 0) {
			lim := MaxDepth
			if opaque {
				lim = maxOpaqueDepth
			}
			return s.fail(Depth, s.i, "nesting deeper than %d levels", lim)
		}
		s.serial++
		s.frames = append(s.frames, frame{obj: c == '{', opaque: opaque, nameStart: len(s.names), scratch: len(s.scratch), serial: s.serial})
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == "}]"[btoi(c == '[')] {
			s.i++
			s.pop()
			return nil
		}
		if c == '[' {
			s.frames[len(s.frames)-1].count = 1
			return s.value()
		}
		if err := s.member(); err != nil {
			return err
		}
		return s.value()
	case '"':
		_, _, err := s.str(opaque, false)
		return err
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return s.number(opaque)
		}
		return s.fail(Syntax, s.i, "invalid character %q looking for a value", rune(c))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *state) lit(w string) *Error {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return s.fail(Syntax, s.i, "invalid literal (expected %s)", w)
	}
	s.i += len(w)
	return nil
}

// member reads a member name and its colon in the innermost object, which
// must not have had it before.
func (s *state) member() *Error {
	f := &s.frames[len(s.frames)-1]
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.fail(Syntax, s.i, "expected a member name")
	}
	start := s.i
	n, _, err := s.str(f.opaque, !f.opaque)
	if err != nil {
		return err
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return s.fail(Syntax, s.i, "expected ':' after a member name")
	}
	s.i++
	s.ws()
	if !f.opaque {
		if dup := s.seen(f, n); dup {
			s.names = append(s.names, n)
			f.count++
			return s.fail(Duplicate, start, "member name %s given twice", strconv.Quote(string(s.nameBytes(n))))
		}
	}
	s.names = append(s.names, n)
	f.count++
	return nil
}

// seen says whether object f has had name n already, and records it.
func (s *state) seen(f *frame, n name) bool {
	nb := s.nameBytes(n)
	if f.count < smallObject {
		for _, o := range s.names[f.nameStart:] {
			if o.n == n.n && string(s.nameBytes(o)) == string(nb) {
				return true
			}
		}
		return false
	}
	if s.big == nil {
		s.big = make(map[bigKey]int)
	}
	if !f.hashed {
		f.hashed = true
		for j := f.nameStart; j < len(s.names); j++ {
			s.big[bigKey{f.serial, maphash.Bytes(s.seed, s.nameBytes(s.names[j]))}] = j
		}
	}
	k := bigKey{f.serial, maphash.Bytes(s.seed, nb)}
	if j, ok := s.big[k]; ok {
		if string(s.nameBytes(s.names[j])) == string(nb) {
			return true
		}
		// Two names with one hash: look through them all.
		for _, o := range s.names[f.nameStart:] {
			if string(s.nameBytes(o)) == string(nb) {
				return true
			}
		}
		return false
	}
	s.big[k] = len(s.names)
	return false
}

// str reads a string starting at its quote. For a name (decode) whose text
// has escapes the decoded text goes to scratch. An opaque string is checked
// for syntax only.
func (s *state) str(opaque, decode bool) (name, bool, *Error) {
	start := s.i
	s.i++
	n := name{off: s.i}
	escaped := false
	for {
		if s.i >= len(s.b) {
			return n, escaped, s.fail(Syntax, start, "unterminated string")
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			n.n = s.i - n.off
			s.i++
			if escaped && decode {
				n = s.decodeName(n.off, s.i-1)
			}
			return n, escaped, nil
		case c == '\\':
			escaped = true
			if err := s.escape(opaque); err != nil {
				return n, escaped, err
			}
		case c < 0x20:
			return n, escaped, s.fail(Syntax, s.i, "control character %#02x in a string (escape it)", c)
		case c < utf8.RuneSelf:
			s.i++
		case opaque:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size <= 1 {
				return n, escaped, s.fail(UTF8, s.i, "invalid UTF-8 (%#02x)", c)
			}
			s.i += size
		}
	}
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// escape reads one escape sequence at s.i (at the backslash).
func (s *state) escape(opaque bool) *Error {
	at := s.i
	if s.i+1 >= len(s.b) {
		return s.fail(Syntax, at, "unterminated string")
	}
	switch s.b[s.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i += 2
		return nil
	case 'u':
	default:
		return s.fail(Syntax, at, "invalid escape \\%c", s.b[s.i+1])
	}
	r, ok := hex4(s.b[s.i+2:])
	if !ok {
		return s.fail(Syntax, at, "invalid \\u escape")
	}
	s.i += 6
	if opaque || r < 0xd800 || r > 0xdfff {
		return nil
	}
	if r <= 0xdbff && s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
		if r2, ok := hex4(s.b[s.i+2:]); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
			s.i += 6
			return nil
		}
	}
	return s.fail(Surrogate, at, "escape %s is a lone UTF-16 surrogate", string(s.b[at:at+6]))
}

// decodeName decodes the escapes of a checked name b[from:to] into scratch.
func (s *state) decodeName(from, to int) name {
	n := name{off: len(s.scratch), decoded: true}
	b := s.b[from:to]
	for j := 0; j < len(b); {
		if b[j] != '\\' {
			s.scratch = append(s.scratch, b[j])
			j++
			continue
		}
		switch c := b[j+1]; c {
		case 'b':
			s.scratch = append(s.scratch, '\b')
		case 'f':
			s.scratch = append(s.scratch, '\f')
		case 'n':
			s.scratch = append(s.scratch, '\n')
		case 'r':
			s.scratch = append(s.scratch, '\r')
		case 't':
			s.scratch = append(s.scratch, '\t')
		case 'u':
			r, _ := hex4(b[j+2:])
			if r >= 0xd800 && r <= 0xdbff {
				r2, _ := hex4(b[j+8:])
				r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
				j += 6
			}
			s.scratch = utf8.AppendRune(s.scratch, r)
			j += 6
			continue
		default: // " \ /
			s.scratch = append(s.scratch, c)
		}
		j += 2
	}
	n.n = len(s.scratch) - n.off
	return n
}

// number reads a number, refusing one longer than MaxNumberLength or whose
// magnitude a float64 cannot hold.
func (s *state) number(opaque bool) *Error {
	start := s.i
	b := s.b
	i := s.i
	if b[i] == '-' {
		i++
	}
	// exp10 tracks the decimal exponent of the first significant digit.
	first := -1 // index among the mantissa digits of the first non-zero one
	intDigits := 0
	switch {
	case i < len(b) && b[i] == '0':
		i++
		intDigits = 1
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		first = 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			intDigits++
		}
	default:
		s.i = i
		return s.fail(Syntax, i, "invalid number")
	}
	fracLead := 0 // leading zeros of the fraction before a significant digit
	if i < len(b) && b[i] == '.' {
		i++
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if first < 0 && b[i] != '0' {
				first = intDigits + (i - j)
				fracLead = i - j
			}
			i++
		}
		if i == j {
			return s.fail(Syntax, i, "invalid number (no digits after '.')")
		}
	}
	exp := 0
	hasExp := false
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		hasExp = true
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if exp < 1e6 {
				exp = exp*10 + int(b[i]-'0')
			}
			i++
		}
		if i == j {
			return s.fail(Syntax, i, "invalid number (no digits in the exponent)")
		}
		if neg {
			exp = -exp
		}
	}
	s.i = i
	if opaque {
		return nil
	}
	if i-start > MaxNumberLength {
		return s.fail(Number, start, "number of %d characters (at most %d)", i-start, MaxNumberLength)
	}
	if !hasExp || first < 0 {
		return nil // at most MaxNumberLength digits, or zero
	}
	// The magnitude is d.ddd × 10^e10.
	var e10 int
	if first < intDigits {
		e10 = intDigits - 1 + exp
	} else {
		e10 = -fracLead - 1 + exp
	}
	switch {
	case e10 < 308:
		return nil
	case e10 == 308:
		if f, err := strconv.ParseFloat(string(b[start:i]), 64); err == nil && f == f {
			return nil
		}
	}
	return s.fail(Number, start, "number beyond the range of a 64-bit float")
}
