package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckRefuses(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	for _, c := range []struct {
		in   string
		kind Kind
		off  int
		path string
	}{
		{"{\"payload\":{\"s\":\"\xff\"}}", UTF8, 17, "payload.s"},
		{"{\"payload\":{\"s\":\"\xc0\xaf\"}}", UTF8, 17, "payload.s"},
		{"{\"payload\":{\"s\":\"\xed\xa0\x80\"}}", UTF8, 17, "payload.s"},
		{"{\"p\":{\"\xff\":1}}", UTF8, 7, "p"},
		{`{"s":"\ud800"}`, Surrogate, 6, "s"},
		{`{"s":"\udc00\ud800"}`, Surrogate, 6, "s"},
		{`{"message_id":"a","message_id":"b"}`, Duplicate, 18, "message_id"},
		{`{"a":{"b":[{"x":1,"\u0078":2}]}}`, Duplicate, 18, "a.b[0].x"},
		{`{"n":1e999999}`, Number, 5, "n"},
		{`{"n":-1.8e308}`, Number, 5, "n"},
		{`{"n":` + strings.Repeat("1", MaxNumberLength+1) + `}`, Number, 5, "n"},
		{deep, Depth, MaxDepth, strings.Repeat("[0]", MaxDepth)},
		{`{"a":1,}`, Syntax, 7, "a"},
		{`{"a":1} x`, Syntax, 8, ""},
	} {
		err := Check([]byte(c.in))
		if err == nil {
			t.Errorf("%q: accepted", c.in)
			continue
		}
		if err.Kind != c.kind || err.Offset != c.off || err.Path != c.path {
			t.Errorf("%q: got kind %d offset %d path %q (%v), want %d %d %q", c.in, err.Kind, err.Offset, err.Path, err, c.kind, c.off, c.path)
		}
	}
}

func TestCheckDuplicatesInLargeObjects(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"o":{`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k`)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(string(rune('a' + i/26)))
		b.WriteString(`":1`)
	}
	ok := b.String() + `}}`
	if err := Check([]byte(ok)); err != nil {
		t.Fatalf("distinct names refused: %v", err)
	}
	if err := Check([]byte(b.String() + `,"kaa":2}}`)); err == nil || err.Kind != Duplicate {
		t.Fatalf("late duplicate in a large object: %v", err)
	}
	// The same names in sibling objects are fine.
	if err := Check([]byte(`[` + ok + `,` + ok + `]`)); err != nil {
		t.Fatalf("siblings: %v", err)
	}
}

func TestCheckAccepts(t *testing.T) {
	for _, in := range []string{
		`{"som_version":"1.0.0","payload":{"s":"é😀\ud83d\ude00","n":[1,-0,0.5e-3,1.7976931348623157e308,1e-400,0e999]}}`,
		`{"a":{"a":{"a":1}},"b":{"a":2}}`,
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
		` [] `, `"x"`, `true`, `null`, `{}`,
		`{"n":` + strings.Repeat("9", MaxNumberLength) + `}`,
	} {
		if err := Check([]byte(in)); err != nil {
			t.Errorf("%q: refused: %v", in, err)
		}
	}
}

func TestCheckOuter(t *testing.T) {
	in := []byte("{\"messages\":[{\"s\":\"\xff\",\"s\":" + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "}]}")
	if err := CheckOuter(in, 2); err != nil {
		t.Fatalf("inner problems leaked out: %v", err)
	}
	if err := CheckOuter([]byte(`{"messages":[],"messages":[]}`), 2); err == nil || err.Kind != Duplicate {
		t.Fatalf("outer duplicate: %v", err)
	}
	if err := CheckOuter([]byte(`{"messages":[{]}`), 2); err == nil || err.Kind != Syntax {
		t.Fatalf("inner syntax: %v", err)
	}
}

func TestCheckAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; run without -race to count allocations")
	}
	in := []byte(`{"som_version":"1.0.0","message_id":"m0","message_type":"story.context","correlation_id":"s0",` +
		`"payload":{"s":"h\u00e9llo","n":1.5e300,"a":[1,2,{"x":null}],"o":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18}}}`)
	Check(in)
	if n := testing.AllocsPerRun(100, func() {
		if err := Check(in); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Check allocates %v times per run", n)
	}
}

// hasDuplicate is a slow reference: encoding/json's tokens, one set of
// names per open object.
func hasDuplicate(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type obj struct {
		names  map[string]bool
		isObj  bool
		expect bool // the next string token is a name
	}
	var stack []*obj
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) || err != nil {
			return false
		}
		var top *obj
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.isObj && top.expect {
			if s, ok := tok.(string); ok {
				if top.names[s] {
					return true
				}
				top.names[s] = true
				top.expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &obj{names: map[string]bool{}, isObj: true, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &obj{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].isObj {
			stack[len(stack)-1].expect = true
		}
	}
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `""`, `0`, `-0.5e+3`, `{"a":1,"b":[true,false,null]}`,
		`{"som_version":"1.0.0","message_id":"m0","message_type":"story.context","correlation_id":"s0","payload":{"s":"x"}}`,
		"{\"s\":\"\xff\"}", "{\"s\":\"\xc0\xaf\"}", "{\"s\":\"\xed\xa0\x80\"}", "{\"\xff\":1}",
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"s":"\ud800"}`, `{"s":"\ud83d\ude00"}`,
		`1e999999`, `[[[[[[[[]]]]]]]]`, `{"a":"\n"}`, "{\"a\":\"\n\"}", `{"a" 1}`, `[1,]`, `01`, `1.`, `-`, `"\x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b)
		valid := json.Valid(b)
		if err == nil {
			if !valid || !utf8.Valid(b) {
				t.Fatalf("accepted %q (json.Valid %v, utf8 %v)", b, valid, utf8.Valid(b))
			}
			if hasDuplicate(b) {
				t.Fatalf("accepted %q with a duplicate name", b)
			}
			return
		}
		switch err.Kind {
		case Syntax:
			if valid {
				t.Fatalf("syntax error in %q, which encoding/json takes: %v", b, err)
			}
		case UTF8:
			if utf8.Valid(b) {
				t.Fatalf("UTF-8 error in valid UTF-8 %q: %v", b, err)
			}
		case Duplicate:
			if utf8.Valid(b) && valid && !hasDuplicate(b) {
				t.Fatalf("duplicate in %q the reference does not see: %v", b, err)
			}
		case Depth:
			if len(b) < MaxDepth+1 {
				t.Fatalf("depth error in %q, shorter than the limit", b)
			}
		}
		if err.Offset < 0 || err.Offset > len(b) {
			t.Fatalf("offset %d out of %q", err.Offset, b)
		}
	})
}
