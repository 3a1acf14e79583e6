// Package openapitest checks real HTTP answers against sombus's OpenAPI
// document, for the tests of the packages that serve them.
//
//	rec := httptest.NewRecorder()
//	handler.ServeHTTP(rec, req)
//	openapitest.ValidateRecorder(t, req, rec)
//
// The response's status must be one the document lists for the matched
// route and method (an unknown route must answer 404 route.not_found, a
// known path with a wrong method 405 route.method_not_allowed), the headers
// the document marks required must be present and well formed, and the body
// must match the schema of that status and content type.
package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/sombus/sombus/internal/openapi"
)

var (
	loadOnce sync.Once
	doc      *openapi3.T
	router   routers.Router
	loadErr  error
)

func load() (*openapi3.T, routers.Router, error) {
	loadOnce.Do(func() {
		loader := openapi3.NewLoader()
		d, err := loader.LoadFromData(openapi.Document)
		if err != nil {
			loadErr = fmt.Errorf("openapitest: loading the document: %w", err)
			return
		}
		if err := d.Validate(loader.Context); err != nil {
			loadErr = fmt.Errorf("openapitest: the document is not valid OpenAPI: %w", err)
			return
		}
		r, err := gorillamux.NewRouter(d)
		if err != nil {
			loadErr = fmt.Errorf("openapitest: building the router: %w", err)
			return
		}
		doc, router = d, r
	})
	return doc, router, loadErr
}

// Document returns the loaded and validated document.
func Document() (*openapi3.T, error) {
	d, _, err := load()
	return d, err
}

// Operation is one documented route: a method and a path template such as
// /v1/tenants/{t}/messages.
type Operation struct {
	Method string
	Path   string
}

func (o Operation) String() string { return o.Method + " " + o.Path }

// Operations lists every documented route, sorted by path then method; a
// server's tests can use it to check that each one is served.
func Operations() ([]Operation, error) {
	d, _, err := load()
	if err != nil {
		return nil, err
	}
	var out []Operation
	for path, item := range d.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, Operation{Method: strings.ToUpper(method), Path: path})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Method < out[j].Method
	})
	return out, nil
}

// Validate checks resp (whose body, already read, is body) as the answer to
// req against the document, and fails t with a message naming the request,
// the status and what did not match.
func Validate(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	if err := Check(req, resp, body); err != nil {
		t.Errorf("%v", err)
	}
}

// ValidateRecorder is Validate for an httptest.ResponseRecorder.
func ValidateRecorder(t testing.TB, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	Validate(t, req, rec.Result(), rec.Body.Bytes())
}

// Check is Validate returning the mismatch as an error instead.
func Check(req *http.Request, resp *http.Response, body []byte) error {
	if req == nil || resp == nil {
		return errors.New("openapitest: nil request or response")
	}
	what := fmt.Sprintf("%s %s -> %d", req.Method, req.URL.RequestURI(), resp.StatusCode)
	if err := check(req, resp, body); err != nil {
		return fmt.Errorf("openapi: %s does not match the document: %w\nresponse headers: %v\nresponse body: %s",
			what, err, resp.Header, truncate(body, 2000))
	}
	return nil
}

func check(req *http.Request, resp *http.Response, body []byte) error {
	d, r, err := load()
	if err != nil {
		return err
	}
	ctx := context.Background()
	route, pathParams, err := r.FindRoute(req)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		route = synthetic(d, req, "RouteNotFound", http.StatusNotFound)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		route = synthetic(d, req, "MethodNotAllowed", http.StatusMethodNotAllowed)
	case err != nil:
		return fmt.Errorf("finding the route: %w", err)
	}

	statusRef := route.Operation.Responses.Status(resp.StatusCode)
	if statusRef == nil || statusRef.Value == nil {
		return fmt.Errorf("status %d is not documented for %s %s (documented: %s)",
			resp.StatusCode, route.Method, route.Path, documented(route.Operation))
	}
	if len(statusRef.Value.Content) == 0 && len(bytes.TrimSpace(body)) > 0 {
		return fmt.Errorf("status %d of %s %s has no body in the document, but the response has one",
			resp.StatusCode, route.Method, route.Path)
	}

	header := resp.Header
	if header == nil {
		header = http.Header{}
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    req,
			PathParams: pathParams,
			Route:      route,
		},
		Status:  resp.StatusCode,
		Header:  header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	input.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, input); err != nil {
		return err
	}
	return nil
}

// synthetic is a route whose only operation answers the component response
// name with status (or 500 internal.error), for requests no documented
// operation matches.
func synthetic(d *openapi3.T, req *http.Request, name string, status int) *routers.Route {
	responses := openapi3.NewResponses()
	responses.Delete("default")
	responses.Set(fmt.Sprint(status), d.Components.Responses[name])
	responses.Set("500", d.Components.Responses["InternalError"])
	return &routers.Route{
		Spec:      d,
		Path:      req.URL.Path,
		Method:    req.Method,
		PathItem:  &openapi3.PathItem{},
		Operation: &openapi3.Operation{Responses: responses},
	}
}

func documented(op *openapi3.Operation) string {
	var codes []string
	for code := range op.Responses.Map() {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	return strings.Join(codes, ", ")
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + fmt.Sprintf("… (%d bytes)", len(b))
}
