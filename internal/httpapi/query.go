package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sombus/sombus/internal/bus"
)

// queryParams reads the query string of r, the one place every route reads
// its query parameters. Each parameter must be one of allowed and be given
// at most once (decision 26): a repeat is refused, whatever its value, so
// that no route has to choose which of two values wins. A pair whose name
// or value is not a valid percent-encoding is refused too, rather than
// dropped. Refusals carry rule, the route's bad-request rule, and name the
// parameter.
func queryParams(r *http.Request, rule string, allowed ...string) (map[string]string, error) {
	params := map[string]string{}
	rest := r.URL.RawQuery
	for rest != "" {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		if pair == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			return nil, bus.Errorf(rule, "The query parameter name %q is not valid percent-encoding.", rawKey)
		}
		if !slices.Contains(allowed, key) {
			return nil, bus.Errorf(rule, "Unknown query parameter %q; %s", key, parameterList(allowed))
		}
		if _, seen := params[key]; seen {
			return nil, bus.Errorf(rule, "%s is given more than once; give each query parameter at most once.", key)
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, bus.Errorf(rule, "%s is not valid percent-encoding.", key)
		}
		params[key] = value
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
