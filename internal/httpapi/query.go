package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sombus/sombus/internal/bus"
)

// queryParams reads the query string of r, the one place every route reads
// its query parameters (see parseQuery).
func queryParams(r *http.Request, rule string, allowed ...string) (map[string]string, error) {
	return parseQuery(r.URL.RawQuery, rule, allowed...)
}

// refuseQuery refuses every query parameter, with rule (the route's
// bad-request rule), on a route that defines none: publishing, ack and
// nack, the consumer's skills, and the management routes without
// parameters. A client that adds one expects it to do something; the
// refusal names it instead of answering as if it had been read.
func refuseQuery(r *http.Request, rule string) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	_, err := parseQuery(r.URL.RawQuery, rule)
	return err
}

// parseQuery checks a raw query string and returns its parameters. The
// whole string must be URL encoding: a bad escape ("%zz") or a ";" is
// refused rather than read without the pairs that do not decode. Each
// parameter must be one of allowed (the first unknown one in byte order is
// named, so the answer is the same every time) and be given at most once
// (decision 26): a repeat is refused, whatever its value, so that no route
// has to choose which of two values wins. Refusals carry rule, the route's
// bad-request rule, and name the parameter.
func parseQuery(raw, rule string, allowed ...string) (map[string]string, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, bus.Errorf(rule, "The query string is not URL encoding (%s); %s", strings.TrimPrefix(err.Error(), "url: "), parameterList(allowed))
	}
	unknown, found := "", false
	for k := range q {
		if !slices.Contains(allowed, k) && (!found || k < unknown) {
			unknown, found = k, true
		}
	}
	if found {
		return nil, bus.Errorf(rule, "Unknown query parameter %q; %s", unknown, parameterList(allowed))
	}
	params := make(map[string]string, len(q))
	for _, k := range allowed { // in the route's order, so the answer is the same every time
		vs, ok := q[k]
		if !ok {
			continue
		}
		if len(vs) > 1 {
			return nil, bus.Errorf(rule, "%s is given more than once; give each query parameter at most once.", k)
		}
		params[k] = vs[0]
	}
	return params, nil
}

// parameterList says which parameters a route takes.
func parameterList(allowed []string) string {
	switch len(allowed) {
	case 0:
		return "this route takes no query parameters."
	case 1:
		return "the only parameter is " + allowed[0] + "."
	}
	return "the parameters are " + strings.Join(allowed[:len(allowed)-1], ", ") + " and " + allowed[len(allowed)-1] + "."
}
