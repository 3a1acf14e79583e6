package bus

import (
	"strings"
	"testing"
)

func rules(vs []Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Rule
	}
	return out
}

func TestCheckEnvelopeAccepts(t *testing.T) {
	t.Parallel()
	raw := []byte(` { "som_version":"1.12.0", "message_id":"m 1~", "message_type":"story.context",
	  "correlation_id":"s-1", "payload":{"x":[1,2]}, "extra": true } `)
	m, vs := CheckEnvelope(raw)
	if len(vs) > 0 {
		t.Fatalf("refused: %v", vs)
	}
	if m.Topic != "som.story.context" || m.MessageID != "m 1~" || m.CorrelationID != "s-1" || string(m.Envelope) != string(raw) {
		t.Fatalf("unexpected message %+v", m)
	}
}

func TestCheckEnvelopeReportsEveryViolation(t *testing.T) {
	t.Parallel()
	_, vs := CheckEnvelope([]byte(`{"som_version":"2.0.0","message_id":"","message_type":"Bad","correlation_id":"é","payload":[]}`))
	got := strings.Join(rules(vs), ",")
	want := "envelope.som_version,envelope.message_id,envelope.message_type,envelope.correlation_id,envelope.payload"
	if got != want {
		t.Fatalf("rules %s, want %s", got, want)
	}
	for _, v := range vs {
		if v.Message == "" {
			t.Errorf("%s has no message", v.Rule)
		}
	}
}

func TestCheckEnvelopeMalformedAndLarge(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{``, `[]`, `"x"`, `{"a":1} {}`, `{"a":`, `null`} {
		_, vs := CheckEnvelope([]byte(raw))
		if len(vs) != 1 || vs[0].Rule != RuleEnvelopeMalformed {
			t.Errorf("%q: %v", raw, rules(vs))
		}
	}
	big := `{"payload":{"x":"` + strings.Repeat("a", MaxEnvelopeBytes) + `"}}`
	if _, vs := CheckEnvelope([]byte(big)); len(vs) != 1 || vs[0].Rule != RuleEnvelopeTooLarge {
		t.Errorf("large: %v", rules(vs))
	}
	for _, v := range []string{"1.0", "01.0.0", "1.0.0-rc1", "1.00.0", ""} {
		_, vs := CheckEnvelope([]byte(`{"som_version":"` + v + `","message_id":"m","message_type":"a","correlation_id":"c","payload":{}}`))
		if len(vs) != 1 || vs[0].Rule != RuleEnvelopeSomVersion {
			t.Errorf("som_version %q: %v", v, rules(vs))
		}
	}
	long := strings.Repeat("x", 129)
	_, vs := CheckEnvelope([]byte(`{"som_version":"1.0.0","message_id":"` + long + `","message_type":"a","correlation_id":"c","payload":{}}`))
	if len(vs) != 1 || vs[0].Rule != RuleEnvelopeMessageID {
		t.Errorf("long message_id: %v", rules(vs))
	}
}

// A member whose name differs from a checked one only by case, as
// encoding/json folds names (the long s ſ included), is
// refused: a reader matching names regardless of case would take it for
// that member.
func TestCheckEnvelopeRefusesFoldedNames(t *testing.T) {
	t.Parallel()
	const rest = `"som_version":"1.0.0","message_type":"t","correlation_id":"c","payload":{}`
	for _, name := range []string{"Message_ID", "MESSAGE_ID", "meſsage_id", "me\u017fsage_id", "Payloa\u0044"} {
		_, vs := CheckEnvelope([]byte(`{"message_id":"m",` + rest + `,"` + name + `":"x"}`))
		if len(vs) != 1 || vs[0].Rule != RuleEnvelopeMalformed || !strings.Contains(vs[0].Message, "only by case") {
			t.Errorf("%s: %+v", name, vs)
		}
	}
	// Other names stay the producer's own.
	if _, vs := CheckEnvelope([]byte(`{"message_id":"m",` + rest + `,"message_ids":1,"messageid":1}`)); len(vs) != 0 {
		t.Errorf("other names: %+v", vs)
	}
}

func TestRoleOrder(t *testing.T) {
	t.Parallel()
	if !RoleOwner.AtLeast(RoleAdmin) || RoleViewer.AtLeast(RoleDeveloper) || Role("").AtLeast(RoleViewer) || Role("x").AtLeast(RoleViewer) {
		t.Fatal("role order wrong")
	}
}

func TestStatusOf(t *testing.T) {
	t.Parallel()
	want := map[string]int{
		RuleRouteNotFound: 404, RuleMethodNotAllowed: 405, RuleUnauthenticated: 401, RuleNotRegistered: 403,
		RuleTenantMismatch: 403, RuleNotOwner: 403, RulePullBadRequest: 400, RuleRateLimited: 429, RuleQuotaExceeded: 429,
		RuleQueueUnavailable: 503, RuleSkillsUnavailable: 503, RuleManageConflict: 409, RuleEnvelopeTooLarge: 413,
		RuleManageUnauthenticated: 401, RuleManageForbidden: 403, RuleManageNotFound: 404, RuleManageBadRequest: 400,
	}
	for rule, st := range want {
		if got := StatusOf(rule); got != st {
			t.Errorf("%s: %d, want %d", rule, got, st)
		}
	}
}
