package httpapi_test

import (
	"bytes"
	"testing"

	"github.com/sombus/sombus/internal/server/servertest"
)

// TestAnswersWriteHTMLCharactersAsIs: ">", "<" and "&" reach people as
// they are, not as \u003e and the like, in every JSON answer, those of types
// with their own JSON form (connections, audit entries) included.
func TestAnswersWriteHTMLCharactersAsIs(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "tom & jerry <ltd>")
	subs := map[string]any{"subscriptions": []map[string]any{{"topic": "som.story.>"}}}
	c := n.connection(t, ws, "consumer", subs)
	for _, r := range []*servertest.Response{
		n.do(t, "GET", connPath(ws, c.ID), opKey, nil).Must(t, 200),
		n.do(t, "GET", connsPath(ws), opKey, nil).Must(t, 200),
		n.do(t, "PATCH", connPath(ws, c.ID), opKey, subs).Must(t, 200),
		n.do(t, "GET", auditPath(ws), opKey, nil).Must(t, 200),
	} {
		if !bytes.Contains(r.Body, []byte(`"som.story.>"`)) {
			t.Errorf("answer does not hold som.story.> as is: %s", r.Body)
		}
		if bytes.Contains(r.Body, []byte(`\u003e`)) || bytes.Contains(r.Body, []byte(`\u0026`)) || bytes.Contains(r.Body, []byte(`\u003c`)) {
			t.Errorf("answer escapes HTML characters: %s", r.Body)
		}
	}
	r := n.do(t, "GET", "/v1/manage/workspaces/"+ws, opKey, nil).Must(t, 200)
	if !bytes.Contains(r.Body, []byte(`"tom & jerry <ltd>"`)) {
		t.Errorf("workspace name not as is: %s", r.Body)
	}
}
