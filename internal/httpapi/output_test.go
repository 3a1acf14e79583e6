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

// TestOpenAPIServers: the served document names the server by its public
// URL, so that tools built from it call the right address.
func TestOpenAPIServers(t *testing.T) {
	t.Parallel()
	const public = "https://bus.example.com/base"
	n := startWith(t, servertest.Options{PublicURL: public + "/"})
	var doc struct {
		OpenAPI string `json:"openapi"`
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
		Paths map[string]any `json:"paths"`
	}
	r := n.do(t, "GET", "/v1/openapi.json", "", nil).Must(t, 200)
	r.Decode(t, &doc)
	if len(doc.Servers) != 1 || doc.Servers[0].URL != public {
		t.Fatalf("servers = %+v, want [{url: %s}]", doc.Servers, public)
	}
	if doc.OpenAPI != "3.1.0" || doc.Paths["/v1/manage/whoami"] == nil {
		t.Fatalf("document damaged: %.300s", r.Body)
	}
	// A node without --public-url names its own address.
	n2 := start(t)
	n2.do(t, "GET", "/v1/openapi.json", "", nil).Must(t, 200).Decode(t, &doc)
	if len(doc.Servers) != 1 || doc.Servers[0].URL != n2.URL {
		t.Fatalf("servers = %+v, want [{url: %s}]", doc.Servers, n2.URL)
	}
	// The ETag follows the document served, so two nodes with different
	// public URLs do not share one.
	if r.Header.Get("ETag") == "" || r.Header.Get("ETag") == n2.do(t, "GET", "/v1/openapi.json", "", nil).Header.Get("ETag") {
		t.Errorf("ETag %q does not depend on the servers", r.Header.Get("ETag"))
	}
}
