package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sombus/sombus/internal/strictjson"
)

// Envelope limits.
const (
	MaxEnvelopeBytes = 256 << 10
	MaxIDLength      = 128
)

// validIDText checks message_id and correlation_id: 1 to 128 printable
// ASCII characters (space to tilde).
func validIDText[T ~string | ~[]byte](s T) bool {
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
	// raw is one JSON value (strictjson checked its syntax): an object's
	// members are found by walking its top level once.
	var f envelopeFields
	if !f.read(raw) {
		return PublishMessage{}, []Violation{{Rule: RuleEnvelopeMalformed, Message: "The envelope must be one JSON object."}}
	}
	if f.folded != "" {
		return PublishMessage{}, []Violation{{Rule: RuleEnvelopeMalformed, Message: fmt.Sprintf(
			"The envelope has a member %q, which differs from a member the bus reads only by case: names are exact (som_version, message_id, message_type, correlation_id, payload).", f.folded)}}
	}
	var vs []Violation
	if v, ok := jsonText(f.somVersion); !ok || !validSomVersion(v) {
		vs = append(vs, Violation{Rule: RuleEnvelopeSomVersion, Message: "som_version must be a string MAJOR.MINOR.PATCH with major 1, such as \"1.0.0\"."})
	}
	id, ok := jsonText(f.messageID)
	if !ok || !validIDText(id) {
		vs = append(vs, Violation{Rule: RuleEnvelopeMessageID, Message: "message_id must be a string of 1 to 128 printable ASCII characters."})
	}
	typ, ok := jsonText(f.messageType)
	if !ok || !validMessageType(typ) {
		vs = append(vs, Violation{Rule: RuleEnvelopeMessageType, Message: "message_type must be dot-separated segments of [a-z0-9_-], at most 128 characters, such as \"story.context\"."})
	}
	corr, ok := jsonText(f.correlationID)
	if !ok || !validIDText(corr) {
		vs = append(vs, Violation{Rule: RuleEnvelopeCorrelationID, Message: "correlation_id must be a string of 1 to 128 printable ASCII characters."})
	}
	if len(f.payload) == 0 || f.payload[0] != '{' {
		vs = append(vs, Violation{Rule: RuleEnvelopePayload, Message: "payload must be a JSON object."})
	}
	if len(vs) > 0 {
		return PublishMessage{}, vs
	}
	// The message's texts share one allocation: the topic (which ends with
	// the message type), the message id and the correlation id.
	var b strings.Builder
	b.Grow(len(TopicPrefix) + len(typ) + len(id) + len(corr))
	b.WriteString(TopicPrefix)
	b.Write(typ)
	b.Write(id)
	b.Write(corr)
	text := b.String()
	topicEnd, idEnd := len(TopicPrefix)+len(typ), len(TopicPrefix)+len(typ)+len(id)
	return PublishMessage{
		Topic: text[:topicEnd], MessageType: text[len(TopicPrefix):topicEnd],
		MessageID: text[topicEnd:idEnd], CorrelationID: text[idEnd:],
		Envelope: raw,
	}, nil
}

// envelopeFields are the raw values of the members of an envelope that
// are checked (nil when absent).
type envelopeFields struct {
	somVersion, messageID, messageType, correlationID, payload []byte
	// folded is a member name that differs from a checked one only by
	// case ("" when none): readers that match names regardless of case
	// (Go's encoding/json) would take it for that member, so it is refused.
	folded string
}

// checkedNames are the envelope members the bus reads.
var checkedNames = [...]string{"som_version", "message_id", "message_type", "correlation_id", "payload"}

// read finds the members of the JSON object b, a syntactically valid JSON
// text; false when b is not an object. A name given twice (strictjson
// refuses that) keeps its last value, as decoding into a map did.
func (f *envelopeFields) read(b []byte) bool {
	i := strictjson.SkipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return false
	}
	i = strictjson.SkipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		end := strictjson.SkipString(b, i)
		name := b[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			if json.Unmarshal(b[i:end], &s) != nil {
				return false
			}
			name = []byte(s)
		}
		i = strictjson.SkipSpace(b, end)
		i = strictjson.SkipSpace(b, i+1) // the colon
		start := i
		i = strictjson.SkipValue(b, i)
		v := b[start:i]
		switch string(name) {
		case "som_version":
			f.somVersion = v
		case "message_id":
			f.messageID = v
		case "message_type":
			f.messageType = v
		case "correlation_id":
			f.correlationID = v
		case "payload":
			f.payload = v
		default:
			// No test of lengths first: encoding/json folds as EqualFold
			// does, so it reads "meſsage_id" (a long s, two bytes) as
			// message_id.
			for _, c := range checkedNames {
				if f.folded == "" && strings.EqualFold(string(name), c) {
					f.folded = string(name)
				}
			}
		}
		i = strictjson.SkipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = strictjson.SkipSpace(b, i+1)
		}
	}
	return true
}

// jsonText reads a JSON value as decoding it into a string did: a
// string's text (its bytes in v when nothing is escaped), nothing for
// null, and false for any other value.
func jsonText(v []byte) ([]byte, bool) {
	if len(v) == 0 {
		return nil, false
	}
	if string(v) == "null" {
		return nil, true
	}
	if v[0] != '"' {
		return nil, false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, false
	}
	return []byte(s), true
}

// validSomVersion matches 1.MINOR.PATCH, MINOR and PATCH without leading
// zeros.
func validSomVersion(s []byte) bool {
	if len(s) < 5 || s[0] != '1' || s[1] != '.' {
		return false
	}
	rest := s[2:]
	for part := range 2 {
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 0 || n > 1 && rest[0] == '0' {
			return false
		}
		rest = rest[n:]
		if part == 0 {
			if len(rest) == 0 || rest[0] != '.' {
				return false
			}
			rest = rest[1:]
		}
	}
	return len(rest) == 0
}
