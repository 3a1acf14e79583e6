// Package client is the Go SDK of sombus, a multi-tenant message bus.
//
// A producer publishes envelopes:
//
//	p, err := client.NewProducer(client.Config{BaseURL: url, ClientID: id, ClientSecret: secret})
//	res, err := p.Publish(ctx, client.Envelope{MessageType: "story.context", CorrelationID: story, Payload: v})
//
// A consumer reads its connection's queue with the pull API: Receive, Ack
// and Nack one call at a time, or Consume, which runs the typical loop
// (long-poll receive, handle, acknowledge the handled ones, release the
// failed ones with a backoff) with handlers running concurrently across
// stories and in order within each story:
//
//	c, err := client.NewConsumer(client.Config{BaseURL: url, ClientID: id, ClientSecret: secret})
//	err = c.Consume(ctx, func(ctx context.Context, m *client.Message) error {
//		return handle(m)
//	}, client.ConsumeOptions{})
//
// Credentials are swapped for access tokens with the OAuth 2 client
// credentials grant (golang.org/x/oauth2/clientcredentials); a token is
// reused for its hour and replaced shortly before it expires, and after a
// 401 the SDK fetches a new one once and retries.
//
// Every refusal of the bus is an *Error carrying the HTTP status, the
// violations (each with its rule, such as "envelope.message_id") and, for
// 429 and 503, the Retry-After wait. Use errors.As, or errors.Is with the
// sentinel errors (ErrRateLimited, ErrNotFound …).
//
// Manager is the client of the management API (workspaces, users, keys,
// connections, secrets, dead letters, audit), authenticated with a user's
// API key; the sombus command line is built on it.
package client
