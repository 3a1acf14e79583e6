// Command consumer reads a sombus consumer connection's queue until
// interrupted, printing each message: copy it as the start of your own
// consumer.
//
//	SOMBUS_URL=http://127.0.0.1:8080 SOMBUS_CLIENT_ID=c… SOMBUS_CLIENT_SECRET=… \
//	  go run ./examples/consumer
//
// It runs the pull API's typical loop with client.Consume: long-poll
// receive, handle, acknowledge the handled, release the failed with a
// backoff. Stories are handled concurrently, each in order; duplicates are
// dropped by message id; on Ctrl-C the handlers in flight finish and the
// rest is released for the next run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/sombus/sombus/client"
)

func main() {
	workers := flag.Int("workers", 8, "messages handled at once (across stories)")
	snapshots := flag.Bool("snapshots", false, "drop messages older than the highest sequence_number seen per story_id")
	flag.Parse()

	c, err := client.NewConsumer(client.Config{
		BaseURL:      env("SOMBUS_URL", "http://127.0.0.1:8080"),
		ClientID:     os.Getenv("SOMBUS_CLIENT_ID"),
		ClientSecret: os.Getenv("SOMBUS_CLIENT_SECRET"),
		WorkspaceID:  os.Getenv("SOMBUS_WORKSPACE"),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log.Printf("consuming as %s; Ctrl-C to stop", c.ClientID())
	err = c.Consume(ctx, handle, client.ConsumeOptions{
		Workers:   *workers,
		Snapshots: *snapshots,
		OnError:   func(err error) { log.Print(err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Print("stopped")
}

// handle is where your work goes. Return nil when done (the message is
// acknowledged), an error to have it delivered again later. Keep it
// idempotent: delivery is at least once.
func handle(ctx context.Context, m *client.Message) error {
	var payload map[string]any
	if err := m.DecodePayload(&payload); err != nil {
		return fmt.Errorf("payload of %s: %w", m.MessageID, err)
	}
	fmt.Printf("%s  story=%s  type=%s  delivery=%d  payload=%v\n", m.MessageID, m.CorrelationID, m.MessageType, m.ReceiveCount, payload)
	return nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
