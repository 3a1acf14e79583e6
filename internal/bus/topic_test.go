package bus

import "testing"

func TestMatchTopic(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, topic string
		want           bool
	}{
		{"som.story.context", "som.story.context", true},
		{"som.story.context", "som.story.contexts", false},
		{"som.story.*", "som.story.context", true},
		{"som.story.*", "som.story", false},
		{"som.story.*", "som.story.context.extra", false},
		{"som.*.context", "som.story.context", true},
		{"som.>", "som.story", true},
		{"som.>", "som.story.context.deep", true},
		{"som.>", "som", false},
		{"som.story.>", "som.story", false},
		{"*.*", "som.story", true},
		{"*", "som.story", false},
		{">", "som", true},
	}
	for _, c := range cases {
		if got := MatchTopic(c.pattern, c.topic); got != c.want {
			t.Errorf("MatchTopic(%q, %q) = %v, want %v", c.pattern, c.topic, got, c.want)
		}
	}
}

func TestValidateTopicPattern(t *testing.T) {
	t.Parallel()
	good := []string{"som.story.context", "som.*", "som.>", "*.*.>", ">", "a_b-c.d9"}
	for _, p := range good {
		if err := ValidateTopicPattern(p); err != nil {
			t.Errorf("%q refused: %v", p, err)
		}
	}
	bad := []string{"", ".", "som..story", "som.", ".som", "som.>.x", "som.St", "som.a b", "som.**", "som.>>", "som.*x"}
	for _, p := range bad {
		if err := ValidateTopicPattern(p); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
}

func TestMatchesProducerFilter(t *testing.T) {
	t.Parallel()
	subs := []Subscription{{Topic: "som.a.*", Producers: []string{"c1"}}, {Topic: "som.b"}}
	if !Matches(subs, "som.a.x", "c1") || Matches(subs, "som.a.x", "c2") {
		t.Error("producer filter not applied")
	}
	if !Matches(subs, "som.b", "c2") || Matches(subs, "som.c", "c1") {
		t.Error("topic without filter")
	}
	if Matches(nil, "som.b", "c1") {
		t.Error("no subscriptions must match nothing")
	}
}

func TestValidMessageType(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"story.context", "a", "a-b_c.d9"} {
		if !ValidMessageType(s) {
			t.Errorf("%q refused", s)
		}
	}
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	for _, s := range []string{"", "Story.context", "story..context", "story.", "story context", "story.*", string(long)} {
		if ValidMessageType(s) {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := NewID(PrefixConnection)
		if !ValidID(id, PrefixConnection) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	if ValidID("c"+"AAAAAAAAAAAAAAAAAAAAAAAAAA", PrefixConnection) || ValidID(NewID("w"), PrefixConnection) {
		t.Error("ValidID accepted a foreign id")
	}
}
