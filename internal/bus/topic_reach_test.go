package bus

import (
	"strings"
	"testing"
)

// shortestTopic is the shortest topic a valid pattern can match, if the
// pattern can match any: "*" and ">" take one-character segments, and a
// leading wildcard takes the topic prefix's own segment.
func shortestTopic(p string) string {
	segs := strings.Split(p, ".")
	for i, s := range segs {
		if s == "*" || s == ">" {
			segs[i] = "x"
			if i == 0 {
				segs[i] = strings.TrimSuffix(TopicPrefix, ".")
				if s == ">" {
					segs = append(segs, "x") // ">" alone: the prefix and one segment
				}
			}
		}
	}
	return strings.Join(segs, ".")
}

func TestCheckTopicReachable(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", MaxMessageTypeLength)
	reachable := []string{">", "som.>", "*.>", "som.story.context", "som.*", "*.story", "*.*", "*.*.*.>",
		"som." + long, "*." + long, "som." + long[:MaxMessageTypeLength-2] + ".*", "som." + long[:MaxMessageTypeLength-2] + ".>"}
	for _, p := range reachable {
		if err := ValidateTopicPattern(p); err != nil {
			t.Fatalf("setup: %q: %v", p, err)
		}
		if err := CheckTopicReachable(p); err != nil {
			t.Errorf("%q refused: %v", p, err)
		}
		// The proof that it can match: a topic of a valid message type.
		topic := shortestTopic(p)
		if !MatchTopic(p, topic) || !ValidMessageType(strings.TrimPrefix(topic, TopicPrefix)) || TopicOf(strings.TrimPrefix(topic, TopicPrefix)) != topic {
			t.Errorf("%q: shortest topic %q is not a topic it matches", p, topic)
		}
	}
	never := map[string]string{
		"story.>":           `first segment must be "som"`,
		"story.context":     `first segment must be "som"`,
		"somx.*":            `first segment must be "som"`,
		"som":               "at least two segments",
		"*":                 "at least two segments",
		"som." + long + "b": "at most 132 characters",
		"*." + long + ".*":  "at most 132 characters",
		"som." + long[:MaxMessageTypeLength-1] + ".>": "at most 132 characters",
	}
	for p, why := range never {
		if err := ValidateTopicPattern(p); err != nil {
			t.Fatalf("setup: %q: %v", p, err)
		}
		err := CheckTopicReachable(p)
		if err == nil {
			t.Errorf("%q accepted, though no topic matches it", p)
			continue
		}
		if !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "can never match") {
			t.Errorf("%q: %v; want it to say it can never match because %s", p, err, why)
		}
		// No valid topic near its shortest candidate matches.
		if topic := shortestTopic(p); MatchTopic(p, topic) && ValidMessageType(strings.TrimPrefix(topic, TopicPrefix)) && strings.HasPrefix(topic, TopicPrefix) {
			t.Errorf("%q matches the topic %q", p, topic)
		}
	}
}
