package spec

import "strconv"

// Responses, headers and parameters.

func hdr(name string) obj { return o("$ref", "#/components/headers/"+name) }

func headers() obj {
	return o(
		"Retry-After", o("required", true, "description", "Whole seconds to wait before retrying.",
			"schema", o("type", "integer", "minimum", 1)),
		"RateLimit-Limit", o("required", true, "description", rateLimitDoc+" The size of the limit that is closest to refusing: "+
			"the burst of the per-second allowance (40 on `standard`), or the daily quota once fewer requests are left of it.",
			"schema", o("type", "integer", "minimum", 0)),
		"RateLimit-Remaining", o("required", true, "description", "Whole requests left under that limit now.",
			"schema", o("type", "integer", "minimum", 0)),
		"RateLimit-Reset", o("required", true, "description", "Whole seconds until that limit is fully available again "+
			"(the allowance refilled, or the next UTC day for the daily quota); 0 when it already is.",
			"schema", o("type", "integer", "minimum", 0)),
		"WWW-Authenticate", o("required", true, "description", "`Basic realm=\"sombus\"`.", "schema", o("type", "string")),
		"Cache-Control", o("required", true, "description", "`no-store` (RFC 6749 §5.1).", "schema", o("type", "string", "pattern", "no-store")),
	)
}

const rateLimitDoc = "Decision: workspace routes (`/v1/tenants/...`) carry the RateLimit headers on every answer once the token " +
	"names a connection, that is on every answer but 401, 500 and a 503 given before the connection could be read (decision 27)."

var rl = o(
	"RateLimit-Limit", hdr("RateLimit-Limit"),
	"RateLimit-Remaining", hdr("RateLimit-Remaining"),
	"RateLimit-Reset", hdr("RateLimit-Reset"),
)

var rlRetry = rl.with("Retry-After", hdr("Retry-After"))

var retryOnly = o("Retry-After", hdr("Retry-After"))

// rlMaybeRetry are the headers of a workspace route's 503 (decision 27):
// Retry-After always; the RateLimit headers when the store failed after
// the connection's allowance was taken, not when the token's connection
// itself could not be read.
var rlMaybeRetry = o(
	"Retry-After", hdr("Retry-After"),
	"RateLimit-Limit", maybeRL("RateLimit-Limit"),
	"RateLimit-Remaining", maybeRL("RateLimit-Remaining"),
	"RateLimit-Reset", maybeRL("RateLimit-Reset"),
)

func maybeRL(name string) obj {
	return o("required", false, "description", "As `"+name+"` of the other answers, when the store failed after the connection's "+
		"allowance was taken; absent when the token's connection could not be read (decision 27).",
		"schema", o("type", "integer", "minimum", 0))
}

func jsonContent(schema obj) obj { return o("application/json", o("schema", schema)) }

func resp(d string, schema obj, hs obj) obj {
	var content any
	if schema != nil {
		content = jsonContent(schema)
	}
	var h any
	if len(hs) > 0 {
		h = hs
	}
	return o("description", d, "headers", h, "content", content)
}

// refusal is a response with the Refusal body whose violations carry one of
// rules.
func refusal(d string, hs obj, rules ...string) obj {
	schema := o("allOf", []obj{
		ref("Refusal"),
		o("properties", o("violations", o("items", o("properties", o("rule", o("enum", rules)))))),
	})
	return resp(d+" Rules: "+ruleList(rules)+".", schema, hs)
}

func ruleList(rules []string) string {
	s := ""
	for i, r := range rules {
		if i > 0 {
			s += ", "
		}
		s += "`" + r + "`"
	}
	return s
}

func componentResponses() obj {
	return sharedResponses().with(
		"RouteNotFound", refusal("No such route.", nil, "route.not_found"),
		"MethodNotAllowed", refusal("The route exists but not with this method. Decision: OpenAPI has no path-level responses, "+
			"so this answer is described here once for every path; it carries an `Allow` header listing the path's methods, and "+
			"uses the Refusal body on every path, the token endpoint's included.",
			o("Allow", o("required", true, "description", "The path's methods, such as `GET, POST`.", "schema", o("type", "string", "minLength", 1))),
			"route.method_not_allowed"),
		"InternalError", refusal("An unexpected failure: any fault of the server other than the store being out of reach "+
			"(decision 27), answered without Retry-After; nothing secret is in the message.", nil, "internal.error"),
	)
}

func param(name, in string, required bool, schema obj, d string) obj {
	return o("name", name, "in", in, "required", required, "schema", schema, "description", desc(d))
}

func pathParam(name, prefix, d string) obj { return param(name, "path", true, id(prefix, ""), d) }

func paramRef(name string) obj { return o("$ref", "#/components/parameters/"+name) }

func parameters() obj {
	return o(
		"tenant", pathParam("t", "w", "The workspace id (the token's `tenant` claim on workspace routes)."),
		"consumer", pathParam("c", "c", "The consumer connection's id (its client id)."),
		"connection", pathParam("c", "c", "A connection id."),
		"user", pathParam("u", "u", "A user id."),
		"limit", param("limit", "query", false, integer(1, 100, "").with("default", 50), "Decision: page size, 1 to 100, default 50."),
		"cursor", param("cursor", "query", false, o("type", "string", "minLength", 1),
			"The `next_cursor` of the previous page of the same listing. Decision: cursors are opaque and tied to the listing "+
				"that returned them; any other (of another workspace, connection or filter, made up or altered) is 400 "+
				"`manage.bad_request` naming `cursor`."),
	)
}

// status keys a response by its code.
func status(code int) string { return strconv.Itoa(code) }
