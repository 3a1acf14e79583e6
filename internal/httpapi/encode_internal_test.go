package httpapi

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
)

// The hand-written answers of the message routes must read byte for byte
// as the reflective encoding they replace: these are those encodings.

// reflectiveJSON is writeJSON's body for v.
func reflectiveJSON(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// oddTexts are strings with every kind of character the encoders escape.
var oddTexts = []string{"plain", `a "quoted" \ text`, "<tag>&amp;", "tab\there\nnl", "\x00\x1f", "é😀", "\u2028\u2029", "bad\xffbyte"}

func TestPublishAnswersAreEncodingJSON(t *testing.T) {
	one, three := 1, 3
	var cases []bus.PublishResult
	for _, s := range oddTexts {
		cases = append(cases,
			bus.PublishResult{Accepted: true, MessageID: s, Topic: s, Deliveries: &one},
			bus.PublishResult{Accepted: true, MessageID: s, Topic: "som.story", Deliveries: &three, Duplicate: true},
			bus.PublishResult{Accepted: false, Violations: []bus.Violation{{Rule: "envelope.malformed", Message: s}, {Rule: s, Message: "m"}}},
		)
	}
	cases = append(cases, bus.PublishResult{}, bus.PublishResult{Accepted: true, Deliveries: new(int)})
	// Refusals' messages are shown as writeError shows them (cutText
	// escapes what would hide or reorder text); everything else as is.
	shown := func(rs []bus.PublishResult) []bus.PublishResult {
		rs = slices.Clone(rs)
		for i := range rs {
			rs[i].Violations = slices.Clone(rs[i].Violations)
			for j := range rs[i].Violations {
				rs[i].Violations[j].Message = cutText(rs[i].Violations[j].Message, maxMessageBytes)
			}
		}
		return rs
	}
	for _, r := range cases {
		want := reflectiveJSON(t, shown([]bus.PublishResult{r})[0])
		if got := append(appendPublishResult(nil, &r), '\n'); !bytes.Equal(got, want) {
			t.Errorf("publish answer:\n got %s\nwant %s", got, want)
		}
	}
	for _, rs := range [][]bus.PublishResult{cases, cases[:1], {}} {
		want := reflectiveJSON(t, map[string]any{"results": shown(rs)})
		if got := appendPublishResults(nil, rs); !bytes.Equal(got, want) {
			t.Errorf("batch answer:\n got %s\nwant %s", got, want)
		}
	}
}

func TestSettleAnswersAreEncodingJSON(t *testing.T) {
	var all []bus.HandleResult
	for i, s := range oddTexts {
		all = append(all,
			bus.HandleResult{ReceiptHandle: s, OK: true},
			bus.HandleResult{ReceiptHandle: s, Code: bus.CodeReceiptHandleIsInvalid, Message: s},
			bus.HandleResult{ReceiptHandle: s, Code: oddTexts[(i+1)%len(oddTexts)]},
		)
	}
	for _, res := range [][]bus.HandleResult{all, all[:1], all[1:2], {}} {
		for _, key := range []string{"acked", "nacked"} {
			ok := []string{}
			failed := []bus.HandleResult{}
			for _, h := range res {
				if h.OK {
					ok = append(ok, h.ReceiptHandle)
				} else {
					failed = append(failed, h)
				}
			}
			want := reflectiveJSON(t, map[string]any{key: ok, "failed": failed})
			if got := appendSettled(nil, key, res); !bytes.Equal(got, want) {
				t.Errorf("%s answer:\n got %s\nwant %s", key, got, want)
			}
		}
	}
}

func TestReceiveAnswerIsEncodingJSON(t *testing.T) {
	codec, err := auth.NewHandleCodec([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{svc: bus.NewService(bus.Config{Handles: codec})}
	type wireMessage struct { // the answer's fields but the envelope, as they were encoded
		ReceiptHandle string `json:"receipt_handle"`
		MessageType   string `json:"message_type"`
		CorrelationID string `json:"correlation_id"`
		Topic         string `json:"topic"`
		ProducerID    string `json:"producer_id"`
		ReceiveCount  int    `json:"receive_count"`
		EnqueuedAt    string `json:"enqueued_at"`
	}
	var ds []bus.Delivery
	for i, txt := range oddTexts {
		ds = append(ds, bus.Delivery{
			Handle:      bus.Handle{QueueID: "c" + txt, StoryID: int64(i), Seq: 1 << 40, Nonce: -7},
			MessageType: "story.context", CorrelationID: txt, Topic: txt, ProducerID: "cproducer",
			ReceiveCount: i * 1000, EnqueuedAt: time.Date(2026, 9, 25, 10, 15, 2, i*1e8, time.FixedZone("x", 3600)),
			Envelope: []byte(`{"som_version":"1.0.0",  "payload":{"a":"<&>"}}`),
		})
	}
	for _, ds := range [][]bus.Delivery{ds, ds[:1], nil} {
		// The encoding this replaces: json.Marshal of each message without
		// its envelope, which is spliced in as accepted.
		var want bytes.Buffer
		want.WriteString(`{"messages":[`)
		for i, d := range ds {
			if i > 0 {
				want.WriteByte(',')
			}
			m, err := json.Marshal(wireMessage{
				ReceiptHandle: codec.Encode(d.Handle), MessageType: d.MessageType, CorrelationID: d.CorrelationID,
				Topic: d.Topic, ProducerID: d.ProducerID, ReceiveCount: d.ReceiveCount, EnqueuedAt: d.EnqueuedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
			})
			if err != nil {
				t.Fatal(err)
			}
			want.Write(m[:len(m)-1])
			want.WriteString(`,"envelope":`)
			want.Write(d.Envelope)
			want.WriteByte('}')
		}
		want.WriteString("]}\n")
		if got := s.appendMessages(nil, ds); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("receive answer:\n got %s\nwant %s", got, want.Bytes())
		}
	}
}

// plainHandles reads only bodies that decodeStrict reads the same way.
func FuzzPlainHandles(f *testing.F) {
	for _, s := range []string{
		`{"receipt_handles":["a","b"]}`, ` { "receipt_handles" : [ "a" , "b" ] } `, `{"receipt_handles":[]}`,
		`{"receipt_handles":["a\"b"]}`, `{"receipt_handles":["a"],"delay_seconds":1}`, `{"Receipt_handles":["a"]}`,
		`{"receipt_handles":["a","a"]}`, `{"receipt_handles":["1","2","3","4","5","6","7","8","9","10","11"]}`,
		`{"receipt_handles":["a"]} x`, `{"receipt_handles":["\xff"]}`, `{"receipt_handles":["a",]}`, `{"receipt_handles":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		hs, ok := plainHandles(body)
		if !ok {
			return
		}
		var req settleRequest
		if err := decodeStrict(body, &req, bus.RulePullBadRequest); err != nil {
			t.Fatalf("plainHandles read %q, decodeStrict refuses it: %v", body, err)
		}
		if req.DelaySeconds != nil || !slices.Equal(req.ReceiptHandles, hs) {
			t.Fatalf("plainHandles read %q as %q, decodeStrict as %+v", body, hs, req)
		}
	})
}

// batchEnvelopes reads only bodies that decodeStrictOuter reads the same way.
func FuzzBatchEnvelopes(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"a":1},{"b":[1,{"c":"]"}]}]}`, ` { "messages" : [ {} , null , "x" , 1 , [] ] } `, `{"messages":[]}`,
		`{"messages":[{}],"x":1}`, `{"Messages":[{}]}`, `{"messages":[{},]}`, `{"messages":[{"a":1,"a":2}]}`,
		`{"messages":[{}]} x`, `{"messages":null}`, `{"messages":[{"a":"\u00e9\"}"}]}`, "{\"messages\":[{\"a\":\"\xff\"}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		envs, ok := batchEnvelopes(body)
		if !ok {
			return
		}
		var req struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := decodeStrictOuter(body, &req, bus.RuleEnvelopeMalformed, 2); err != nil {
			t.Fatalf("batchEnvelopes read %q, decodeStrictOuter refuses it: %v", body, err)
		}
		if len(envs) != len(req.Messages) {
			t.Fatalf("batchEnvelopes read %q as %q, decodeStrictOuter as %q", body, envs, req.Messages)
		}
		for i := range envs {
			if !bytes.Equal(envs[i], req.Messages[i]) {
				t.Fatalf("batchEnvelopes read %q as %q, decodeStrictOuter as %q", body, envs, req.Messages)
			}
		}
	})
}

// plainReceiveQuery reads only query strings that parseReceiveQuery's
// general reading reads the same way.
func FuzzPlainReceiveQuery(f *testing.F) {
	for _, s := range []string{"", "max=10&wait=0", "max=1&wait=20&visibility=43200", "max=11", "max=0", "max=01&wait=007",
		"wait=1&wait=2", "max=1&", "&max=1", "max", "max=", "max=a", "max=1%30", "max=+1", "attempt=x", "visibility=43201", "Max=1", "max=1;wait=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		rq, ok := plainReceiveQuery(raw)
		if !ok {
			return
		}
		q, err := parseQuery(raw, bus.RulePullBadRequest, receiveParams...)
		if err != nil {
			t.Fatalf("plainReceiveQuery read %q, parseQuery refuses it: %v", raw, err)
		}
		want := receiveQuery{}
		for _, p := range []struct {
			name        string
			def, lo, hi int
			dst         *int
		}{{"max", 10, 1, 10, &want.max}, {"wait", 20, 0, 20, &want.wait}, {"visibility", 60, 0, 43200, &want.visibility}} {
			if *p.dst, err = intParam(q, p.name, p.def, p.lo, p.hi); err != nil {
				t.Fatalf("plainReceiveQuery read %q, intParam refuses it: %v", raw, err)
			}
		}
		if _, ok := q["attempt"]; ok || rq != want {
			t.Fatalf("plainReceiveQuery read %q as %+v, the general reading as %+v (%v)", raw, rq, want, q)
		}
	})
}
