package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/server/servertest"
)

// env is a node with a workspace, a producer and a consumer (both on the
// unlimited tier: the node's manual clock never refills a bucket).
type env struct {
	node     *servertest.Node
	mgr      *client.Manager
	ws       string
	prodID   string
	prodSec  string
	consID   string
	consSec  string
	producer *client.Producer
	consumer *client.Consumer
}

func setup(t *testing.T, opts servertest.Options, consumer client.ConnectionParams) *env {
	t.Helper()
	n := servertest.Start(t, opts)
	return setupOn(t, n, n.URL, consumer)
}

// setupOn makes the connections on n and points the SDK clients at url (a
// proxy in front of n, or n itself).
func setupOn(t *testing.T, n *servertest.Node, url string, consumer client.ConnectionParams) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{node: n, mgr: &client.Manager{BaseURL: n.URL, APIKey: servertest.BootstrapKey}}
	ws, err := e.mgr.CreateWorkspace(ctx, "test")
	if err != nil {
		t.Fatalf("create workspace: %v", err)
	}
	e.ws = ws.ID
	p, err := e.mgr.CreateConnection(ctx, e.ws, client.ConnectionParams{Kind: client.KindProducer, Name: client.Ptr("producer"), QuotaTier: client.Ptr("unlimited")})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	consumer.Kind = client.KindConsumer
	if consumer.Name == nil {
		consumer.Name = client.Ptr("consumer")
	}
	if consumer.QuotaTier == nil {
		consumer.QuotaTier = client.Ptr("unlimited")
	}
	if consumer.Subscriptions == nil {
		consumer.Subscriptions = &[]client.Subscription{{Topic: "som.>"}}
	}
	c, err := e.mgr.CreateConnection(ctx, e.ws, consumer)
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	ps, err := e.mgr.IssueSecret(ctx, e.ws, p.ID)
	if err != nil {
		t.Fatalf("producer secret: %v", err)
	}
	cs, err := e.mgr.IssueSecret(ctx, e.ws, c.ID)
	if err != nil {
		t.Fatalf("consumer secret: %v", err)
	}
	e.prodID, e.prodSec, e.consID, e.consSec = p.ID, ps.ClientSecret, c.ID, cs.ClientSecret
	e.producer, err = client.NewProducer(client.Config{BaseURL: url, ClientID: p.ID, ClientSecret: ps.ClientSecret})
	if err != nil {
		t.Fatal(err)
	}
	e.consumer, err = client.NewConsumer(client.Config{BaseURL: url, ClientID: c.ID, ClientSecret: cs.ClientSecret})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// publish publishes envelopes in batches of 100 and fails on any refusal.
func (e *env) publish(t *testing.T, envs []client.Envelope) {
	t.Helper()
	for len(envs) > 0 {
		n := min(len(envs), client.MaxBatchMessages)
		res, err := e.producer.PublishBatch(context.Background(), envs[:n])
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		for i, r := range res {
			if err := r.Err(); err != nil {
				t.Fatalf("envelope %d refused: %v", i, err)
			}
		}
		envs = envs[n:]
	}
}

func envelope(id, story string, payload map[string]any) client.Envelope {
	if payload == nil {
		payload = map[string]any{}
	}
	return client.Envelope{MessageID: id, MessageType: "story.context", CorrelationID: story, Payload: payload}
}

// queue reads the consumer's queue counts.
func (e *env) queue(t *testing.T) client.QueueStats {
	t.Helper()
	c, err := e.mgr.GetConnection(context.Background(), e.ws, e.consID)
	if err != nil {
		t.Fatalf("get consumer: %v", err)
	}
	if c.QueueStats == nil {
		t.Fatalf("consumer without queue counts")
	}
	return *c.QueueStats
}

// consume runs Consume in the background; stop cancels it and returns its error.
func consume(t *testing.T, c *client.Consumer, h client.Handler, o client.ConsumeOptions) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, h, o) }()
	var stopped bool
	var err error
	stop = func() error {
		if stopped {
			return err
		}
		stopped = true
		cancel()
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			err = fmt.Errorf("Consume did not return 20s after its context was cancelled")
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
