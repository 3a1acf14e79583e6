package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sombus/sombus/internal/openapi"
	"github.com/sombus/sombus/internal/openapi/internal/spec"
	"github.com/sombus/sombus/internal/openapi/openapitest"
)

// apiRoutes is every route of the HTTP contract (and of the pull API
// specification), plus sombus's usage route. The document must hold exactly
// these.
var apiRoutes = []string{
	// 2. Token service
	"POST /v1/oauth/token",
	"GET /v1/oauth/jwks",
	// 3. Publishing
	"POST /v1/tenants/{t}/messages",
	"POST /v1/tenants/{t}/messages/batch",
	// 5. Pulling (and the pull API specification)
	"GET /v1/tenants/{t}/consumers/{c}/messages",
	"POST /v1/tenants/{t}/consumers/{c}/ack",
	"POST /v1/tenants/{t}/consumers/{c}/nack",
	"GET /v1/tenants/{t}/consumers/{c}/skills",
	// 6. Management
	"GET /v1/manage/whoami",
	"POST /v1/manage/users",
	"POST /v1/manage/users/{u}/keys",
	// Not in the contract's list: the portal's password (decision 29).
	"PUT /v1/manage/users/{u}/password",
	"POST /v1/manage/workspaces",
	"GET /v1/manage/workspaces",
	"GET /v1/manage/workspaces/{t}",
	"PUT /v1/manage/workspaces/{t}/members/{u}",
	"DELETE /v1/manage/workspaces/{t}/members/{u}",
	"POST /v1/manage/workspaces/{t}/connections",
	"GET /v1/manage/workspaces/{t}/connections",
	"GET /v1/manage/workspaces/{t}/connections/{c}",
	"PATCH /v1/manage/workspaces/{t}/connections/{c}",
	"DELETE /v1/manage/workspaces/{t}/connections/{c}",
	"POST /v1/manage/workspaces/{t}/connections/{c}/secret",
	"POST /v1/manage/workspaces/{t}/connections/{c}/secret/rotate",
	"POST /v1/manage/workspaces/{t}/connections/{c}/secret/stop-previous",
	"POST /v1/manage/workspaces/{t}/connections/{c}/secret/revoke",
	"POST /v1/manage/workspaces/{t}/connections/{c}/revoke",
	"POST /v1/manage/workspaces/{t}/connections/{c}/restore",
	"GET /v1/manage/workspaces/{t}/connections/{c}/dead-letters",
	"POST /v1/manage/workspaces/{t}/connections/{c}/dead-letters/redrive",
	"POST /v1/manage/workspaces/{t}/connections/{c}/purge",
	"PUT /v1/manage/workspaces/{t}/connections/{c}/skills",
	"GET /v1/manage/workspaces/{t}/connections/{c}/skills",
	"GET /v1/manage/workspaces/{t}/connections/{c}/usage",
	"GET /v1/manage/workspaces/{t}/audit",
	"GET /v1/manage/audit",
	// 8. Operations, and 1. the document itself
	"GET /healthz",
	"GET /readyz",
	"GET /metrics",
	"GET /v1/openapi.json",
}

func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	d, err := openapitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDocumentIsGenerated(t *testing.T) {
	want, err := spec.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(openapi.Document, want) {
		t.Fatal("openapi.json differs from the builder in internal/spec: run `go generate ./internal/openapi`")
	}
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, openapi.Document) {
		t.Fatal("embedded document differs from openapi.json")
	}
}

func TestDocumentValidates(t *testing.T) {
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(openapi.Document)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := d.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", d.OpenAPI)
	}
	var compact, pretty bytes.Buffer
	if err := json.Compact(&compact, openapi.Document); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&pretty, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	if pretty.String() != strings.TrimSuffix(string(openapi.Document), "\n") {
		t.Error("openapi.json is not pretty-printed with two-space indents")
	}
}

func TestEveryRouteIsDocumented(t *testing.T) {
	ops, err := openapitest.Operations()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, op := range ops {
		have[op.String()] = true
	}
	want := map[string]bool{}
	for _, r := range apiRoutes {
		want[r] = true
		if !have[r] {
			t.Errorf("route %s is missing from the document", r)
		}
	}
	for r := range have {
		if !want[r] {
			t.Errorf("the document has %s, which is not in the HTTP contract's list", r)
		}
	}
}

// TestShape checks the rules every operation follows.
func TestShape(t *testing.T) {
	d := loadDoc(t)
	for path, item := range d.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", name)
			}
			workspace := strings.HasPrefix(path, "/v1/tenants/")
			token := path == "/v1/oauth/token"
			for code, rr := range op.Responses.Map() {
				r := rr.Value
				isError := code[0] == '4' || code[0] == '5'
				if isError {
					mt := r.Content.Get("application/json")
					if mt == nil || mt.Schema == nil {
						t.Errorf("%s %s: refusal without a JSON body", name, code)
						continue
					}
					wantRef := "#/components/schemas/Refusal"
					if token {
						wantRef = "#/components/schemas/OAuthError"
					}
					if !refersTo(mt.Schema, wantRef) {
						t.Errorf("%s %s: body is not %s", name, code, wantRef)
					}
				}
				if code == "429" || code == "503" {
					if h := r.Headers["Retry-After"]; h == nil || !h.Value.Required {
						t.Errorf("%s %s: no required Retry-After", name, code)
					}
				}
				if workspace && code != "401" && code != "500" {
					for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
						// A 503 lists them, but cannot always carry them:
						// not when the token's connection could not be
						// read (decision 27).
						if hr := r.Headers[h]; hr == nil || (!hr.Value.Required && code != "503") {
							t.Errorf("%s %s: no required %s", name, code, h)
						}
					}
				}
			}
			if op.RequestBody != nil && !token {
				for ct, mt := range op.RequestBody.Value.Content {
					if mt.Schema.Ref == "#/components/schemas/Envelope" {
						continue // the SOM document keeps unknown members (decision 19)
					}
					s := mt.Schema.Value
					if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
						if s.MaxProps == nil || *s.MaxProps != 0 {
							t.Errorf("%s: %s request body allows unknown fields", name, ct)
						}
					}
				}
			}
		}
	}
}

func refersTo(s *openapi3.SchemaRef, ref string) bool {
	if s.Ref == ref {
		return true
	}
	for _, sub := range s.Value.AllOf {
		if sub.Ref == ref {
			return true
		}
	}
	return false
}

func TestHandler(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/v1/openapi.json", nil)
	rec := httptest.NewRecorder()
	openapi.Handler("").ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if !bytes.Equal(rec.Body.Bytes(), openapi.Document) {
		t.Error("body is not the document")
	}
	openapitest.ValidateRecorder(t, req, rec)

	req2 := httptest.NewRequest(http.MethodGet, "/v1/openapi.json", nil)
	req2.Header.Set("If-None-Match", rec.Header().Get("ETag"))
	rec2 := httptest.NewRecorder()
	openapi.Handler("").ServeHTTP(rec2, req2)
	if rec2.Code != http.StatusNotModified {
		t.Errorf("If-None-Match: status %d, want 304", rec2.Code)
	}
}

// TestWithServer: the served document names the node's public URL as its
// one server, stays valid OpenAPI and pretty-printed, and changes nothing
// else.
func TestWithServer(t *testing.T) {
	const url = "https://bus.example.com/a&b"
	doc := openapi.WithServer(url)
	d, err := openapi3.NewLoader().LoadFromData(doc)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := d.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if len(d.Servers) != 1 || d.Servers[0].URL != url {
		t.Fatalf("servers = %+v, want one with url %s", d.Servers, url)
	}
	var compact, pretty bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&pretty, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSuffix(string(doc), "\n") != strings.ReplaceAll(pretty.String(), `\u0026`, "&") {
		t.Errorf("served document is not pretty-printed:\n%.400s", doc)
	}
	var with, without map[string]any
	if json.Unmarshal(doc, &with) != nil || json.Unmarshal(openapi.Document, &without) != nil {
		t.Fatal("not JSON")
	}
	delete(with, "servers")
	if a, b := fmt.Sprint(with), fmt.Sprint(without); a != b {
		t.Error("WithServer changed more than the servers")
	}
	if !bytes.Equal(openapi.WithServer(""), openapi.Document) {
		t.Error(`WithServer("") is not the document`)
	}
}

func TestOperationsSorted(t *testing.T) {
	ops, err := openapitest.Operations()
	if err != nil {
		t.Fatal(err)
	}
	if !sort.SliceIsSorted(ops, func(i, j int) bool {
		return ops[i].Path < ops[j].Path || ops[i].Path == ops[j].Path && ops[i].Method < ops[j].Method
	}) {
		t.Error("Operations is not sorted")
	}
}
