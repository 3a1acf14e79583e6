package bus

import (
	"bytes"
	"encoding/json"
	"net/mail"
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

// checkText refuses a value that is not PlainText, naming its field.
func checkText(field, v string) error {
	if !utf8.ValidString(v) {
		return Errorf(RuleManageBadRequest, "%s must be UTF-8 text.", field)
	}
	if !PlainText(v) {
		return Errorf(RuleManageBadRequest, "%s must not hold control characters.", field)
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
