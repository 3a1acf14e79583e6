package client_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sombus/sombus/client"
)

// TestMarshalWritesHTMLCharactersAsIs: a message or skills printed as JSON
// (sombus receive -o json) shows ">", "<" and "&" as they are, as the bus
// does.
func TestMarshalWritesHTMLCharactersAsIs(t *testing.T) {
	m := client.Message{Topic: "som.a", EnqueuedAt: time.Unix(0, 0),
		Envelope: json.RawMessage(`{"payload":{"s":"a>b & <c>"}}`)}
	s := client.Skills{Registrations: []client.SkillRegistration{{InstanceID: "i", Skill: "s", Name: "x & <y>",
		Values: json.RawMessage(`{}`)}}}
	for _, v := range []json.Marshaler{m, s} {
		b, err := v.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`\u00`)) || !bytes.Contains(b, []byte(`&`)) {
			t.Errorf("MarshalJSON escapes HTML characters: %s", b)
		}
	}
}
