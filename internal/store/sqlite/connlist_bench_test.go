package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

// BenchmarkConnectionListWorkspace reads the connections of a workspace of
// 101 (a producer and 100 consumers with subscriptions and secrets, as in
// the long-poll load test) in the two ways a reader can: the whole rows, as
// the management listing does, and only the fields a token check needs, as
// the checker does when it refreshes a workspace.
//
//	go test -run '^$' -bench ConnectionListWorkspace -benchmem ./internal/store/sqlite/
func BenchmarkConnectionListWorkspace(b *testing.B) {
	s := benchStore(b)
	ws, _, _ := setupQueueB(b, s)
	err := s.Update(context.Background(), func(tx bus.Tx) error {
		for i := range 99 {
			c := bus.Connection{ID: bus.NewID("c"), WorkspaceID: ws, Kind: bus.KindConsumer, Name: fmt.Sprint("consumer ", i),
				Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", CredentialVersion: 1,
				Subscriptions: []bus.Subscription{{Topic: "som.orders.>"}, {Topic: fmt.Sprint("som.c", i, ".*"), Producers: []string{"c1", "c2"}}},
				SecretState:   bus.SecretActive, SecretHash: make([]byte, 64), SecretIssuedAt: &t0, CreatedAt: t0, UpdatedAt: t0}
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	reads := []struct {
		name string
		read func(tx bus.Tx) (int, error)
	}{
		{"list", func(tx bus.Tx) (int, error) { l, err := tx.ConnectionList(ws, ""); return len(l), err }},
		{"states", func(tx bus.Tx) (int, error) { l, err := tx.ConnectionStates(ws); return len(l), err }},
	}
	for _, r := range reads {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				err := s.View(context.Background(), func(tx bus.Tx) error {
					n, err := r.read(tx)
					if err == nil && n != 101 {
						err = fmt.Errorf("%d connections, want 101", n)
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
