package strictjson

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type memberReg struct {
	InstanceID string          `json:"instance_id" strictjson:"required"`
	Values     json.RawMessage `json:"values" strictjson:"required"`
	Scale      int             `json:"authority_scale" strictjson:"required"`
	Note       *string         `json:"note" strictjson:"nullable"`
}

type memberBase struct {
	Kind string `json:"kind"`
}

type memberBody struct {
	memberBase
	MessageIDs []string             `json:"message_ids"`
	Name       *string              `json:"name"`
	Regs       []memberReg          `json:"registrations"`
	ByName     map[string]memberReg `json:"by_name"`
	Raw        []json.RawMessage    `json:"messages"`
	Any        map[string]any       `json:"any"`
	When       *time.Time           `json:"when"`
	Plain      int
	Skipped    int `json:"-"`
}

func TestMembersRefuses(t *testing.T) {
	typ := reflect.TypeFor[*memberBody]()
	for _, c := range []struct {
		in          string
		kind        MemberKind
		path, field string
		msg         string
	}{
		{`{"MESSAGE_IDS":["a"]}`, Folded, "MESSAGE_IDS", "message_ids", `member "MESSAGE_IDS" differs from "message_ids" only by case: names are exact`},
		{`{"message_ids":["a"],"Message_Ids":null}`, Folded, "Message_Ids", "message_ids", ""},
		// encoding/json folds as strings.EqualFold does: ſ is s, K (Kelvin) is k.
		{`{"meſsage_ids":["a"]}`, Folded, "meſsage_ids", "message_ids", ""},
		{`{"\u212aind":"x"}`, Folded, "\u212aind", "kind", ""},
		{`{"Kind":"x"}`, Folded, "Kind", "kind", ""}, // a field of an embedded struct
		{`{"plain":1}`, Folded, "plain", "Plain", ""},
		{`{"N\u0041ME":"x"}`, Folded, "NAME", "name", ""},
		{`{"registrations":[{"instance_id":"i","values":{},"authority_scale":1},{"instance_id":"i","Values":{},"authority_scale":1}]}`,
			Folded, "registrations[1].Values", "registrations[1].values", ""},
		{`{"by_name":{"x":{"INSTANCE_ID":"i"}}}`, Folded, "by_name.x.INSTANCE_ID", "by_name.x.instance_id", ""},
		{`{"message_ids":null}`, Null, "message_ids", "", "message_ids must be an array or left out, not null"},
		{`{"name":null}`, Null, "name", "", "name must be a string or left out, not null"},
		{`{"message_ids":["a",null]}`, Null, "message_ids[1]", "", "message_ids[1] must be a string, not null"},
		{`{"registrations":[null]}`, Null, "registrations[0]", "", "registrations[0] must be an object, not null"},
		{`{"registrations":[{"instance_id":"i","values":null,"authority_scale":1}]}`, Null, "registrations[0].values", "", "registrations[0].values must not be null"},
		{`{"registrations":[{"instance_id":"i","values":{},"authority_scale":null}]}`, Null, "registrations[0].authority_scale", "", "registrations[0].authority_scale must be an integer, not null"},
		{`{"by_name":{"x":null}}`, Null, "by_name.x", "", ""},
		{`{"when":null}`, Null, "when", "", "when must not be null (leave it out instead)"},
		{`{"registrations":[{"instance_id":"i","values":{}}]}`, Missing, "registrations[0].authority_scale", "", "registrations[0].authority_scale is required"},
		{`{"registrations":[{}]}`, Missing, "registrations[0].instance_id", "", ""},
		{`{"by_name":{"a.b":{"instance_id":"i","values":{}}}}`, Missing, "by_name.a.b.authority_scale", "", ""},
		{`{"unknown":null}`, Unknown, "unknown", "", `unknown member "unknown"`},
		{`{"Skipped":1}`, Unknown, "Skipped", "", ""},
		{`{"-":1}`, Unknown, "-", "", ""},
		{`{"memberBase":{}}`, Unknown, "memberBase", "", ""},
		// The first in the text is refused.
		{`{"extra":1,"name":null}`, Unknown, "extra", "", ""},
		{`{"name":null,"extra":1}`, Null, "name", "", ""},
		{`{"registrations":[{"instance_id":"i","values":{},"authority_scale":1,"colour":1}]}`, Unknown, "registrations[0].colour", "", ""},
	} {
		err := Members([]byte(c.in), typ)
		if err == nil {
			t.Errorf("%s: accepted", c.in)
			continue
		}
		if err.Kind != c.kind || err.Path != c.path || err.Field != c.field {
			t.Errorf("%s: %+v, want kind %d path %q field %q", c.in, *err, c.kind, c.path, c.field)
		}
		if c.msg != "" && err.Error() != c.msg {
			t.Errorf("%s: %q, want %q", c.in, err.Error(), c.msg)
		}
	}
}

func TestMembersAccepts(t *testing.T) {
	typ := reflect.TypeFor[*memberBody]()
	for _, in := range []string{
		``, ` `, `null`, `[]`, `"x"`, `{}`, `{"message_ids":[]}`, `{"message_ids":["a","b"],"name":"n","kind":"k","Plain":1}`,
		// Wrong types are the decoder's to refuse.
		`{"message_ids":"x"}`, `{"registrations":{"instance_id":null}}`,
		`{"registrations":[1,"x",[]]}`,
		// Raw JSON and any values are data, null and names included.
		`{"messages":[null,{"MESSAGE_IDS":null},1]}`, `{"any":{"a":null,"NAME":[null]}}`,
		`{"registrations":[{"instance_id":"i","values":{"x":null,"Instance_ID":1},"authority_scale":0,"note":null}]}`,
		// Map keys are data.
		`{"by_name":{"INSTANCE_ID":{"instance_id":"i","values":{},"authority_scale":0}}}`,
		`{"when":"2026-01-01T00:00:00Z"}`,
		` { "name" : "x" , "message_ids" : [ "a" , "b" ] } `,
	} {
		if err := Members([]byte(in), typ); err != nil {
			t.Errorf("%s: refused: %v", in, err)
		}
	}
}

func TestMembersAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; run without -race to count allocations")
	}
	typ := reflect.TypeFor[*memberBody]()
	in := []byte(`{"message_ids":["a","b"],"name":"n","registrations":[{"instance_id":"i","values":{"a":[1,null]},"authority_scale":5}],` +
		`"messages":[{"a":1},null],"by_name":{"k":{"instance_id":"i","values":{},"authority_scale":0}}}`)
	Members(in, typ)
	if n := testing.AllocsPerRun(100, func() {
		if err := Members(in, typ); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Members allocates %v times per run", n)
	}
}

// FuzzMembers: Members stays within any text, JSON or not.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"registrations":[{"Values":null}]}`, `{"by_name":{"x":{`, `{"message_ids":[nul`, `{"a`, `{"\`, `[`} {
		f.Add([]byte(s))
	}
	typ := reflect.TypeFor[*memberBody]()
	f.Fuzz(func(t *testing.T, b []byte) {
		Members(b, typ)
	})
}
