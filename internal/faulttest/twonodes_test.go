package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// balancer is an http.RoundTripper that spreads requests over nodes in
// turn and, as a load balancer does, sends a request whose connection is
// refused (a dead node) to the next node.
type balancer struct {
	nodes []*node
	next  atomic.Uint32
	base  http.RoundTripper
}

func newBalancer(nodes ...*node) *balancer {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	return &balancer{nodes: nodes, base: tr}
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	first := int(b.next.Add(1))
	var err error
	for i := range b.nodes {
		n := b.nodes[(first+i)%len(b.nodes)]
		r := req.Clone(req.Context())
		r.URL.Host = n.addr
		r.Host = ""
		if req.Body != nil && req.GetBody != nil && i > 0 {
			if r.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		var resp *http.Response
		resp, err = b.base.RoundTrip(r)
		var op *net.OpError
		if err == nil || !errors.As(err, &op) || op.Op != "dial" || (req.Body != nil && req.GetBody == nil) {
			return resp, err
		}
	}
	return nil, err
}

// TestTwoNodesOneKilled runs the load runner through a balancer over two
// nodes on one PostgreSQL schema (receivers on both) and kills one of
// them with SIGKILL mid-load: the other goes on; the messages the killed
// node had handed out stay invisible until their visibility timeout and
// then come back through the other node; the checker's verdict is OK.
// -long kills the nodes in turn 10 times, restarting each.
func TestTwoNodesOneKilled(t *testing.T) {
	t.Parallel()
	start := time.Now()
	base := pgtest.URL(t)
	b := startNode(t, "B", base) // migrates the schema
	a := startNode(t, "A", base)

	// A queue of the test's own, for messages the killed node hands out.
	ws := workspace(t, b, "handed-out")
	prod, cons := newConn(t, b, ws, "producer"), newConn(t, b, ws, "consumer")
	for i := range 10 {
		b.must(t, 202, "POST", publishPath(prod), prod.token, envelope(fmt.Sprintf("h%d", i), fmt.Sprintf("s%d", i), i, ""), nil)
	}

	rounds := 1
	if *long {
		rounds = 10
	}
	var progress progressLog
	cfg := loadConfig(a.URL, time.Duration(rounds)*3*time.Second+8*time.Second)
	cfg.Progress = progress.record
	cfg.ProgressEvery = 200 * time.Millisecond
	cfg.HTTPClient = &http.Client{Transport: newBalancer(a, b)}
	done := runLoad(cfg)
	progress.waitAccepted(t, 50, 30*time.Second)

	// A hands out the 10 messages, for 6 s, and dies holding them.
	const visibility = 6 * time.Second
	handedAt := time.Now()
	held, ans, err := a.receive(context.Background(), cons, fmt.Sprintf("max=10&wait=0&visibility=%d", int(visibility/time.Second)))
	if err != nil || len(held) != 10 {
		t.Fatalf("receive on A: %v %v (%d messages)", ans, err, len(held))
	}
	a.kill()
	killedAt := time.Now()
	before := progress.get().Delivered

	// B goes on: the load keeps being delivered.
	var wentOn time.Duration
	for {
		if p := progress.get(); p.Delivered > before+20 {
			wentOn = time.Since(killedAt)
			break
		}
		if time.Since(killedAt) > 15*time.Second {
			t.Fatalf("nothing delivered for 15 s after A was killed (%d before)", before)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// What A handed out is not delivered before its visibility ends…
	var back []received
	for len(back) < 10 {
		ms, ans, err := b.receive(context.Background(), cons, "max=10&wait=1&visibility=30")
		if err != nil || ans.Status != 200 {
			t.Fatalf("receive on B: %v %v", ans, err)
		}
		if len(ms) > 0 && time.Since(handedAt) < visibility-100*time.Millisecond {
			t.Fatalf("%d messages A handed out were delivered again %s after, before their visibility (%s) ended",
				len(ms), time.Since(handedAt).Round(time.Millisecond), visibility)
		}
		back = append(back, ms...)
		if time.Since(handedAt) > visibility+15*time.Second {
			t.Fatalf("%d of the 10 messages A handed out came back within %s", len(back), visibility+15*time.Second)
		}
	}
	cameBack := time.Since(handedAt)
	// …and then comes back, each once, delivered a second time.
	seen := map[string]bool{}
	for _, m := range back {
		if m.ReceiveCount != 2 || seen[m.MessageID()] {
			t.Errorf("message %s came back with receive_count %d (seen before: %v)", m.MessageID(), m.ReceiveCount, seen[m.MessageID()])
		}
		seen[m.MessageID()] = true
	}
	for i := range 10 {
		if !seen[fmt.Sprintf("h%d", i)] {
			t.Errorf("h%d did not come back", i)
		}
	}
	ackAll(t, b, cons, back)

	// -long: more kills, of either node, each restarted before the next.
	nodes := []*node{a, b}
	killed := 1
	for i := 1; i < rounds; i++ {
		nodes[(i-1)%2].start() // the one killed last comes back
		time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
		nodes[i%2].kill()
		killed++
	}
	if rounds > 1 {
		nodes[(rounds-1)%2].start()
	}

	r := <-done
	checkReport(t, r.rep, r.err)
	if r.rep != nil {
		t.Logf("two nodes: %d SIGKILLs; the other node delivered again %s after the kill; the killed node's 10 messages came back %s after it handed them out (visibility %s); %s; total %s",
			killed, wentOn.Round(time.Millisecond), cameBack.Round(time.Millisecond), visibility, summary(r.rep), time.Since(start).Round(time.Millisecond))
	}
}
