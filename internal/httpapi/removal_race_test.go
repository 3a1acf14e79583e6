package httpapi_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// TestRequestsRacingRemovalAnswer404: requests on a connection sent at the
// same time as its DELETE (six DELETEs, and a PATCH, revoke, secret
// rotation, purge, redrive and skills put each) answer as if they came
// before the removal or after it: exactly one DELETE 204, every other
// request its success or 404 manage.not_found, never 500. The queue holds
// a ready message and two dead letters, so that the purge and the redrive
// write. Every interleaving answers so; the interleavings that used to
// answer 500 come up in most runs.
func TestRequestsRacingRemovalAnswer404(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, n *node) {
		for round := range 5 {
			pair := n.NewPair(map[string]any{"attempt_limit": 1})
			for _, story := range []string{"a", "b"} {
				n.Publish(pair, servertest.Envelope("dead-"+story, story, nil)).Must(t, 202)
			}
			var handles []string
			for _, m := range n.Receive(pair, "wait=0&max=10") {
				handles = append(handles, m.ReceiptHandle)
			}
			zero := 0
			n.Settle(pair, "nack", handles, &zero).Must(t, 200)
			n.Publish(pair, servertest.Envelope("ready", "c", nil)).Must(t, 202)
			if st := n.QueueCounts(pair); st.DeadLetters != 2 || st.Ready != 1 {
				t.Fatalf("round %d: before the race: %+v, want 2 dead letters and 1 ready", round, st)
			}
			p := connPath(pair.WS, pair.Consumer)
			reqs := []struct {
				method, path string
				body         any
				ok           int
			}{
				{"PATCH", p, map[string]any{"name": "renamed"}, 200},
				{"POST", p + "/revoke", nil, 200},
				{"POST", p + "/secret/rotate", nil, 201},
				{"POST", p + "/purge", nil, 200},
				{"POST", p + "/dead-letters/redrive", nil, 200},
				{"PUT", p + "/skills", map[string]any{"registrations": []map[string]any{{"instance_id": "i", "skill": "s", "name": "n", "values": map[string]any{}, "authority_scale": 0}}}, 200},
			}
			for range 6 {
				reqs = append(reqs, struct {
					method, path string
					body         any
					ok           int
				}{"DELETE", p, nil, 204})
			}
			got := make([]*servertest.Response, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i] = n.do(t, r.method, r.path, opKey, r.body)
				}()
			}
			wg.Wait()
			deleted := 0
			for i, r := range reqs {
				switch got[i].Status {
				case r.ok:
					if r.method == "DELETE" {
						deleted++
					}
				case http.StatusNotFound:
					wantRefusal(t, got[i], http.StatusNotFound, bus.RuleManageNotFound)
				default:
					t.Errorf("round %d: %s %s racing the removal: %d %s, want %d or 404", round, r.method, r.path, got[i].Status, got[i].Body, r.ok)
				}
			}
			if deleted != 1 {
				t.Errorf("round %d: %d DELETEs answered 204, want 1", round, deleted)
			}
		}
	})
}
