package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// PlainText reports whether s is text every store takes and shows as sent:
// valid UTF-8 without control characters (NUL among them; PostgreSQL
// refuses NUL and bytes that are not UTF-8 in any text). Ids, names and
// other strings from outside are checked with it before they reach a store.
func PlainText(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError && !utf8.ValidString(s) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// MaxEmailLength is the longest e-mail address a user may have, in bytes.
const MaxEmailLength = 254

// PlainEmail says whether s is an e-mail address as users are created
// with: a bare address (no display name, no comment, nothing around it),
// plain text, of at most MaxEmailLength bytes. Every lookup by email checks
// it first, so that text no user can have never reaches a store (where
// PostgreSQL would refuse a NUL or broken UTF-8 with an error, and SQLite
// would answer "not found").
func PlainEmail(s string) bool {
	if len(s) > MaxEmailLength || !PlainText(s) {
		return false
	}
	addr, err := mail.ParseAddress(s)
	return err == nil && addr.Address == s
}

// checkEmail refuses an email that is not PlainEmail, naming the field.
func checkEmail(email string) error {
	if !PlainEmail(email) {
		return Errorf(RuleManageBadRequest, "email must be a plain e-mail address of at most %d characters.", MaxEmailLength)
	}
	return nil
}

// checkNewEmail refuses, naming the field, an email a user is created with
// or an owner adds a member by that is not PlainEmail, holds a
// bidirectional control (bidiControl; a new address is shown as names are)
// or holds a character that shows nothing or only space (hiddenInEmail).
// Sign-in looks emails up with PlainEmail alone, so that users created
// before these rules keep their way in.
func checkNewEmail(email string) error {
	if err := checkEmail(email); err != nil {
		return err
	}
	if strings.IndexFunc(email, bidiControl) >= 0 {
		return Errorf(RuleManageBadRequest, "email must not hold bidirectional embedding, override or isolate characters (U+202A to U+202E, U+2066 to U+2069).")
	}
	if i := strings.IndexFunc(email, hiddenInEmail); i >= 0 {
		r, _ := utf8.DecodeRuneInString(email[i:])
		return Errorf(RuleManageBadRequest, "email must not hold white space, control or format characters (it holds %U): such an address reads as another one.", r)
	}
	return nil
}

// hiddenInEmail reports whether r is white space, a control or a format
// character (Unicode categories Zs, Zl, Zp, Cc, Cf: the no-break space, the
// line separator, the zero-width space, the direction marks, the byte order
// mark, the soft hyphen among them), which net/mail takes in an address.
// An address holding one looks like the address without it, so that two
// users would seem to have the same email.
func hiddenInEmail(r rune) bool {
	return unicode.IsSpace(r) || unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp, unicode.Cc, unicode.Cf)
}

// checkText refuses a value people will see shown (a name, a skill's
// fields) that is not PlainText or holds a bidirectional control
// (bidiControl), naming its field.
func checkText(field, v string) error {
	if !utf8.ValidString(v) {
		return Errorf(RuleManageBadRequest, "%s must be UTF-8 text.", field)
	}
	if !PlainText(v) {
		return Errorf(RuleManageBadRequest, "%s must not hold control characters.", field)
	}
	if strings.IndexFunc(v, bidiControl) >= 0 {
		return Errorf(RuleManageBadRequest, "%s must not hold bidirectional embedding, override or isolate characters (U+202A to U+202E, U+2066 to U+2069).", field)
	}
	return nil
}

// bidiControl reports whether r opens or closes a bidirectional embedding,
// override or isolate. Names and other text people set are shown inside
// other text (a page's title, a sentence of the portal, a terminal's
// table): one such character left open reorders what follows it there, so
// that a label can read differently from what it says, or one name pass
// for another. The marks that only set a direction (U+200E, U+200F,
// U+061C) open nothing and stay allowed, as do the joiners that scripts and
// emoji need.
func bidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069
}

// invisible reports whether r shows nothing by itself: white space
// (U+3000 and the line and paragraph separators among it), control and
// format characters (Unicode category Cf: the zero-width space and joiners,
// the word joiner, the byte order mark, the soft hyphen, the direction
// marks, tags), variation selectors, the other characters Unicode says to
// ignore when nothing can show them (the Hangul fillers, the combining
// grapheme joiner) and the blank braille pattern U+2800.
func invisible(r rune) bool {
	return unicode.IsSpace(r) || r == 0x2800 || unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp, unicode.Cc, unicode.Cf,
		unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// checkVisible refuses a value people will see shown (a name, a skill's
// fields) without one visible character (invisible), naming its field: such
// a name reads as empty wherever it is shown, and taking it out again (the
// portal asks for a connection's name before removing it) would mean
// typing what cannot be seen.
func checkVisible(field, v string) error {
	if strings.IndexFunc(v, func(r rune) bool { return !invisible(r) }) < 0 {
		return Errorf(RuleManageBadRequest, "%s must hold a visible character, not only white space and invisible characters (such as U+200B, U+200E, U+FEFF or U+00AD).", field)
	}
	return nil
}

// checkJSONText refuses a JSON value holding a member name or a string
// with a control character (U+0000 included), as names refuse them,
// naming the field.
func checkJSONText(field string, raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end, or a syntax error the body's decoding reported already
		}
		if s, ok := tok.(string); ok && !PlainText(s) {
			return Errorf(RuleManageBadRequest, "%s must hold no control characters (such as \\u0000) in its member names and strings.", field)
		}
	}
}

// MaxRefusalBytes bounds the message of a refusal as the API and the
// portal show it. Messages quote what was sent (a field's value, a
// parameter's name, an id of the path), which may be anything up to the
// request's own limits.
const MaxRefusalBytes = 1024

// CutText is s as a refusal shows it: every character that would hide or
// reorder text escaped (hiddenInMessage, as strconv quotes it: \u202e,
// \u200b, \n, \x00; a byte that is not UTF-8 as \xff), then cut to at most
// n bytes (n over 40), at a rune's start, saying how much it left out.
// Messages quote what was sent: a U+202E in a path's id reordered the
// refusal's own text after it, which now reads "Workspace \u202e not
// found.". The API's answers and the portal's pages pass every message
// through it.
func CutText(s string, n int) string {
	s = escapeHidden(s)
	if len(s) <= n {
		return s
	}
	k := n - 40 // room for the note
	// Back to the start of the rune, at most a rune's length (in bytes
	// that are not UTF-8 any byte will do).
	for j := k; j > k-utf8.UTFMax && j > 0; j-- {
		if utf8.RuneStart(s[j]) {
			k = j
			break
		}
	}
	return s[:k] + fmt.Sprintf("… (%d bytes cut)", len(s)-k)
}

// hiddenInMessage reports whether a refusal's message shows r escaped:
// control characters, format characters (Unicode category Cf: the
// bidirectional embeddings, overrides and isolates U+202A to U+202E and
// U+2066 to U+2069 that names refuse, the direction marks, the zero-width
// characters, the byte order mark, the soft hyphen) and the line and
// paragraph separators.
func hiddenInMessage(r rune) bool {
	return r < 0x20 || r == 0x7f || r >= 0x80 && unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// escapeHidden is s with every hiddenInMessage character, and every byte
// that is not UTF-8, escaped as strconv quotes them; s itself when there
// are none (the usual case, without allocating).
func escapeHidden(s string) string {
	i := 0
	for i < len(s) {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || hiddenInMessage(r) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case hiddenInMessage(r):
			q := strconv.QuoteRune(r) // '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
