package bus

import (
	"strings"
	"testing"
)

// TestCheckName: the rules of a human name (users, workspaces,
// connections), each refused with a message that names it.
func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name, v, want string // want: part of the refusal, "" for accepted
	}{
		{"plain", "Orders", ""},
		{"accents and scripts", "Café · 注文 · طلبات", ""},
		{"emoji joined by a zero-width joiner", "team 👩\u200d💻", ""},
		{"a right-to-left mark", "orders\u200f", ""},
		{"an Arabic letter mark", "\u061cطلبات", ""},
		{"128 characters", strings.Repeat("é", MaxNameLength), ""},
		{"empty", "", "name is required."},
		{"blank", " \t", "name is required."},
		{"129 characters", strings.Repeat("é", MaxNameLength+1), "at most 128 characters"},
		{"not UTF-8", "a\xffb", "must be UTF-8 text"},
		{"NUL", "a\x00b", "must not hold control characters"},
		{"newline", "a\nb", "must not hold control characters"},
		{"DEL", "a\x7fb", "must not hold control characters"},
		{"right-to-left override", "invoice\u202egpj.exe", "bidirectional"},
		{"left-to-right embedding", "\u202aorders", "bidirectional"},
		{"pop directional formatting", "orders\u202c", "bidirectional"},
		{"right-to-left isolate", "orders\u2067x", "bidirectional"},
		{"pop directional isolate", "orders\u2069", "bidirectional"},
		{"ideographic space alone", "\u3000", "name is required."},
		{"a byte order mark alone", "\ufeff", "name must hold a visible character"},
		{"a zero-width space alone", "\u200b", "name must hold a visible character"},
		{"direction marks alone", "\u200e\u200f\u061c", "name must hold a visible character"},
		{"zero-width characters and a soft hyphen", "\u200b\u2060\ufeff\u00ad", "name must hold a visible character"},
		{"joiners around spaces", " \u200d \u200c ", "name must hold a visible character"},
		{"a line separator and a word joiner", "\u2028\u2060", "name must hold a visible character"},
		{"Hangul fillers", "\u3164\u115f\uffa0", "name must hold a visible character"},
		{"a variation selector", "\ufe0f", "name must hold a visible character"},
		{"a tag character", "\U000e0041", "name must hold a visible character"},
		{"a blank braille pattern", "\u2800", "name must hold a visible character"},
		{"invisible characters around a letter", "\u200bx\ufeff", ""},
		{"a lone combining accent", "\u0301", ""},
		{"a private-use character", "\ue000", ""},
	} {
		err := checkName("name", tc.v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
}

// TestCheckTextRefusesBidiControls: the skills' fields (checkText) refuse
// what names refuse.
func TestCheckTextRefusesBidiControls(t *testing.T) {
	if err := checkText("registrations[0].name", "orders\u202eevil"); err == nil || !strings.Contains(err.Error(), "registrations[0].name must not hold bidirectional") {
		t.Errorf("a skill name with U+202E: %v, want a refusal naming the field", err)
	}
	if err := checkText("registrations[0].name", "Café \u200f"); err != nil {
		t.Errorf("a skill name with a right-to-left mark: %v", err)
	}
}

// TestCheckVisibleSkillFields: a skill registration's fields refuse what
// names refuse when nothing of them would show.
func TestCheckVisibleSkillFields(t *testing.T) {
	if err := checkVisible("registrations[0].name", "\u200b\u200e"); err == nil || !strings.Contains(err.Error(), "registrations[0].name must hold a visible character") {
		t.Errorf("an invisible skill name: %v, want a refusal naming the field", err)
	}
	if err := checkVisible("registrations[0].name", "Café \u200f"); err != nil {
		t.Errorf("a skill name with a right-to-left mark: %v", err)
	}
}

// TestCheckNewEmail: a new user's email (and one an owner adds a member by)
// refuses white space, control and format characters anywhere, naming the
// field and the character; plain addresses in any script are taken.
func TestCheckNewEmail(t *testing.T) {
	for _, tc := range []struct {
		name, v, want string // want: part of the refusal, "" for accepted
	}{
		{"plain", "x@example.com", ""},
		{"accents", "zoë@exämple.com", ""},
		{"a line separator after it", "x@example.com\u2028", "email must not hold white space, control or format characters (it holds U+2028)"},
		{"a paragraph separator inside", "x\u2029y@example.com", "U+2029"},
		{"a byte order mark", "x\ufeff@example.com", "email must not hold white space, control or format characters (it holds U+FEFF)"},
		{"a right-to-left mark", "bi\u200fdi@example.com", "U+200F"},
		{"a zero-width space", "x\u200b@example.com", "U+200B"},
		{"a soft hyphen", "x\u00ad@example.com", "U+00AD"},
		{"a no-break space", "x\u00a0@example.com", "U+00A0"},
		{"an ideographic space", "x\u3000@example.com", "U+3000"},
		{"a bidirectional override", "x\u202e@example.com", "bidirectional"},
		{"a newline", "x\n@example.com", "plain e-mail address"},
		{"a display name", "X <x@example.com>", "plain e-mail address"},
	} {
		err := checkNewEmail(tc.v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
}

// TestCutTextEscapesHiddenCharacters: a refusal's message shows escaped,
// as strconv quotes them, the bidirectional controls names refuse, the
// other format characters, control characters, the line and paragraph
// separators and bytes that are not UTF-8, so that what it quotes can never
// reorder or hide its own text; other text (accents, scripts, emoji)
// stays as it is, and a long message is still cut.
func TestCutTextEscapesHiddenCharacters(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Workspace \u202e not found.", `Workspace \u202e not found.`},
		{"\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`},
		{"x\u200b\u200c\u200d\u200e\u200f\u061c\u2060\ufeff\u00ady", `x\u200b\u200c\u200d\u200e\u200f\u061c\u2060\ufeff\u00ady`},
		{"a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"a\x00b\nc\x7f\u0085", `a\x00b\nc\x7f\u0085`},
		{"a\xffb", `a\xffb`},
		{"tag \U000e0041", `tag \U000e0041`},
		{"Café · 注文 · طلبات 👩💻", "Café · 注文 · طلبات 👩💻"},
		{"User \"a b\" not found.", "User \"a b\" not found."},
	} {
		if got := CutText(tc.in, MaxRefusalBytes); got != tc.want {
			t.Errorf("CutText(%+q) = %+q, want %+q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("\u202e", 1000) // 3000 bytes, 6000 escaped
	got := CutText(long, MaxRefusalBytes)
	if len(got) > MaxRefusalBytes || strings.ContainsRune(got, '\u202e') || !strings.HasSuffix(got, "bytes cut)") {
		t.Errorf("a long message of U+202E: %d bytes, %.80q…", len(got), got)
	}
}
