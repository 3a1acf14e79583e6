package bus

import (
	"fmt"
	"strings"
)

// validSegment reports whether s is a non-empty run of [a-z0-9_-].
func validSegment(s string) bool {
	if s == "" {
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

// ValidMessageType checks a message type: dot-separated segments of
// [a-z0-9_-], at most 128 characters.
func ValidMessageType(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, seg := range strings.Split(s, ".") {
		if !validSegment(seg) {
			return false
		}
	}
	return true
}

// TopicOf returns the topic of a message type.
func TopicOf(messageType string) string { return "som." + messageType }

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
