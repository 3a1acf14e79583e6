package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// failStore is a store that, while its fault is set, fails every call
// with it; between faults it passes every call to the real store. Reads of
// the management API key (UserByAPIKeyHash, MemberListByUser) still pass,
// so that a management route reaches its own store call.
type failStore struct {
	bus.Store
	fault atomic.Pointer[error]
}

// warmPair makes a producer and a consumer subscribed to everything in
// ws, with secrets and tokens, publishes one message and receives it, so
// that both tokens' checks are warm and the consumer holds its handle.
func (n *node) warmPair(t *testing.T, ws string) warmedPair {
	t.Helper()
	prod := n.connection(t, ws, "producer", nil)
	cons := n.connection(t, ws, "consumer", map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}})
	ps, cs := n.issue(t, ws, prod.ID), n.issue(t, ws, cons.ID)
	p := warmedPair{cons: cons, consSecret: cs.ClientSecret,
		ptok: n.token(t, prod.ID, ps.ClientSecret), ctok: n.token(t, cons.ID, cs.ClientSecret)}
	n.publish(t, ws, p.ptok, "m1").Must(t, 202)
	var got struct {
		Messages []struct {
			ReceiptHandle string `json:"receipt_handle"`
		} `json:"messages"`
	}
	n.pull(t, ws, cons.ID, p.ctok).Must(t, 200).Decode(t, &got)
	if len(got.Messages) != 1 {
		t.Fatalf("received %d messages, want 1", len(got.Messages))
	}
	p.handle = got.Messages[0].ReceiptHandle
	return p
}

// warmedPair is what warmPair made.
type warmedPair struct {
	cons                   conn
	consSecret, ptok, ctok string
	handle                 string
}

func (f *failStore) err() error {
	if p := f.fault.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *failStore) set(err error) {
	if err == nil {
		f.fault.Store(nil)
		return
	}
	f.fault.Store(&err)
}

func (f *failStore) Update(ctx context.Context, fn func(tx bus.Tx) error) error {
	if err := f.err(); err != nil {
		return err
	}
	return f.Store.Update(ctx, fn)
}

func (f *failStore) View(ctx context.Context, fn func(tx bus.Tx) error) error {
	err := f.err()
	if err == nil {
		return f.Store.View(ctx, fn)
	}
	return f.Store.View(ctx, func(tx bus.Tx) error { return fn(&failTx{Tx: tx, err: err}) })
}

func (f *failStore) MessagePublish(ctx context.Context, p *bus.PublishParams) ([]bus.PublishOutcome, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Store.MessagePublish(ctx, p)
}

func (f *failStore) MessageReceive(ctx context.Context, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Store.MessageReceive(ctx, p)
}

func (f *failStore) MessageAck(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Store.MessageAck(ctx, p)
}

func (f *failStore) MessageNack(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Store.MessageNack(ctx, p)
}

func (f *failStore) QueueStats(ctx context.Context, queueID string, now time.Time) (bus.QueueStats, error) {
	if err := f.err(); err != nil {
		return bus.QueueStats{}, err
	}
	return f.Store.QueueStats(ctx, queueID, now)
}

func (f *failStore) QueueStatsMany(ctx context.Context, ids []string, now time.Time) (map[string]bus.QueueStats, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Store.QueueStatsMany(ctx, ids, now)
}

func (f *failStore) QueuePurge(ctx context.Context, p *bus.PurgeParams) (int, error) {
	if err := f.err(); err != nil {
		return 0, err
	}
	return f.Store.QueuePurge(ctx, p)
}

func (f *failStore) DeadLetterList(ctx context.Context, queueID string, limit int, after int64) ([]bus.DeadLetter, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Store.DeadLetterList(ctx, queueID, limit, after)
}

func (f *failStore) DeadLetterRedrive(ctx context.Context, p *bus.RedriveParams) (int, error) {
	if err := f.err(); err != nil {
		return 0, err
	}
	return f.Store.DeadLetterRedrive(ctx, p)
}

func (f *failStore) Maintain(ctx context.Context, p *bus.MaintainParams) (*bus.MaintainResult, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Store.Maintain(ctx, p)
}

func (f *failStore) Ping(ctx context.Context) error {
	if err := f.err(); err != nil {
		return err
	}
	return f.Store.Ping(ctx)
}

// failTx fails every call but the reads of an API key's owner and roles.
type failTx struct {
	bus.Tx
	err error
}

func (t *failTx) UserByAPIKeyHash(hash []byte) (bus.User, error) { return t.Tx.UserByAPIKeyHash(hash) }
func (t *failTx) MemberListByUser(id string) ([]bus.Member, error) {
	return t.Tx.MemberListByUser(id)
}
func (t *failTx) UserCreate(bus.User) error                  { return t.err }
func (t *failTx) UserGet(string) (bus.User, error)           { return bus.User{}, t.err }
func (t *failTx) UserCount() (int, error)                    { return 0, t.err }
func (t *failTx) APIKeyCreate(bus.APIKey) error              { return t.err }
func (t *failTx) WorkspaceCreate(bus.Workspace) error        { return t.err }
func (t *failTx) WorkspaceGet(string) (bus.Workspace, error) { return bus.Workspace{}, t.err }
func (t *failTx) WorkspaceList(string) ([]bus.Workspace, error) {
	return nil, t.err
}
func (t *failTx) MemberSet(bus.Member) error                   { return t.err }
func (t *failTx) MemberDelete(string, string) error            { return t.err }
func (t *failTx) MemberGet(string, string) (bus.Member, error) { return bus.Member{}, t.err }
func (t *failTx) MemberListByWorkspace(string) ([]bus.Member, error) {
	return nil, t.err
}
func (t *failTx) ConnectionCreate(bus.Connection) error { return t.err }
func (t *failTx) ConnectionGet(string) (bus.Connection, error) {
	return bus.Connection{}, t.err
}
func (t *failTx) ConnectionList(string, bus.ConnectionKind) ([]bus.Connection, error) {
	return nil, t.err
}
func (t *failTx) ConnectionStates(string) ([]bus.ConnectionState, error) {
	return nil, t.err
}
func (t *failTx) ConnectionPage(bus.ConnectionPageParams) (bus.ConnectionPageResult, error) {
	return bus.ConnectionPageResult{}, t.err
}
func (t *failTx) ConnectionUpdate(bus.Connection) error     { return t.err }
func (t *failTx) ConnectionDelete(string) error             { return t.err }
func (t *failTx) SkillsPut(string, bus.Skills) error        { return t.err }
func (t *failTx) SkillsGet(string) (bus.Skills, error)      { return bus.Skills{}, t.err }
func (t *failTx) AuditInsert(bus.AuditEntry) error          { return t.err }
func (t *failTx) SigningKeyList() ([]bus.SigningKey, error) { return nil, t.err }
func (t *failTx) SigningKeyCreate(bus.SigningKey) error     { return t.err }
func (t *failTx) AuditList(string, int, string) ([]bus.AuditEntry, error) {
	return nil, t.err
}
func (t *failTx) ServerSecret(string, []byte) ([]byte, error) { return nil, t.err }

// TestStoreFailuresAnswer503OnlyWhenUnreachable drives every route family
// through a store that fails every call: with an error wrapping
// bus.ErrUnavailable each answers 503 with Retry-After and its route's rule
// (consumer.queue_unavailable on receive, ack and nack, skills.unavailable
// on the consumer's skills, temporarily_unavailable on the token endpoint,
// store.unavailable elsewhere); with any other error (a bug) 500
// internal.error (server_error on the token endpoint), never 503. JWKS is
// served from the keys in memory and keeps answering. Every answer is
// checked against the OpenAPI document.
func TestStoreFailuresAnswer503OnlyWhenUnreachable(t *testing.T) {
	fs := &failStore{}
	n := startWith(t, servertest.Options{WrapStore: func(s bus.Store) bus.Store { fs.Store = s; return fs }})
	ws := n.workspace(t, opKey, "failing store")
	p := n.warmPair(t, ws)
	cons, ptok, ctok, handle := p.cons, p.ptok, p.ctok, p.handle
	// A second pair whose state the token checks never read while the
	// store worked: their requests fail at the token check itself.
	prod2 := n.connection(t, ws, "producer", nil)
	cons2 := n.connection(t, ws, "consumer", nil)
	ps2, cs2 := n.issue(t, ws, prod2.ID), n.issue(t, ws, cons2.ID)
	ptok2, ctok2 := n.token(t, prod2.ID, ps2.ClientSecret), n.token(t, cons2.ID, cs2.ClientSecret)
	n.do(t, "GET", skillsPath(ws, cons.ID), ctok, nil).Must(t, 200)

	settle := map[string]any{"receipt_handles": []string{handle}}
	batch := map[string]any{"messages": []any{servertest.Envelope("m2", "story-2", nil)}}
	type route struct {
		name              string
		method, path, key string
		body              any
		rule              string // the 503's rule
		rateLimited       bool   // the answer carries the RateLimit headers
	}
	routes := []route{
		{"publish", "POST", publishPath(ws), ptok, servertest.Envelope("m3", "story-3", nil), bus.RuleStoreUnavailable, true},
		{"batch publish", "POST", publishPath(ws) + "/batch", ptok, batch, bus.RuleStoreUnavailable, true},
		{"receive", "GET", pullPath(ws, cons.ID), ctok, nil, bus.RuleQueueUnavailable, true},
		{"ack", "POST", "/v1/tenants/" + ws + "/consumers/" + cons.ID + "/ack", ctok, settle, bus.RuleQueueUnavailable, true},
		{"nack", "POST", "/v1/tenants/" + ws + "/consumers/" + cons.ID + "/nack", ctok, settle, bus.RuleQueueUnavailable, true},
		{"skills", "GET", skillsPath(ws, cons.ID), ctok, nil, bus.RuleSkillsUnavailable, true},
		// The token check cannot read the connection: no allowance was
		// taken, so no RateLimit headers; the route's rule all the same.
		{"publish, token check", "POST", publishPath(ws), ptok2, servertest.Envelope("m4", "story-4", nil), bus.RuleStoreUnavailable, false},
		{"receive, token check", "GET", pullPath(ws, cons2.ID), ctok2, nil, bus.RuleQueueUnavailable, false},
		{"skills, token check", "GET", skillsPath(ws, cons2.ID), ctok2, nil, bus.RuleSkillsUnavailable, false},
		{"manage read", "GET", "/v1/manage/workspaces/" + ws, opKey, nil, bus.RuleStoreUnavailable, false},
		{"manage list", "GET", connsPath(ws), opKey, nil, bus.RuleStoreUnavailable, false},
		{"manage queue read", "GET", connPath(ws, cons.ID) + "/dead-letters", opKey, nil, bus.RuleStoreUnavailable, false},
		{"manage write", "POST", "/v1/manage/workspaces", opKey, map[string]any{"name": "new"}, bus.RuleStoreUnavailable, false},
		{"manage update", "PATCH", connPath(ws, cons.ID), opKey, map[string]any{"name": "renamed"}, bus.RuleStoreUnavailable, false},
		{"readyz", "GET", "/readyz", "", nil, bus.RuleStoreUnavailable, false},
	}
	for _, mode := range []struct {
		name   string
		err    error
		status int
	}{
		{"unreachable", fmt.Errorf("dial tcp: connection refused: %w", bus.ErrUnavailable), 503},
		{"fault", errors.New("unexpected state in the store"), 500},
	} {
		t.Run(mode.name, func(t *testing.T) {
			fs.set(mode.err)
			defer fs.set(nil)
			for _, rt := range routes {
				r := n.do(t, rt.method, rt.path, rt.key, rt.body)
				rule := rt.rule
				if mode.status == 500 {
					rule = bus.RuleInternal
				}
				if r.Status != mode.status || r.Rule() != rule {
					t.Errorf("%s: %d %s, want %d %s", rt.name, r.Status, r.Body, mode.status, rule)
					continue
				}
				wantRetry := ""
				switch {
				case mode.status == 500:
				case rule == bus.RuleSkillsUnavailable:
					wantRetry = "5"
				default:
					wantRetry = "1"
				}
				if ra := r.Header.Get("Retry-After"); ra != wantRetry {
					t.Errorf("%s: Retry-After %q, want %q", rt.name, ra, wantRetry)
				}
				if has := r.Header.Get("RateLimit-Limit") != ""; mode.status == 503 && has != rt.rateLimited {
					t.Errorf("%s: RateLimit headers %v, want %v", rt.name, has, rt.rateLimited)
				}
			}

			// The token endpoint answers in RFC 6749's terms.
			r := n.tokenResp(t, cons.ID, p.consSecret)
			if mode.status == 503 {
				wantOAuthError(t, r, 503, "temporarily_unavailable")
				if r.Header.Get("Retry-After") == "" {
					t.Error("token endpoint: 503 without Retry-After")
				}
			} else {
				wantOAuthError(t, r, 500, "server_error")
				if ra := r.Header.Get("Retry-After"); ra != "" {
					t.Errorf("token endpoint: 500 with Retry-After %q", ra)
				}
			}

			// JWKS needs no store: the keys are in memory.
			if r := n.do(t, "GET", "/v1/oauth/jwks", "", nil); r.Status != 200 {
				t.Errorf("jwks: %d %s, want 200", r.Status, r.Body)
			}
		})
	}

	// The store works again: so does every route.
	n.do(t, "GET", "/readyz", "", nil).Must(t, 200)
	n.publish(t, ws, ptok2, "m5").Must(t, 202)
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}}, cons.ID, p.consSecret).Must(t, 200).Decode(t, &tr)
	if !strings.HasPrefix(tr.AccessToken, "ey") {
		t.Fatalf("token after recovery is not a JWT (%d bytes)", len(tr.AccessToken))
	}
}

// TestFailedFsyncMakesTheNodeUnavailable: when an fsync of the embedded
// store's write-ahead log fails (here the WAL file is moved away, so the
// syncer cannot open it), the write whose commit it covered answers 503
// store.unavailable, and so does every later write even once the file is
// back, /readyz answers 503, reads go on, and the log tells to restart.
func TestFailedFsyncMakesTheNodeUnavailable(t *testing.T) {
	n := start(t)
	ws := n.workspace(t, opKey, "fsync")
	prod := n.connection(t, ws, "producer", nil)
	cons := n.connection(t, ws, "consumer", map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}})
	ptok := n.token(t, prod.ID, n.issue(t, ws, prod.ID).ClientSecret)
	ctok := n.token(t, cons.ID, n.issue(t, ws, cons.ID).ClientSecret)
	n.publish(t, ws, ptok, "m1").Must(t, 202)
	n.pull(t, ws, cons.ID, ctok).Must(t, 200)
	n.do(t, "GET", "/readyz", "", nil).Must(t, 200)

	wal := filepath.Join(n.dir, "sombus.db-wal")
	moved := filepath.Join(n.dir, "moved-wal")
	if err := os.Rename(wal, moved); err != nil {
		t.Fatal(err)
	}
	r := n.publish(t, ws, ptok, "m2")
	if err := os.Rename(moved, wal); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, r, 503, bus.RuleStoreUnavailable)

	// The file is back; the store still refuses every write.
	wantRefusal(t, n.publish(t, ws, ptok, "m3"), 503, bus.RuleStoreUnavailable)
	wantRefusal(t, n.pull(t, ws, cons.ID, ctok), 503, bus.RuleQueueUnavailable)
	wantRefusal(t, n.do(t, "POST", "/v1/manage/workspaces", opKey, map[string]any{"name": "later"}), 503, bus.RuleStoreUnavailable)
	r = n.do(t, "GET", "/readyz", "", nil)
	wantRefusal(t, r, 503, bus.RuleStoreUnavailable)
	if r.Header.Get("Retry-After") == "" {
		t.Error("/readyz 503 without Retry-After")
	}
	// Reads go on.
	n.do(t, "GET", "/v1/manage/workspaces/"+ws, opKey, nil).Must(t, 200)
	n.do(t, "GET", skillsPath(ws, cons.ID), ctok, nil).Must(t, 200)
	if c := strings.Count(n.logs.String(), "RESTART THE PROCESS"); c != 1 {
		t.Fatalf("the failed fsync is logged %d times, want once", c)
	}
}
