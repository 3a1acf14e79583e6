// Command producer publishes a few envelopes to sombus: copy it as the start
// of your own producer.
//
//	SOMBUS_URL=http://127.0.0.1:8080 SOMBUS_CLIENT_ID=c… SOMBUS_CLIENT_SECRET=… \
//	  go run ./examples/producer -story story-1 -n 5
//
// SOMBUS_WORKSPACE is optional: the workspace is read from the access token.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/sombus/sombus/client"
)

func main() {
	story := flag.String("story", "story-1", "the correlation id (story) of the messages")
	n := flag.Int("n", 3, "how many messages to publish")
	msgType := flag.String("type", "story.context", "the message type (topic som.<type>)")
	flag.Parse()

	p, err := client.NewProducer(client.Config{
		BaseURL:      env("SOMBUS_URL", "http://127.0.0.1:8080"),
		ClientID:     os.Getenv("SOMBUS_CLIENT_ID"),
		ClientSecret: os.Getenv("SOMBUS_CLIENT_SECRET"),
		WorkspaceID:  os.Getenv("SOMBUS_WORKSPACE"),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	// One batch keeps the messages in order within the story, as does
	// publishing them one after another.
	var envs []client.Envelope
	for i := range *n {
		envs = append(envs, client.Envelope{
			MessageType:   *msgType,
			CorrelationID: *story,
			Payload: map[string]any{
				"text":            fmt.Sprintf("message %d of %s", i+1, *story),
				"story_id":        *story,
				"sequence_number": i + 1,
				"at":              time.Now().UTC().Format(time.RFC3339Nano),
			},
		})
	}
	for len(envs) > 0 {
		batch := envs[:min(len(envs), client.MaxBatchMessages)]
		envs = envs[len(batch):]
		results, err := p.PublishBatch(ctx, batch)
		var refusal *client.Error
		if errors.As(err, &refusal) {
			log.Fatalf("refused (%d): %v", refusal.Status, refusal.Violations)
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range results {
			if r.Accepted {
				fmt.Printf("accepted %s on %s for %d queues (duplicate: %v)\n", r.MessageID, r.Topic, r.Deliveries, r.Duplicate)
			} else {
				fmt.Printf("refused: %v\n", r.Violations)
			}
		}
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
