package jsonenc

import (
	"encoding/json"
	"testing"
)

func TestMarshalKeepsHTMLCharacters(t *testing.T) {
	b, err := Marshal(map[string]string{"topic": "som.story.>", "q": "a<b&c"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"q":"a<b&c","topic":"som.story.>"}`; got != want {
		t.Errorf("got %s, want %s (no HTML escaping, no trailing newline)", got, want)
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("a func marshalled without error")
	}
}

// appendStringCases are strings AppendString must write as encoding/json does.
var appendStringCases = []string{
	"", "plain", `quote " and backslash \`, "<b>&amp;</b>", "tab\tnew\nline\rcr\bbs\fff",
	"\x00\x01\x1f\x7f", "é ü 日本 😀", "line\u2028para\u2029", "bad \xff utf-8 \xc3", "\xed\xa0\x80 surrogate",
}

func TestAppendStringIsEncodingJSON(t *testing.T) {
	for _, s := range appendStringCases {
		checkAppendString(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range appendStringCases {
		f.Add(s)
	}
	f.Fuzz(checkAppendString)
}

func checkAppendString(t *testing.T, s string) {
	html, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendString([]byte("x"), s, true); string(got) != "x"+string(html) {
		t.Errorf("AppendString(%q, escapeHTML) = %s, want x%s", s, got, html)
	}
	plain, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendString(nil, s, false); string(got) != string(plain) {
		t.Errorf("AppendString(%q) = %s, want %s", s, got, plain)
	}
}
