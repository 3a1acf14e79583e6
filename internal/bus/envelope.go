package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/sombus/sombus/internal/strictjson"
)

// Envelope limits.
const (
	MaxEnvelopeBytes = 256 << 10
	MaxIDLength      = 128
)

var somVersion = regexp.MustCompile(`^1\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// validIDText checks message_id and correlation_id: 1 to 128 printable
// ASCII characters (space to tilde).
func validIDText(s string) bool {
	if len(s) < 1 || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// CheckEnvelope checks one envelope and returns the message to accept, or
// every violation at once.
func CheckEnvelope(raw []byte) (PublishMessage, []Violation) {
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
