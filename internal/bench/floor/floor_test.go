package floor

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

func call(t *testing.T, url, method, path, body string) (int, []byte) {
	t.Helper()
	st, b, err := do(url, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return st, b
}

func do(url, method, path, body string) (int, []byte, error) {
	return doCtx(context.Background(), url, method, path, body)
}

func doCtx(ctx context.Context, url, method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

const env = `{"som_version":"1.0.0","message_id":"m-%","message_type":"story.context","correlation_id":"story-1","payload":{"data":"x"}}`

func envN(n string) string { return strings.ReplaceAll(env, "%", n) }

// The floor answers the message path's routes with the shapes of a
// sombus node's answers, hands each message out once and forgets it on
// ack.
func TestFloorMessagePath(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, s, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st, b := call(t, url, "POST", "/v1/tenants/w1/messages", envN("1"))
	if st != 202 || string(b) != `{"accepted":true,"message_id":"m-1","topic":"som.story.context","deliveries":1}`+"\n" {
		t.Fatalf("publish: %d %s", st, b)
	}
	st, b = call(t, url, "POST", "/v1/tenants/w1/messages/batch", `{"messages":[`+envN("2")+`,`+envN("3")+`,{"payload":{}}]}`)
	var batch struct {
		Results []struct {
			Accepted  bool   `json:"accepted"`
			MessageID string `json:"message_id"`
		} `json:"results"`
	}
	if st != 200 || json.Unmarshal(b, &batch) != nil || len(batch.Results) != 3 ||
		!batch.Results[0].Accepted || batch.Results[1].MessageID != "m-3" || batch.Results[2].Accepted {
		t.Fatalf("batch: %d %s", st, b)
	}
	if st, b := call(t, url, "POST", "/v1/tenants/w1/messages", `{"som_version":`); st != 400 {
		t.Fatalf("malformed publish: %d %s", st, b)
	}
	if st, b := call(t, url, "GET", "/v1/tenants/w1/consumers/c1/messages?max=11", ""); st != 400 {
		t.Fatalf("max=11: %d %s", st, b)
	}
	st, b = call(t, url, "GET", "/v1/tenants/w1/consumers/c1/messages?max=10&wait=0", "")
	var recv struct {
		Messages []struct {
			ReceiptHandle string          `json:"receipt_handle"`
			Envelope      json.RawMessage `json:"envelope"`
		} `json:"messages"`
	}
	if st != 200 || json.Unmarshal(b, &recv) != nil || len(recv.Messages) != 3 || string(recv.Messages[0].Envelope) != envN("1") || len(recv.Messages[0].ReceiptHandle) != 96 {
		t.Fatalf("receive: %d %s", st, b)
	}
	if st, b := call(t, url, "GET", "/v1/tenants/w1/consumers/c1/messages?max=10&wait=0", ""); st != 200 || string(b) != `{"messages":[]}`+"\n" {
		t.Fatalf("receive of an empty queue: %d %s", st, b)
	}
	h0, h1 := recv.Messages[0].ReceiptHandle, recv.Messages[1].ReceiptHandle
	st, b = call(t, url, "POST", "/v1/tenants/w1/consumers/c1/ack", `{"receipt_handles":["`+h0+`","`+h1+`","bad"]}`)
	var ack struct {
		Acked  []string `json:"acked"`
		Failed []struct {
			Code string `json:"code"`
		} `json:"failed"`
	}
	if st != 200 || json.Unmarshal(b, &ack) != nil || len(ack.Acked) != 2 || len(ack.Failed) != 1 || ack.Failed[0].Code != "ReceiptHandleIsInvalid" {
		t.Fatalf("ack: %d %s", st, b)
	}
	// Acknowledged once: a second ack fails.
	if _, b := call(t, url, "POST", "/v1/tenants/w1/consumers/c1/ack", `{"receipt_handles":["`+h0+`"]}`); !strings.Contains(string(b), "ReceiptHandleIsInvalid") {
		t.Fatalf("second ack: %s", b)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("queued after acking 2 of 3: %d", n)
	}
}

// A long poll on the empty queue is answered by the next publish, not by
// the end of its wait (20 s; the request gives up after 10).
func TestFloorLongPollWokenByPublish(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, s, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		st  int
		b   []byte
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, b, err := doCtx(ctx, url, "GET", "/v1/tenants/w1/consumers/c1/messages?max=10&wait=20", "")
		ch <- answer{st, b, err}
	}()
	for waiting := false; !waiting; {
		s.mu.Lock()
		waiting = s.waiting
		s.mu.Unlock()
		runtime.Gosched()
	}
	if st, b := call(t, url, "POST", "/v1/tenants/w1/messages", envN("1")); st != 202 {
		t.Fatalf("publish: %d %s", st, b)
	}
	a := <-ch
	if a.err != nil || a.st != 200 || !strings.Contains(string(a.b), `"message_id":"m-1"`) {
		t.Fatalf("long poll: %v %d %s", a.err, a.st, a.b)
	}
}
