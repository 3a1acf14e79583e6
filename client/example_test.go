package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/sombus/sombus/client"
)

// Publish one envelope as a producer connection.
func ExampleProducer_Publish() {
	p, err := client.NewProducer(client.Config{
		BaseURL:      "https://bus.example.com",
		ClientID:     os.Getenv("SOMBUS_CLIENT_ID"),
		ClientSecret: os.Getenv("SOMBUS_CLIENT_SECRET"),
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Publish(context.Background(), client.Envelope{
		MessageType:   "story.context",
		CorrelationID: "story-42",
		Payload:       map[string]any{"text": "Once upon a time"},
	})
	var refusal *client.Error
	if errors.As(err, &refusal) {
		for _, v := range refusal.Violations {
			log.Printf("refused: %s: %s", v.Rule, v.Message)
		}
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s accepted on %s for %d queues\n", res.MessageID, res.Topic, res.Deliveries)
}

// Run the typical consumer loop until interrupted: handlers run
// concurrently across stories and in order within each.
func ExampleConsumer_Consume() {
	c, err := client.NewConsumer(client.Config{
		BaseURL:      "https://bus.example.com",
		ClientID:     os.Getenv("SOMBUS_CLIENT_ID"),
		ClientSecret: os.Getenv("SOMBUS_CLIENT_SECRET"),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err = c.Consume(ctx, func(ctx context.Context, m *client.Message) error {
		var payload struct{ Text string }
		if err := m.DecodePayload(&payload); err != nil {
			return err // released, and delivered again after a backoff
		}
		fmt.Println(m.CorrelationID, m.MessageID, payload.Text)
		return nil // acknowledged
	}, client.ConsumeOptions{
		Workers:   16,
		Snapshots: true,
		OnError:   func(err error) { log.Print(err) },
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Receive, acknowledge and release by hand.
func ExampleConsumer_Receive() {
	c, err := client.NewConsumer(client.Config{BaseURL: "https://bus.example.com", ClientID: "c…", ClientSecret: "…"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	msgs, err := c.Receive(ctx, client.ReceiveOptions{Max: 10, Wait: 20 * time.Second, Visibility: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	var done, retry []string
	for _, m := range msgs {
		if m.ReceiveCount > 3 {
			retry = append(retry, m.ReceiptHandle)
			continue
		}
		done = append(done, m.ReceiptHandle)
	}
	res, err := c.Ack(ctx, done...)
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range res.Failed {
		log.Printf("not acknowledged (%s): %s", f.Code, f.Message)
	}
	if _, err := c.Nack(ctx, retry, 30*time.Second); err != nil {
		log.Fatal(err)
	}
}

// Manage connections with a user's API key.
func ExampleManager() {
	m := &client.Manager{BaseURL: "https://bus.example.com", APIKey: os.Getenv("SOMBUS_API_KEY")}
	ctx := context.Background()
	ws := "w…"
	conn, err := m.CreateConnection(ctx, ws, client.ConnectionParams{
		Kind:          client.KindConsumer,
		Name:          client.Ptr("search indexer"),
		Subscriptions: &[]client.Subscription{{Topic: "som.story.*"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	secret, err := m.IssueSecret(ctx, ws, conn.ID)
	if errors.Is(err, client.ErrConflict) {
		secret, err = m.RotateSecret(ctx, ws, conn.ID, client.Overlap1h)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(secret.ClientID, secret.MessagesURL)
}

// Read the rule of a refusal with errors.As or errors.Is.
func ExampleError() {
	var err error = &client.Error{
		Status:     http.StatusTooManyRequests,
		Violations: []client.Violation{{Rule: client.RuleRateLimited, Message: "Over 20 requests a second."}},
		RetryAfter: 2 * time.Second,
	}
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Rule(), e.RetryAfter, e.Temporary())
	}
	fmt.Println(errors.Is(err, client.ErrRateLimited), errors.Is(err, client.ErrNotFound))
	// Output:
	// 429 rate.limited 2s true
	// true false
}

// The default release delay of a failed message grows with its deliveries.
func ExampleExponentialBackoff() {
	for rc := 1; rc <= 5; rc++ {
		fmt.Print(client.ExponentialBackoff(time.Second, 10*time.Second, rc), " ")
	}
	fmt.Println()
	// Output: 1s 2s 4s 8s 10s
}
