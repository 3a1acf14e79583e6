package sqlite

import (
	"context"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestDepthDrainWALPages is a diagnostic (SOMBUS_DIAG=1): four callers
// drain 20,000 of 30,000 queued messages (receive 10, ack them), with no
// checkpoint, for many shallow stories and for 100 deep ones, and every
// WAL frame written meanwhile is put down to the B-tree that owned its
// page before the drain (dbstat). A page the drain freed and another
// B-tree then took from the free list still counts for its first owner.
func TestDepthDrainWALPages(t *testing.T) {
	if os.Getenv("SOMBUS_DIAG") == "" {
		t.Skip("a diagnostic: SOMBUS_DIAG=1")
	}
	for _, sh := range []depthShape{{"shallow", 30000, 3000}, {"deep", 30000, 100}} {
		ctx := context.Background()
		s, path, _, _, q := diagStore(t, sh)
		owner := pageOwners(t, s)
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		from := fi.Size()
		c0 := s.w.commits.Load()
		now := t0.Add(time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		taken := 0
		for range 4 {
			wg.Go(func() {
				for range 500 {
					r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now})
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: now}); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					taken += len(r.Deliveries)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		commits := s.w.commits.Load() - c0
		frames, pages := map[string]int{}, map[string]map[uint32]bool{}
		total := 0
		walPages(t, path, from, -1, func(pg uint32) {
			total++
			n := owner[pg]
			if n == "" {
				n = "(new pages)"
			}
			frames[n]++
			if pages[n] == nil {
				pages[n] = map[uint32]bool{}
			}
			pages[n][pg] = true
		})
		var names []string
		for n := range frames {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool { return frames[names[i]] > frames[names[j]] })
		t.Logf("%s: %d messages, %d commits (%.1f messages a commit), %.2f WAL frames a message",
			sh.name, taken, commits, float64(taken)/float64(commits), float64(total)/float64(taken))
		for _, n := range names[:min(8, len(names))] {
			t.Logf("  %-24s %.3f frames a message, %.2f a commit, %d distinct pages", n,
				float64(frames[n])/float64(taken), float64(frames[n])/float64(commits), len(pages[n]))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
