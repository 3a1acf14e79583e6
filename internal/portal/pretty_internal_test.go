package portal

import "testing"

func TestPrettyJSONKeepsTheProducersOrderAndDigits(t *testing.T) {
	got := prettyJSON([]byte(`{"z":1,"a":{"n":12345678901234567890,"s":">"}}`))
	want := "{\n  \"z\": 1,\n  \"a\": {\n    \"n\": 12345678901234567890,\n    \"s\": \">\"\n  }\n}"
	if got != want {
		t.Errorf("prettyJSON = %q, want %q", got, want)
	}
	if got := prettyJSON([]byte("not json")); got != "not json" {
		t.Errorf("prettyJSON(not json) = %q", got)
	}
}
