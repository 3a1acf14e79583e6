package floor

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func call(t *testing.T, url, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
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
