package jsonenc

import "testing"

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
