package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"
)

const floorName = "floor (bare net/http)"

// httpBus speaks the pull API's message path over HTTP/1.1, with a
// connection per worker: to a sombus node (or several sharing a store,
// worker w talking to node w modulo their number), or to the floor, which
// answers the same requests.
type httpBus struct {
	name    string
	bases   []string // base URLs; management goes to the first
	client  *http.Client
	setup   func(ctx context.Context, b *httpBus, run int) error // sombus: a workspace and two connections
	cleanup func(b *httpBus)

	ws, producer, consumer string
	producerTok, consumTok string
	proc                   *exec.Cmd // the floor's process
}

func newHTTPClient(workers int) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * workers, MaxConnsPerHost: 2 * workers, IdleConnTimeout: time.Minute}
	return &http.Client{Timeout: time.Minute, Transport: tr}
}

func (b *httpBus) Name() string { return b.name }

func (b *httpBus) Reset(ctx context.Context, run int) error {
	if b.cleanup != nil {
		b.cleanup(b)
	}
	if b.setup != nil {
		return b.setup(ctx, b, run)
	}
	return nil
}

func (b *httpBus) Close() {
	if b.cleanup != nil {
		b.cleanup(b)
	}
	b.client.CloseIdleConnections()
	if b.proc != nil {
		_ = b.proc.Process.Signal(os.Interrupt)
		_ = b.proc.Wait()
	}
}

// call sends a request to worker w's node and reads the answer whole.
func (b *httpBus) call(ctx context.Context, w int, method, path, bearer string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.bases[w%len(b.bases)]+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func (b *httpBus) Publish(ctx context.Context, w int, msgs []msg) error {
	if len(msgs) == 1 {
		st, body, err := b.call(ctx, w, "POST", "/v1/tenants/"+b.ws+"/messages", b.producerTok, msgs[0].body)
		if err == nil && (st != 202 || !bytes.Contains(body, []byte(`"accepted":true`))) {
			err = fmt.Errorf("publish: %d %.300s", st, body)
		}
		return err
	}
	n := 16
	for _, m := range msgs {
		n += len(m.body) + 1
	}
	req := make([]byte, 0, n)
	req = append(req, `{"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			req = append(req, ',')
		}
		req = append(req, m.body...)
	}
	req = append(req, "]}"...)
	st, body, err := b.call(ctx, w, "POST", "/v1/tenants/"+b.ws+"/messages/batch", b.producerTok, req)
	if err == nil && (st != 200 || bytes.Contains(body, []byte(`"accepted":false`))) {
		err = fmt.Errorf("batch publish: %d %.300s", st, body)
	}
	return err
}

func (b *httpBus) Receive(ctx context.Context, w, max int) ([]any, error) {
	st, body, err := b.call(ctx, w, "GET", fmt.Sprintf("/v1/tenants/%s/consumers/%s/messages?max=%d&wait=1", b.ws, b.consumer, max), b.consumTok, nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Messages []struct {
			ReceiptHandle string `json:"receipt_handle"`
		} `json:"messages"`
	}
	if st != 200 || json.Unmarshal(body, &out) != nil {
		return nil, fmt.Errorf("receive: %d %.300s", st, body)
	}
	got := make([]any, len(out.Messages))
	for i, m := range out.Messages {
		got[i] = m.ReceiptHandle
	}
	return got, nil
}

func (b *httpBus) Ack(ctx context.Context, w int, got []any) error {
	req, err := json.Marshal(map[string]any{"receipt_handles": got})
	if err != nil {
		return err
	}
	st, body, err := b.call(ctx, w, "POST", "/v1/tenants/"+b.ws+"/consumers/"+b.consumer+"/ack", b.consumTok, req)
	if err == nil && (st != 200 || bytes.Contains(body, []byte("ReceiptHandleIsInvalid"))) {
		err = fmt.Errorf("ack: %d %.300s", st, body)
	}
	return err
}

// startFloor starts this program again as a floor server (its own process,
// as the other systems have theirs) on a free port of 127.0.0.1.
func startFloor(ctx context.Context, cfg config) (*httpBus, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-serve-floor", "127.0.0.1:0") //nolint:gosec // this program itself
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("no URL from the floor process: %w", err)
	}
	// The floor reads neither ids nor tokens; tokens as long as sombus's
	// make requests of the same size.
	tok := strings.Repeat("t", 529)
	return &httpBus{name: floorName, bases: []string{strings.TrimSpace(line)}, client: newHTTPClient(cfg.workers), proc: cmd,
		ws: "wfloorfloorfloorfloorfloorfl", producer: "cfloorproducerfloorproducer", consumer: "cfloorconsumerfloorconsumer",
		producerTok: tok, consumTok: tok}, nil
}

// newSombus measures the nodes at bases (several share one store, and
// must share their --public-url, so that each takes the tokens the first
// issues): each run creates a workspace and a producer and a consumer
// connection on the unlimited tier through the first with the operator's
// key apiKey, and removes the connections (and so the queue) after it.
func newSombus(cfg config, name string, bases []string, apiKey string) *httpBus {
	b := &httpBus{name: name, bases: bases, client: newHTTPClient(cfg.workers)}
	manage := func(ctx context.Context, method, path string, body any, want int, out any) error {
		var req []byte
		if body != nil {
			var err error
			if req, err = json.Marshal(body); err != nil {
				return err
			}
		}
		st, ans, err := b.call(ctx, 0, method, "/v1/manage"+path, apiKey, req)
		if err != nil {
			return err
		}
		if st != want {
			return fmt.Errorf("%s /v1/manage%s: %d %.300s", method, path, st, ans)
		}
		if out != nil {
			return json.Unmarshal(ans, out)
		}
		return nil
	}
	token := func(ctx context.Context, id, secret string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", bases[0]+"/v1/oauth/token", strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode()))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(id, secret)
		resp, err := b.client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var tr struct {
			AccessToken string `json:"access_token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil || resp.StatusCode != 200 || tr.AccessToken == "" {
			return "", fmt.Errorf("token: status %d", resp.StatusCode)
		}
		return tr.AccessToken, nil
	}
	b.setup = func(ctx context.Context, b *httpBus, run int) error {
		var w, p, c struct {
			ID string `json:"id"`
		}
		if err := manage(ctx, "POST", "/workspaces", map[string]any{"name": fmt.Sprintf("compare run %d %s", run+1, time.Now().UTC().Format(time.RFC3339))}, 201, &w); err != nil {
			return err
		}
		b.ws = w.ID
		if err := manage(ctx, "POST", "/workspaces/"+w.ID+"/connections", map[string]any{"kind": "producer", "name": "compare producer", "quota_tier": "unlimited"}, 201, &p); err != nil {
			return err
		}
		b.producer = p.ID
		if err := manage(ctx, "POST", "/workspaces/"+w.ID+"/connections", map[string]any{"kind": "consumer", "name": "compare consumer", "quota_tier": "unlimited",
			"subscriptions": []map[string]any{{"topic": "som.>"}}}, 201, &c); err != nil {
			return err
		}
		b.consumer = c.ID
		var err error
		for _, x := range []struct {
			id  string
			tok *string
		}{{p.ID, &b.producerTok}, {c.ID, &b.consumTok}} {
			var s struct {
				ClientSecret string `json:"client_secret"`
			}
			if err = manage(ctx, "POST", "/workspaces/"+w.ID+"/connections/"+x.id+"/secret", nil, 201, &s); err != nil {
				return err
			}
			if *x.tok, err = token(ctx, x.id, s.ClientSecret); err != nil {
				return err
			}
		}
		return nil
	}
	b.cleanup = func(b *httpBus) {
		if b.ws == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range []string{b.producer, b.consumer} {
			if c != "" {
				_ = manage(ctx, "DELETE", "/workspaces/"+b.ws+"/connections/"+c, nil, 204, nil)
			}
		}
		b.ws, b.producer, b.consumer = "", "", ""
	}
	return b
}
