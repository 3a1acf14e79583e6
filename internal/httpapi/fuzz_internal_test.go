package httpapi

import (
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/strictjson"
)

// wantTypedRefusal fails unless err is a *bus.Error of rule with its
// status and one sentence of UTF-8 that does not echo more than limit bytes
// of input.
func wantTypedRefusal(t *testing.T, err error, rule string) *bus.Error {
	t.Helper()
	e, ok := bus.AsError(err)
	if !ok {
		t.Fatalf("refusal %v (%T) is not a *bus.Error", err, err)
	}
	if e.Rule() != rule || e.Status != bus.StatusOf(rule) || len(e.Violations) != 1 {
		t.Fatalf("refusal %d %+v, want one violation of %s", e.Status, e.Violations, rule)
	}
	if m := e.Violations[0].Message; m == "" || !utf8.ValidString(m) || !strings.HasSuffix(m, ".") {
		t.Fatalf("refusal message %q is not a sentence of UTF-8", m)
	}
	return e
}

// FuzzReceiveQuery: a receive's query string is accepted only when it is
// URL encoding of known parameters, each given once and within its range,
// and what was read round-trips; a refusal is pull.bad_request naming the
// parameter at fault.
func FuzzReceiveQuery(f *testing.F) {
	for _, s := range []string{
		"", "max=10&wait=0", "max=1&wait=20&visibility=43200&attempt=a-1", "visibility=0", "attempt=" + strings.Repeat("~", 128),
		"max=0", "max=11", "max=-1", "max=+1", "max=1.0", "max=0x1", "max=", "max", "max=1&max=1", "wait=21",
		"visibility=43201", "visibility=9999999999", "attempt=", "attempt=a%20b", "attempt=" + strings.Repeat("a", 129),
		"foo=1", "MAX=1", "max=1;wait=0", "max=%zz", "max=1&%zz=1", "attempt=%C3%A9", "attempt=%00", "max=00010",
		"wait=0&wait=1", "max=1&&wait=0", "=1", "&", "max=1&zz&aa=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		rq, err := parseReceiveQuery(raw)
		if err != nil {
			e := wantTypedRefusal(t, err, bus.RulePullBadRequest)
			msg := e.Violations[0].Message
			named := strings.Contains(msg, "query string")
			for _, p := range receiveParams {
				named = named || strings.HasPrefix(msg, p+" ")
			}
			named = named || strings.HasPrefix(msg, "Unknown query parameter ")
			if !named {
				t.Fatalf("refusal of %q names no parameter: %q", raw, msg)
			}
			return
		}
		q, perr := url.ParseQuery(raw)
		if perr != nil {
			t.Fatalf("accepted %q, which is not URL encoding: %v", raw, perr)
		}
		for k, vs := range q {
			if !slices.Contains(receiveParams, k) {
				t.Fatalf("accepted %q with unknown parameter %q", raw, k)
			}
			if len(vs) != 1 {
				t.Fatalf("accepted %q with %s given %d times", raw, k, len(vs))
			}
		}
		if rq.max < 1 || rq.max > 10 || rq.wait < 0 || rq.wait > 20 || rq.visibility < 0 || rq.visibility > 43200 {
			t.Fatalf("accepted %q as %+v, out of range", raw, rq)
		}
		if _, ok := q["attempt"]; ok != (rq.attempt != "") || len(rq.attempt) > 128 {
			t.Fatalf("attempt of %q read as %q", raw, rq.attempt)
		}
		for i := 0; i < len(rq.attempt); i++ {
			if c := rq.attempt[i]; c < '!' || c > '~' {
				t.Fatalf("accepted attempt %q with byte %#x", rq.attempt, c)
			}
		}
		// What was read, written out again, reads the same.
		again := url.Values{"max": {strconv.Itoa(rq.max)}, "wait": {strconv.Itoa(rq.wait)}, "visibility": {strconv.Itoa(rq.visibility)}}
		if rq.attempt != "" {
			again.Set("attempt", rq.attempt)
		}
		rq2, err := parseReceiveQuery(again.Encode())
		if err != nil || rq2 != rq {
			t.Fatalf("%q read as %+v; written out again it reads %+v, %v", raw, rq, rq2, err)
		}
	})
}

// manageBodies are the bodies the management routes decode with
// decodeStrict, each as a fresh value to decode into.
var manageBodies = []func() any{
	func() any { return new(bus.CreateUserParams) },
	func() any { return new(bus.ConnectionParams) },
	func() any {
		return new(struct {
			Name string `json:"name"`
		})
	},
	func() any {
		return new(struct {
			Role bus.Role `json:"role"`
		})
	},
	func() any {
		return new(struct {
			Overlap string `json:"overlap"`
		})
	},
	func() any {
		return new(struct {
			MessageIDs []string `json:"message_ids"`
		})
	},
	func() any {
		return new(struct {
			Registrations []bus.SkillRegistration `json:"registrations"`
		})
	},
	func() any { return new(struct{}) },
	func() any { return new(settleRequest) },
}

// FuzzManageBodies: the strict decoding of a management (or ack and nack)
// body accepts only one JSON object that strictjson finds strict (UTF-8, no
// repeated member, no lone surrogate), and then it reads exactly what
// encoding/json reads; every refusal is the route's bad_request rule.
func FuzzManageBodies(f *testing.F) {
	for _, s := range []string{
		`{"name":"n","email":"a@example.com","operator":true}`,
		`{"kind":"consumer","name":"c","attempt_limit":5,"quota_tier":"standard","subscriptions":[{"topic":"som.>","producers":["c1"]}]}`,
		`{"name":"x"}`, `{"role":"admin"}`, `{"overlap":"24h"}`, `{"message_ids":["a","b"]}`,
		`{"registrations":[{"instance_id":"i","skill":"s","name":"n","values":{"a":1},"authority_scale":50}]}`,
		`{}`, `{"receipt_handles":["h"],"delay_seconds":0}`, `{"name":"x","name":"y"}`, `{"name":"\ud800"}`,
		"{\"name\":\"\xff\"}", `{"name":1}`, `{"unknown":1}`, `{"name":"x"} {}`, `[]`, `null`, `"x"`, ``, ` `,
		`{"attempt_limit":1e400}`, `{"attempt_limit":1.5}`, `{"Name":"case"}`, `{"name":"x","NAME":"y"}`,
		`{"subscriptions":null}`, `{"registrations":[{"values":{"a":{"a":1,"a":2}}}]}`,
	} {
		for i := range manageBodies {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		mk := manageBodies[int(which)%len(manageBodies)]
		v := mk()
		err := decodeStrict(b, v, bus.RuleManageBadRequest)
		if err != nil {
			wantTypedRefusal(t, err, bus.RuleManageBadRequest)
			return
		}
		if !utf8.Valid(b) || !json.Valid(b) || strictjson.Check(b) != nil {
			t.Fatalf("accepted %q, which is not strict JSON", b)
		}
		if strings.TrimSpace(string(b))[0] != '{' {
			t.Fatalf("accepted %q, which is not an object", b)
		}
		ref := mk()
		if err := json.Unmarshal(b, ref); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(v, ref) {
			t.Fatalf("%q decoded as %+v, encoding/json reads %+v", b, v, ref)
		}
		// What was read, written out again (without the members left out,
		// which encoding/json writes as null), is accepted and reads the
		// same (compared written out: raw JSON members lose their spacing).
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("marshal %+v: %v", v, err)
		}
		again := mk()
		if err := decodeStrict(withoutNulls(t, out), again, bus.RuleManageBadRequest); err != nil {
			t.Fatalf("%q read as %+v, written as %s, is refused: %v", b, v, out, err)
		}
		if out2, _ := json.Marshal(again); string(out2) != string(out) {
			t.Fatalf("%q written as %s, read again and written as %s", b, out, out2)
		}
	})
}

// withoutNulls is the JSON object b without its members whose value is
// null.
func withoutNulls(t *testing.T, b []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	for k, v := range m {
		if string(v) == "null" {
			delete(m, k)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
