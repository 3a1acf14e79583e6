package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"testing"

	"github.com/sombus/sombus/internal/strictjson"
)

// somVersion is the rule validSomVersion checks, as a regular expression.
var somVersion = regexp.MustCompile(`^1\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// checkEnvelopeByMap is CheckEnvelope as it was written with encoding/json
// (the envelope decoded into a map, each field decoded again), the
// reference the one-walk reading must answer exactly as.
func checkEnvelopeByMap(raw []byte) (PublishMessage, []Violation) {
	if len(raw) > MaxEnvelopeBytes {
		return PublishMessage{}, []Violation{{Rule: RuleEnvelopeTooLarge, Message: fmt.Sprintf("The envelope is %d bytes; at most %d bytes (256 KiB) are accepted.", len(raw), MaxEnvelopeBytes)}}
	}
	if err := strictjson.Check(raw); err != nil {
		return PublishMessage{}, []Violation{{Rule: RuleEnvelopeMalformed, Message: fmt.Sprintf("The envelope is refused: %s.", err)}}
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
		return PublishMessage{}, []Violation{{Rule: RuleEnvelopeMalformed, Message: "The envelope must be one JSON object."}}
	}
	var vs []Violation
	str := func(name string) (string, bool) {
		v, ok := fields[name]
		if !ok {
			return "", false
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", false
		}
		return s, true
	}
	var m PublishMessage
	if v, ok := str("som_version"); !ok || !somVersion.MatchString(v) {
		vs = append(vs, Violation{Rule: RuleEnvelopeSomVersion, Message: "som_version must be a string MAJOR.MINOR.PATCH with major 1, such as \"1.0.0\"."})
	}
	if v, ok := str("message_id"); !ok || !validIDText(v) {
		vs = append(vs, Violation{Rule: RuleEnvelopeMessageID, Message: "message_id must be a string of 1 to 128 printable ASCII characters."})
	} else {
		m.MessageID = v
	}
	if v, ok := str("message_type"); !ok || !ValidMessageType(v) {
		vs = append(vs, Violation{Rule: RuleEnvelopeMessageType, Message: "message_type must be dot-separated segments of [a-z0-9_-], at most 128 characters, such as \"story.context\"."})
	} else {
		m.MessageType, m.Topic = v, TopicOf(v)
	}
	if v, ok := str("correlation_id"); !ok || !validIDText(v) {
		vs = append(vs, Violation{Rule: RuleEnvelopeCorrelationID, Message: "correlation_id must be a string of 1 to 128 printable ASCII characters."})
	} else {
		m.CorrelationID = v
	}
	if p, ok := fields["payload"]; !ok || len(bytes.TrimSpace(p)) == 0 || bytes.TrimSpace(p)[0] != '{' {
		vs = append(vs, Violation{Rule: RuleEnvelopePayload, Message: "payload must be a JSON object."})
	}
	if len(vs) > 0 {
		return PublishMessage{}, vs
	}
	m.Envelope = raw
	return m, nil
}

var envelopeSeeds = []string{
	`{"som_version":"1.0.0","message_id":"m-1","message_type":"story.context","correlation_id":"s-1","payload":{}}`,
	` { "som_version" : "1.12.3" , "message_id" : "~ !" , "message_type":"a_b.c-d.0","correlation_id":"x","payload" : {"a":[1,2,{"b":null}],"c":"}"} } `,
	`{"payload":{},"correlation_id":"c","message_type":"t","message_id":"m","som_version":"1.0.0","x":[{"y":"\"]"}],"n":-1.5e3,"t":true}`,
	`{"som_version":"2.0.0","message_id":"","message_type":"Story","correlation_id":"\u0000","payload":[]}`,
	`{"som_version":"1.0.0","message\u005fid":"m\u0041","message_type":"t","correlation_id":"c\"d","payload":{}}`,
	`{"som_version":"1.0.0","message_id":"\u00e9","message_type":"t..u","correlation_id":"c","payload":"{}"}`,
	`{"som_version":"01.0.0","message_id":"m","message_type":"t.","correlation_id":"c","payload":null}`,
	`{"som_version":"1.0.00","message_id":null,"message_type":null,"correlation_id":null,"payload":5}`,
	`{"som_version":1,"message_id":2,"message_type":3,"correlation_id":4,"payload":5}`,
	`{"som_version":"1.0","message_id":"m","message_type":"t","correlation_id":"c","payload":{}}`,
	`{"som_version":"1.0.0.","message_id":"m","message_type":"t","correlation_id":"c","payload":{}}`,
	`{"som_version":"1.10.20","message_id":"m","message_type":"t","correlation_id":"c","payload":{}}`,
	`[]`, `null`, `"x"`, `1`, ``, `{`, `{}`, ` {} `,
}

func TestCheckEnvelopeAsByMap(t *testing.T) {
	for _, s := range envelopeSeeds {
		checkAsByMap(t, []byte(s))
	}
}

func FuzzCheckEnvelopeAsByMap(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkAsByMap)
}

func checkAsByMap(t *testing.T, raw []byte) {
	m, vs := CheckEnvelope(raw)
	wm, wvs := checkEnvelopeByMap(raw)
	if !reflect.DeepEqual(m, wm) || !reflect.DeepEqual(vs, wvs) {
		t.Fatalf("CheckEnvelope(%q) = %+v %+v, want %+v %+v", raw, m, vs, wm, wvs)
	}
}

func FuzzSomVersion(f *testing.F) {
	for _, s := range []string{"1.0.0", "1.10.0", "1.0.01", "01.0.0", "1.0", "1..0", "1.0.0.", "2.0.0", "1.2.3x", "", "1.a.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if validSomVersion([]byte(s)) != somVersion.MatchString(s) {
			t.Fatalf("validSomVersion(%q) = %v", s, !somVersion.MatchString(s))
		}
	})
}
