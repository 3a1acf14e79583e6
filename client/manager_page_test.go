package client_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/server/servertest"
)

// TestListConnectionsFollowsTheCursor: ListConnections returns every
// connection of a workspace larger than one page (100), in order;
// ListConnectionsPage reads one page at a time.
func TestListConnectionsFollowsTheCursor(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	ctx := context.Background()
	m := &client.Manager{BaseURL: n.URL, APIKey: servertest.BootstrapKey}
	ws, err := m.CreateWorkspace(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	var made, consumers []string
	for i := range 103 {
		kind := client.KindProducer
		if i%10 == 0 {
			kind = client.KindConsumer
		}
		name := fmt.Sprint("c", i)
		c, err := m.CreateConnection(ctx, ws.ID, client.ConnectionParams{Kind: kind, Name: &name})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, c.ID)
		if kind == client.KindConsumer {
			consumers = append(consumers, c.ID)
		}
	}
	ids := func(cs []client.Connection) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	all, err := m.ListConnections(ctx, ws.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(all), made) {
		t.Fatalf("ListConnections gave %d connections, want all %d in order", len(all), len(made))
	}
	cs, err := m.ListConnections(ctx, ws.ID, client.KindConsumer)
	if err != nil || !slices.Equal(ids(cs), consumers) || cs[0].QueueStats == nil {
		t.Fatalf("ListConnections(consumer) = %q, %v", ids(cs), err)
	}

	var paged []string
	p := client.PageOptions{Limit: 40}
	pages := 0
	for {
		page, err := m.ListConnectionsPage(ctx, ws.ID, "", p)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		paged = append(paged, ids(page.Connections)...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	if pages != 3 || !slices.Equal(paged, made) {
		t.Fatalf("%d pages of 40 gave %d connections", pages, len(paged))
	}
}
