package bus

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sombus/sombus/internal/strictjson"
)

// envelopeRules are the rules CheckEnvelope may refuse with.
var envelopeRules = map[string]int{
	RuleEnvelopeMalformed: http.StatusBadRequest, RuleEnvelopeSomVersion: http.StatusBadRequest,
	RuleEnvelopeMessageID: http.StatusBadRequest, RuleEnvelopeMessageType: http.StatusBadRequest,
	RuleEnvelopeCorrelationID: http.StatusBadRequest, RuleEnvelopePayload: http.StatusBadRequest,
	RuleEnvelopeTooLarge: http.StatusRequestEntityTooLarge,
}

// FuzzCheckEnvelope: an envelope is accepted only when it is one strict
// JSON object (UTF-8, no repeated names) whose fields encoding/json reads as
// the very values CheckEnvelope took, and is kept byte for byte; a refusal
// is one or more violations of the envelope rules, each rule at most once,
// each with a sentence.
func FuzzCheckEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"som_version":"1.0.0","message_id":"m-1","message_type":"story.context","correlation_id":"s-1","payload":{}}`,
		`{"som_version":"1.12.3","message_id":"~ !","message_type":"a_b.c-d.0","correlation_id":"x","payload":{"a":[1,2,{"b":null}]}}`,
		` {"payload":{},"correlation_id":"c","message_type":"t","message_id":"m","som_version":"1.0.0"} `,
		`{"som_version":"2.0.0","message_id":"","message_type":"Story","correlation_id":"\u0000","payload":[]}`,
		`{"som_version":"1.0.0","message_id":"m","message_id":"n","message_type":"t","correlation_id":"c","payload":{}}`,
		`{"som_version":"1.0.0","message_id":"\u00e9","message_type":"t..u","correlation_id":"c","payload":"{}"}`,
		"{\"som_version\":\"1.0.0\",\"message_id\":\"\xff\",\"message_type\":\"t\",\"correlation_id\":\"c\",\"payload\":{}}",
		`{"som_version":"1.0.0","message_id":"m","message_type":"t","correlation_id":"c","payload":{}}{}`,
		`{"som_version":"01.0.0","message_id":"m","message_type":"t.","correlation_id":"c","payload":null}`,
		`{"som_version":1,"message_id":2,"message_type":3,"correlation_id":4,"payload":5}`,
		`[]`, `null`, ``, `{`, `{"payload":{"x":1e999}}`, `{"payload":{"\ud800":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, vs := CheckEnvelope(raw)
		m2, vs2 := CheckEnvelope(raw)
		if len(vs) != len(vs2) || m.MessageID != m2.MessageID {
			t.Fatalf("CheckEnvelope is not deterministic on %q", raw)
		}
		if len(vs) > 0 {
			if m.MessageID != "" || m.Envelope != nil {
				t.Fatalf("refused %q but returned a message %+v", raw, m)
			}
			seen := map[string]bool{}
			for _, v := range vs {
				if _, ok := envelopeRules[v.Rule]; !ok {
					t.Fatalf("refusal of %q with rule %q, not an envelope rule", raw, v.Rule)
				}
				if seen[v.Rule] {
					t.Fatalf("rule %s twice for %q", v.Rule, raw)
				}
				seen[v.Rule] = true
				if !strings.HasSuffix(v.Message, ".") || !utf8.ValidString(v.Message) {
					t.Fatalf("violation message %q is not a sentence of UTF-8", v.Message)
				}
			}
			if (seen[RuleEnvelopeMalformed] || seen[RuleEnvelopeTooLarge]) && len(vs) != 1 {
				t.Fatalf("a malformed or too large envelope has other violations too: %+v", vs)
			}
			if seen[RuleEnvelopeTooLarge] != (len(raw) > MaxEnvelopeBytes) {
				t.Fatalf("too_large for %d bytes", len(raw))
			}
			return
		}
		// Accepted: strict JSON, byte for byte, and the fields are what
		// any JSON reader sees.
		if !bytes.Equal(m.Envelope, raw) {
			t.Fatal("the accepted envelope is not the bytes given")
		}
		if len(raw) > MaxEnvelopeBytes || !utf8.Valid(raw) || !json.Valid(raw) || strictjson.Check(raw) != nil {
			t.Fatalf("accepted %q, which is not strict JSON within the limit", raw)
		}
		var e struct {
			SomVersion    string          `json:"som_version"`
			MessageID     string          `json:"message_id"`
			MessageType   string          `json:"message_type"`
			CorrelationID string          `json:"correlation_id"`
			Payload       json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", raw, err)
		}
		var payload map[string]any
		if err := json.Unmarshal(e.Payload, &payload); err != nil || payload == nil {
			t.Fatalf("accepted payload %q is not an object", e.Payload)
		}
		if e.MessageID != m.MessageID || e.CorrelationID != m.CorrelationID || e.MessageType != m.MessageType {
			t.Fatalf("fields %+v differ from what encoding/json reads: %+v", m, e)
		}
		if !somVersion.MatchString(e.SomVersion) || !validIDText(m.MessageID) || !validIDText(m.CorrelationID) ||
			!ValidMessageType(m.MessageType) || m.Topic != TopicOf(m.MessageType) || ValidateTopicPattern(m.Topic) != nil {
			t.Fatalf("accepted fields out of their rules: %+v", m)
		}
	})
}

// FuzzTopicPattern: a pattern is accepted only when made of [a-z0-9_-]+
// segments, "*" and a final ">"; a reachable pattern matches a topic built
// from it, which is a topic some message type has; matching a pattern
// without wildcards is equality.
func FuzzTopicPattern(f *testing.F) {
	for _, s := range []struct{ p, topic string }{
		{"som.story.*", "som.story.context"}, {"som.>", "som.a.b.c"}, {">", "som.x"}, {"*.*", "som.x"},
		{"som.story.context", "som.story.context"}, {"som..x", "som..x"}, {"som.>.x", "som.a.x"},
		{"som.*.>", "som.a"}, {"story.*", "story.x"}, {"som", "som"}, {"", ""}, {"som.Story", "som.Story"},
		{"som." + strings.Repeat("a", 200), "som.a"}, {"som.é", "som.é"}, {"som.a\x00", "som.a\x00"},
		{"som.>", "som."}, {"*", "som"},
	} {
		f.Add(s.p, s.topic)
	}
	f.Fuzz(func(t *testing.T, p, topic string) {
		valid := ValidateTopicPattern(p) == nil
		if valid {
			if p == "" || len(p) > 256 || !utf8.ValidString(p) {
				t.Fatalf("accepted pattern %q", p)
			}
			segs := strings.Split(p, ".")
			example := make([]string, len(segs))
			for i, s := range segs {
				switch {
				case s == "*" || s == ">":
					example[i] = "x"
					if s == ">" && i != len(segs)-1 {
						t.Fatalf("accepted %q with > before the end", p)
					}
				case validSegment(s):
					example[i] = s
				default:
					t.Fatalf("accepted %q with segment %q", p, s)
				}
			}
			if !MatchTopic(p, strings.Join(example, ".")) {
				t.Fatalf("%q does not match its own example %q", p, strings.Join(example, "."))
			}
			if CheckTopicReachable(p) == nil {
				// Some message type's topic matches it.
				if segs[0] == ">" || segs[0] == "*" {
					example[0] = "som"
				}
				if len(example) == 1 {
					example = append(example, "x")
				}
				mt := strings.Join(example[1:], ".")
				if example[0] != "som" || !ValidMessageType(mt) || !MatchTopic(p, TopicOf(mt)) {
					t.Fatalf("%q is called reachable, but %q does not show it", p, TopicOf(mt))
				}
			}
		}
		match := MatchTopic(p, topic)
		if !strings.ContainsAny(p, "*>") && match != (p == topic) {
			t.Fatalf("MatchTopic(%q, %q) = %v without wildcards", p, topic, match)
		}
		if match && valid && strings.Count(topic, ".") < strings.Count(p, ".") {
			t.Fatalf("%q matches %q, which has fewer segments", p, topic)
		}
		if ValidMessageType(topic) {
			top := TopicOf(topic)
			if ValidateTopicPattern(top) != nil || CheckTopicReachable(top) != nil || !MatchTopic(top, top) ||
				!MatchTopic("som.>", top) || !MatchTopic(">", top) {
				t.Fatalf("topic %q of a valid message type does not match itself or som.>", top)
			}
			if !Matches([]Subscription{{Topic: top, Producers: []string{"cp"}}}, top, "cp") ||
				Matches([]Subscription{{Topic: top, Producers: []string{"cp"}}}, top, "cq") {
				t.Fatalf("producer filter of %q does not hold", top)
			}
		}
	})
}
