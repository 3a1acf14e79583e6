package postgres

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestUpdateReadsLockTheConnection: two Updates that each read a
// connection and change it do not both act on the row as it was before
// either wrote. The second's read waits for the first's lock and sees its
// write: of two "Get client secret" at once, one issues the secret and the
// other finds it active (409). Under READ COMMITTED without the lock both
// read the state "none", both wrote a secret, and only the last one
// written worked.
func TestUpdateReadsLockTheConnection(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	_, producer, _ := setupQueue(t, s, 5)
	errActive := errors.New("a secret is active")
	issue := func(hash string, afterRead func()) error {
		return s.Update(t.Context(), func(tx bus.Tx) error {
			c, err := tx.ConnectionGet(producer)
			if err != nil {
				return err
			}
			afterRead()
			if c.SecretState == bus.SecretActive {
				return errActive
			}
			c.SecretState, c.SecretHash = bus.SecretActive, []byte(hash)
			return tx.ConnectionUpdate(c)
		})
	}
	read, second := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	first := make(chan error, 1)
	go func() {
		first <- issue("first", func() {
			once.Do(func() { close(read) }) // once: the transaction may be run again
			// Hold the row until the second waits for it (with the lock)
			// or is done (without it: it read the row as it is now).
			for deadline := time.Now().Add(10 * time.Second); len(second) == 0; time.Sleep(5 * time.Millisecond) {
				var waiting int
				if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM connections WHERE id = $1 FOR NO KEY UPDATE%'`).
					Scan(&waiting); err != nil {
					t.Error(err)
					return
				}
				if waiting > 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Error("the second issue neither waited for the row nor ended")
					return
				}
			}
		})
	}()
	<-read
	go func() { second <- issue("second", func() {}) }()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; !errors.Is(err, errActive) {
		t.Fatalf("the second issue: %v, want it to find the first's secret active", err)
	}
	if err := s.View(t.Context(), func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(producer)
		if err == nil && string(c.SecretHash) != "first" {
			t.Errorf("the stored secret is %q, want the first's", c.SecretHash)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
