package bus

import (
	"fmt"
	"strings"
)

// validSegment reports whether s is a non-empty run of [a-z0-9_-].
func validSegment[T ~string | ~[]byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// TopicPrefix starts every topic: a message's topic is TopicPrefix and its
// message type.
const TopicPrefix = "som."

// MaxMessageTypeLength is the longest message type, in characters.
const MaxMessageTypeLength = 128

// MaxTopicLength is the longest topic a message can have.
const MaxTopicLength = len(TopicPrefix) + MaxMessageTypeLength

// ValidMessageType checks a message type: dot-separated segments of
// [a-z0-9_-], at most MaxMessageTypeLength characters.
func ValidMessageType(s string) bool {
	return validMessageType(s)
}

// validMessageType is ValidMessageType of a string or its bytes.
func validMessageType[T ~string | ~[]byte](s T) bool {
	if len(s) == 0 || len(s) > MaxMessageTypeLength {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if !validSegment(s[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// TopicOf returns the topic of a message type.
func TopicOf(messageType string) string { return TopicPrefix + messageType }

// ValidateTopicPattern checks a subscription pattern: dot-separated
// segments, each [a-z0-9_-]+ or "*", with an optional final ">".
func ValidateTopicPattern(p string) error {
	if p == "" {
		return fmt.Errorf("topic must not be empty")
	}
	if len(p) > 256 {
		return fmt.Errorf("topic must be at most 256 characters")
	}
	segs := strings.Split(p, ".")
	for i, seg := range segs {
		switch {
		case seg == "*":
		case seg == ">":
			if i != len(segs)-1 {
				return fmt.Errorf("topic %q: \">\" may only be the last segment", p)
			}
		case !validSegment(seg):
			return fmt.Errorf("topic %q: segment %d must be \"*\", a final \">\", or [a-z0-9_-]+", p, i+1)
		}
	}
	return nil
}

// CheckTopicReachable refuses a valid pattern that no topic can match,
// saying why. Every topic is TopicPrefix ("som.") followed by a message
// type of one or more segments and at most MaxMessageTypeLength characters,
// so a pattern matches some topic exactly when its first segment is "som",
// "*" or ">", it has a second segment unless it is ">" alone, and its
// shortest match ("*" and ">" standing for one character) fits in
// MaxTopicLength.
func CheckTopicReachable(p string) error {
	segs := strings.Split(p, ".")
	head := strings.TrimSuffix(TopicPrefix, ".")
	if segs[0] == ">" {
		return nil // every topic
	}
	if segs[0] != head && segs[0] != "*" {
		return fmt.Errorf("topic %q can never match: every topic is %q followed by the message type, so the first segment must be %q, \"*\" or \">\"", p, TopicPrefix, head)
	}
	if len(segs) == 1 {
		return fmt.Errorf("topic %q can never match: every topic has at least two segments, %q followed by the message type; add one, as in %q", p, TopicPrefix, p+".>")
	}
	shortest := len(head) + len(segs) - 1 // the head segment and the dots
	for _, s := range segs[1:] {
		shortest += len(s) // "*" and ">" stand for one character
	}
	if shortest > MaxTopicLength {
		return fmt.Errorf("topic %q can never match: its shortest match is %d characters, and topics are at most %d characters (%q and a message type of at most %d)", p, shortest, MaxTopicLength, TopicPrefix, MaxMessageTypeLength)
	}
	return nil
}

// MatchTopic reports whether topic matches pattern: "*" matches exactly one
// segment, a final ">" one or more.
func MatchTopic(pattern, topic string) bool {
	ps := strings.Split(pattern, ".")
	ts := strings.Split(topic, ".")
	for i, p := range ps {
		if p == ">" {
			return len(ts) > i
		}
		if i >= len(ts) {
			return false
		}
		if p != "*" && p != ts[i] {
			return false
		}
	}
	return len(ts) == len(ps)
}

// Matches reports whether a message with topic from producer is accepted by
// any of subs.
func Matches(subs []Subscription, topic, producerID string) bool {
	for _, s := range subs {
		if !MatchTopic(s.Topic, topic) {
			continue
		}
		if len(s.Producers) == 0 {
			return true
		}
		for _, p := range s.Producers {
			if p == producerID {
				return true
			}
		}
	}
	return false
}
