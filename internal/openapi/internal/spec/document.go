package spec

// The document: info (with the decisions the HTTP contract leaves open), paths and
// components.

func document() obj {
	return o(
		"openapi", "3.1.0",
		"info", o(
			"title", "sombus HTTP API",
			"version", "1.0.0",
			"summary", "Self-hostable multi-tenant message bus: token service, publishing, HTTPS pull, management, operations.",
			"description", infoDescription,
			"license", o("name", "Proprietary", "identifier", "LicenseRef-sombus"),
		),
		"tags", []obj{
			o("name", "token", "description", "The OAuth 2.0 client-credentials token service and its public keys."),
			o("name", "publish", "description", "Producers publish envelopes (workspace routes, producer token)."),
			o("name", "pull", "description", "Consumers receive, acknowledge and release messages (workspace routes, consumer token)."),
			o("name", "manage", "description", "The workspace (management) API, authenticated with a user's API key."),
			o("name", "operations", "description", "Health, readiness, metrics and this document."),
		},
		"paths", paths(),
		"components", o(
			"schemas", schemas(),
			"responses", componentResponses(),
			"parameters", parameters(),
			"headers", headers(),
			"securitySchemes", o(
				"workspaceToken", o("type", "http", "scheme", "bearer", "bearerFormat", "JWT",
					"description", "An access token from `POST /v1/oauth/token`: producer tokens for publishing, consumer tokens for pulling."),
				"apiKey", o("type", "http", "scheme", "bearer", "bearerFormat", "API key",
					"description", "`Authorization: Bearer <api key>`; API keys belong to users."),
				"clientBasic", o("type", "http", "scheme", "basic",
					"description", "HTTP Basic with the connection's `client_id` and `client_secret`."),
			),
		),
	)
}

var (
	secWorkspace = []obj{o("workspaceToken", []string{})}
	secManage    = []obj{o("apiKey", []string{})}
	secNone      = []obj{}
)

func op(opID, tag, summary, d string, security []obj, params []obj, body obj, responses obj, ext ...any) obj {
	var p any
	if len(params) > 0 {
		p = params
	}
	x := o(
		"operationId", opID,
		"tags", []string{tag},
		"summary", summary,
		"description", desc(d),
		"security", security,
		"parameters", p,
		"requestBody", body,
		"responses", responses,
	)
	return x.with(ext...)
}

func jsonBody(schema string, required bool, d string) obj {
	return o("description", desc(d), "required", required, "content", jsonContent(ref(schema)))
}

// ---- workspace routes ----

var (
	ws401 = refusal("The token is missing, malformed, badly signed, expired, for another environment, or carries a "+
		"`credential_version` below the connection's current one. No RateLimit headers: no connection is identified.",
		nil, "producer.unauthenticated")
	ws429 = refusal("Over the connection's per-second allowance (`rate.limited`) or its daily quota (`quota.exceeded`), "+
		"or a bus-wide limit.", rlRetry, "rate.limited", "quota.exceeded")
	internalErr = o("$ref", "#/components/responses/InternalError")
)

func wsForbidden(d string, rules ...string) obj { return refusal(d, rl, rules...) }

func pullForbidden() obj {
	return wsForbidden("`producer.not_registered`: valid token, but not an active consumer connection's (a producer's token, "+
		"or a revoked or removed connection); `tenant.mismatch`: `{t}` is not the token's workspace; `consumer.not_owner`: "+
		"`{c}` is not the token's connection.", "producer.not_registered", "tenant.mismatch", "consumer.not_owner")
}

func publishForbidden() obj {
	return wsForbidden("`producer.not_registered`: valid token, but not an active producer connection's (a consumer's token, "+
		"or a revoked or removed connection); `tenant.mismatch`: `{t}` is not the token's workspace.",
		"producer.not_registered", "tenant.mismatch")
}

func pullUnavailable() obj {
	return refusal("The queue is still being set up or could not be reached: the store is out of reach or cannot take writes, "+
		"at whichever step (the token's connection, the allowance, the queue). Any other failure is 500 `internal.error` "+
		"(decision 27).", rlMaybeRetry, "consumer.queue_unavailable")
}

// wsStoreUnavailable is the 503 of the publishing routes.
func wsStoreUnavailable() obj {
	return refusal("Decision 27: the store is out of reach or cannot take writes, at whichever step (the token's connection, the "+
		"allowance, the message). Any other failure is 500 `internal.error`.", rlMaybeRetry, "store.unavailable")
}

var pullParams = []obj{paramRef("tenant"), paramRef("consumer")}

func pullBadRequest(d string) obj {
	return refusal(d+" Decision: the pull routes refuse any query parameter they do not define, and a query string that is not URL encoding.", rl, "pull.bad_request")
}

// ---- management ----

type mopt struct {
	forbid   bool   // the role can be too weak (roles above viewer)
	notFound string // what can be missing
	conflict string // when 409
	body     bool   // takes a body (413 applies)
}

func respRef(name string) obj { return o("$ref", "#/components/responses/"+name) }

// sharedResponses are the refusals many operations answer alike.
func sharedResponses() obj {
	return o(
		"ManageBadRequest", refusal("A malformed body, a bad value, or an unknown field or query parameter (decision: management "+
			"routes refuse unknown query parameters).", nil, "manage.bad_request"),
		"ManageUnauthenticated", refusal("Missing or unknown API key.", nil, "manage.unauthenticated"),
		"ManageForbidden", refusal("The caller's role in the workspace is below the route's (`x-sombus-role`), or the route "+
			"needs an operator.", nil, "manage.forbidden"),
		"ManageTooLarge", refusal("The body is over 1 MiB.", nil, "manage.bad_request"),
		"StoreUnavailable", refusal("Decision 27: the store is out of reach or cannot take writes right now. Any other failure "+
			"is 500 `internal.error`.", retryOnly, "store.unavailable"),
		"WorkspaceUnauthenticated", ws401,
		"WorkspaceRateLimited", ws429,
	)
}

func mop(opID, summary, role, d string, params []obj, body obj, okCode int, ok obj, m mopt) obj {
	r := o(status(okCode), ok,
		"400", respRef("ManageBadRequest"),
		"401", respRef("ManageUnauthenticated"),
	)
	if m.forbid {
		r = r.with("403", respRef("ManageForbidden"))
	}
	if m.notFound != "" {
		r = r.with("404", refusal(m.notFound, nil, "manage.not_found"))
	}
	if m.conflict != "" {
		r = r.with("409", refusal(m.conflict, nil, "manage.conflict"))
	}
	if m.body {
		r = r.with("413", respRef("ManageTooLarge"))
	}
	r = r.with(
		"500", internalErr,
		"503", respRef("StoreUnavailable"),
	)
	return op(opID, "manage", summary, "Role: "+role+". "+d, secManage, params, body, r, "x-sombus-role", role)
}

const (
	wsNotFound   = "Decision: the workspace does not exist or the caller has no role in it (its existence is not revealed)."
	connNotFound = "Decision: the workspace or connection does not exist, or the caller has no role in the workspace."
	// queueNotFound: the queue sub-resources of a producer do not exist.
	queueNotFound = connNotFound + " Decision: also when the connection is a producer, which has no queue."
)

func emptyBody() obj {
	return o("required", false, "description", "Decision: no body, or `{}`.", "content", jsonContent(ref("EmptyRequest")))
}

func connResp(d string) obj { return resp(d, ref("Connection"), nil) }

func paths() obj {
	tc := []obj{paramRef("tenant"), paramRef("connection")}
	const C = "/v1/manage/workspaces/{t}/connections/{c}"
	return o(
		// ---- token service ----
		"/v1/oauth/token", o("post", op("createToken", "token", "Get an access token",
			"Client-credentials grant (RFC 6749 §4.4). The form body and the answers follow RFC 6749, not the bus's refusal body.",
			[]obj{o("clientBasic", []string{}), o()}, nil,
			o("required", true, "content", o("application/x-www-form-urlencoded", o("schema", ref("TokenRequest")))),
			o(
				"200", o("description", "The access token.", "headers", o("Cache-Control", hdr("Cache-Control")),
					"content", jsonContent(ref("TokenResponse"))),
				"400", resp("`invalid_request` (a missing or repeated parameter, credentials sent twice) or `unsupported_grant_type`.",
					oauthErr("invalid_request", "unsupported_grant_type"), nil),
				"401", resp("`invalid_client`: unknown client, wrong, revoked or expired secret, or a revoked connection.",
					oauthErr("invalid_client"), o("WWW-Authenticate", hdr("WWW-Authenticate"))),
				"413", resp("Decision: a body over 64 KiB is `invalid_request`.", oauthErr("invalid_request"), nil),
				"429", resp("`slow_down`: after 20 failed authentications within a minute for one client id, or 100 from one remote "+
					"address, until the minute has passed. Decision 20: the minute slides (the last 60 seconds), and Retry-After is the time until "+
					"the oldest of the latest 20 (or 100) failures is a minute old.", oauthErr("slow_down"), retryOnly),
				"500", resp("`server_error`: any fault of the server other than the store being out of reach (decision 27).",
					oauthErr("server_error"), nil),
				"503", resp("Decision 27: `temporarily_unavailable` when the store is out of reach (the client or the failure "+
					"counts cannot be read).", oauthErr("temporarily_unavailable"), retryOnly),
			),
		)),
		"/v1/oauth/jwks", o("get", op("getJWKS", "token", "Token signing keys",
			"The public keys that verify access tokens (RFC 7517). Decision 27: served from the keys the node holds in memory "+
				"(read from the store at start and every minute), so it keeps answering while the store is out of reach.",
			secNone, nil, nil,
			o(
				"200", resp("The key set.", ref("JWKS"), nil),
				"500", internalErr,
			),
		)),

		// ---- publishing ----
		"/v1/tenants/{t}/messages", o("post", op("publish", "publish", "Publish an envelope",
			"Places the message once in every active consumer queue with a matching subscription. The body is at most 256 KiB.",
			secWorkspace, []obj{paramRef("tenant")}, jsonBody("Envelope", true, ""),
			o(
				"202", resp("Accepted (or a duplicate accepted again without being delivered again).", ref("PublishAccepted"), rl),
				"400", refusal("Every failed check of the envelope, one violation each; or a query parameter was given (`envelope.malformed`, decision 18).", rl,
					"envelope.malformed", "envelope.som_version", "envelope.message_id", "envelope.message_type",
					"envelope.correlation_id", "envelope.payload"),
				"401", respRef("WorkspaceUnauthenticated"),
				"403", publishForbidden(),
				"413", refusal("The body is over 256 KiB.", rl, "envelope.too_large"),
				"429", respRef("WorkspaceRateLimited"),
				"500", internalErr,
				"503", wsStoreUnavailable(),
			),
		)),
		"/v1/tenants/{t}/messages/batch", o("post", op("publishBatch", "publish", "Publish 1 to 100 envelopes",
			"Each envelope is checked and accepted on its own, in array order; the answer is 200 even when some are refused.",
			secWorkspace, []obj{paramRef("tenant")}, jsonBody("BatchPublishRequest", true, ""),
			o(
				"200", resp("One result per envelope, in order.", ref("BatchPublishResponse"), rl),
				"400", refusal("Decision: the body is not an object with a `messages` array of 1 to 100 items, or a query parameter was given (decision 18).", rl, "envelope.malformed"),
				"401", respRef("WorkspaceUnauthenticated"),
				"403", publishForbidden(),
				"413", refusal("The body is over 1 MiB.", rl, "envelope.too_large"),
				"429", respRef("WorkspaceRateLimited"),
				"500", internalErr,
				"503", wsStoreUnavailable(),
			),
		)),

		// ---- pull ----
		"/v1/tenants/{t}/consumers/{c}/messages", o("get", op("receive", "pull", "Receive messages",
			"Long poll: answers as soon as at least one message is ready (it does not wait to fill `max`), and with "+
				"`\"messages\": []` when `wait` runs out. A story is handled by one receiver at a time, in order. "+
				"Every query parameter is checked (integers only); an unknown parameter or a bad value is 400 `pull.bad_request` naming it.",
			secWorkspace, append(append([]obj{}, pullParams...),
				param("max", "query", false, integer(1, 10, "").with("default", 10), "At most this many messages."),
				param("wait", "query", false, integer(0, 20, "").with("default", 20),
					"Seconds to wait for a message when none is ready; 0 answers at once."),
				param("visibility", "query", false, integer(0, 43200, "").with("default", 60),
					"Seconds the received messages stay hidden from other receives."),
				param("attempt", "query", false, pattern(noSpaces, ""),
					"A receive attempt id: 1 to 128 characters from `!` to `~`. Kept five minutes from a receive that returned "+
						"messages; a retry with the same id returns those of its messages still in flight, with the same receipt "+
						"handles and `receive_count`, restarting their visibility, and takes no new messages."),
			), nil,
			o(
				"200", resp("The messages; none when none arrived within `wait`.", ref("ReceiveResponse"), rl),
				"400", pullBadRequest("A query parameter is unknown or out of range."),
				"401", respRef("WorkspaceUnauthenticated"),
				"403", pullForbidden(),
				"429", respRef("WorkspaceRateLimited"),
				"500", internalErr,
				"503", pullUnavailable(),
			),
		)),
		"/v1/tenants/{t}/consumers/{c}/ack", o("post", op("ack", "pull", "Acknowledge messages",
			"Removes the messages. A handle fails with `ReceiptHandleIsInvalid` when it is malformed, not from this queue, or from "+
				"a delivery that is no longer the message's latest. The latest delivery's handle still acknowledges after its "+
				"visibility ran out unless the message was received again, and acknowledging again succeeds again. Body at most 64 KiB.",
			secWorkspace, pullParams, jsonBody("AckRequest", true, ""),
			o(
				"200", resp("Per-handle outcomes.", ref("AckResponse"), rl),
				"400", pullBadRequest("A query parameter was given, or the body is malformed, has an unknown field, or an empty, longer than 10 or repeated handle list."),
				"401", respRef("WorkspaceUnauthenticated"),
				"403", pullForbidden(),
				"413", refusal("The body is over 64 KiB.", rl, "pull.bad_request"),
				"429", respRef("WorkspaceRateLimited"),
				"500", internalErr,
				"503", pullUnavailable(),
			),
		)),
		"/v1/tenants/{t}/consumers/{c}/nack", o("post", op("nack", "pull", "Release messages",
			"Makes the messages visible again, at once or after `delay_seconds`. A release does not count as a delivery; the "+
				"next receive does. A message released after its last allowed delivery moves to the dead-letter queue. Body at most 64 KiB.",
			secWorkspace, pullParams, jsonBody("NackRequest", true, ""),
			o(
				"200", resp("Per-handle outcomes.", ref("NackResponse"), rl),
				"400", pullBadRequest("A query parameter was given, or the body is malformed, has an unknown field, a bad `delay_seconds`, or an empty, longer than 10 or repeated handle list."),
				"401", respRef("WorkspaceUnauthenticated"),
				"403", pullForbidden(),
				"413", refusal("The body is over 64 KiB.", rl, "pull.bad_request"),
				"429", respRef("WorkspaceRateLimited"),
				"500", internalErr,
				"503", pullUnavailable(),
			),
		)),
		"/v1/tenants/{t}/consumers/{c}/skills", o("get", op("getConsumerSkills", "pull", "A skill executor's registrations",
			"The configured skill instances the workspace bound to this consumer connection.", secWorkspace, pullParams, nil,
			o(
				"200", resp("The registrations.", ref("Skills"), rl),
				"400", pullBadRequest("A query parameter was given."),
				"401", respRef("WorkspaceUnauthenticated"),
				"403", pullForbidden(),
				"429", respRef("WorkspaceRateLimited"),
				"500", internalErr,
				"503", refusal("The registrations could not be read (the store is out of reach, at whichever step): keep what you read "+
					"last. Any other failure is 500 `internal.error` (decision 27).", rlMaybeRetry, "skills.unavailable"),
			),
		)),

		// ---- management ----
		"/v1/manage/whoami", o("get", mop("whoami", "The caller and its roles", "any", "", nil, nil,
			200, resp("The caller.", ref("Whoami"), nil), mopt{})),
		"/v1/manage/users", o("post", mop("createUser", "Create a user", "operator", "", nil, jsonBody("UserCreateRequest", true, ""),
			201, resp("The user.", ref("User"), nil),
			mopt{forbid: true, conflict: "Decision: a user with this email exists (compared case-insensitively).", body: true})),
		"/v1/manage/users/{u}/keys", o("post", mop("createAPIKey", "Issue an API key", "operator",
			"The key is shown once.", []obj{paramRef("user")}, emptyBody(),
			201, resp("The new key.", ref("APIKeyCreated"), nil),
			mopt{forbid: true, notFound: "No such user.", body: true})),
		"/v1/manage/users/{u}/password", o("put", mop("setPassword", "Set a user's portal password", "operator, or the user themselves",
			"Decision: sets the password the user signs in to the web portal with (`/portal/`); API keys are unchanged. "+
				"A password is 12 to 1024 bytes of UTF-8 with at least 12 characters and no control characters (line breaks, tabs, NUL: "+
				"the portal's sign-in form cannot send them); it is kept only as an Argon2id hash and "+
				"never written to the audit log (the entry is `user.password_set`). Setting it ends the user's portal sessions.",
			[]obj{paramRef("user")}, jsonBody("PasswordPutRequest", true, ""),
			204, o("description", "Set."),
			mopt{forbid: true, notFound: "No such user.", body: true})),
		"/v1/manage/workspaces", o(
			"get", mop("listWorkspaces", "List workspaces", "any",
				"Decision: the workspaces where the caller has a role; for an operator, every workspace.", nil, nil,
				200, resp("The workspaces.", ref("WorkspaceList"), nil), mopt{}),
			"post", mop("createWorkspace", "Create a workspace", "operator", "The creator becomes its owner.", nil,
				jsonBody("WorkspaceCreateRequest", true, ""), 201, resp("The workspace.", ref("Workspace"), nil),
				mopt{forbid: true, body: true}),
		),
		"/v1/manage/workspaces/{t}", o("get", mop("getWorkspace", "Read a workspace", "viewer",
			"Decision: operators may read any workspace.", []obj{paramRef("tenant")}, nil,
			200, resp("The workspace.", ref("Workspace"), nil), mopt{notFound: wsNotFound})),
		"/v1/manage/workspaces/{t}/members/{u}", o(
			"put", mop("setMember", "Grant or change a role", "owner", "", []obj{paramRef("tenant"), paramRef("user")},
				jsonBody("MemberPutRequest", true, ""), 200, resp("The membership.", ref("Member"), nil),
				mopt{forbid: true, notFound: wsNotFound + " Or the user does not exist.",
					conflict: "Decision: the change would leave the workspace without an owner.", body: true}),
			"delete", mop("removeMember", "Remove a role", "owner", "", []obj{paramRef("tenant"), paramRef("user")}, nil,
				204, o("description", "Removed."),
				mopt{forbid: true, notFound: wsNotFound + " Or the user has no role in it.",
					conflict: "Decision: the user is the workspace's last owner."}),
		),
		"/v1/manage/workspaces/{t}/connections", o(
			"get", mop("listConnections", "List connections", "viewer",
				"Oldest first, a page at a time. Decision: `limit` defaults to 100, the most a page holds, so a workspace of up to "+
					"100 connections is listed whole; `cursor` stays valid when the connection it follows is removed. "+
					"A `cursor` is accepted only by the listing that returned it: the same workspace and the same `kind` (or none); "+
					"one of another workspace or kind, or one made up or altered, is 400 `manage.bad_request` naming `cursor`. "+
					"Cursors returned by earlier versions of the server are refused the same way; start again from the first page.",
				[]obj{paramRef("tenant"), param("kind", "query", false, enum("", "consumer", "producer"), "Only connections of this kind."),
					param("limit", "query", false, integer(1, 100, "").with("default", 100), "Decision: page size, 1 to 100, default 100."),
					paramRef("cursor")}, nil,
				200, resp("The connections.", ref("ConnectionList"), nil), mopt{notFound: wsNotFound}),
			"post", mop("createConnection", "Create a connection", "admin",
				"Creates a `consumer` (with its queue) or a `producer` connection; no secret yet (see `/secret`).",
				[]obj{paramRef("tenant")}, jsonBody("ConnectionCreateRequest", true, ""),
				201, connResp("The connection."), mopt{forbid: true, notFound: wsNotFound, body: true}),
		),
		C, o(
			"get", mop("getConnection", "Read a connection", "viewer", "", tc, nil, 200, connResp("The connection."),
				mopt{notFound: connNotFound}),
			"patch", mop("updateConnection", "Update a connection", "admin", "", tc, jsonBody("ConnectionUpdateRequest", true, ""),
				200, connResp("The updated connection."), mopt{forbid: true, notFound: connNotFound, body: true}),
			"delete", mop("removeConnection", "Remove a connection", "admin", "Deletes its queue, dead letters and credentials.", tc, nil,
				204, o("description", "Removed."), mopt{forbid: true, notFound: connNotFound}),
		),
		C+"/secret", o("post", mop("issueSecret", "Get client secret", "developer",
			"Issues the connection's client secret, shown once. Decision: this works whatever the connection's status; a revoked "+
				"connection still gets no tokens until it is restored.", tc, emptyBody(),
			201, resp("The secret and the connection's URLs.", ref("ClientSecret"), nil),
			mopt{forbid: true, notFound: connNotFound, conflict: "A secret is active: rotate it instead.", body: true})),
		C+"/secret/rotate", o("post", mop("rotateSecret", "Rotate the client secret", "developer",
			"A new secret; the previous one still gets tokens for `overlap`. Tokens issued before the rotation stop within 30 s.",
			tc, jsonBody("RotateRequest", false, "Optional: `overlap` defaults to `24h`."),
			201, resp("The new secret and the connection's URLs.", ref("ClientSecret"), nil),
			mopt{forbid: true, notFound: connNotFound, conflict: "Decision: no secret is active (get one first).", body: true})),
		C+"/secret/stop-previous", o("post", mop("stopPreviousSecret", "End the rotation overlap now", "developer",
			"Decision: idempotent; when no previous secret is in its overlap nothing changes and the answer is the same.",
			tc, emptyBody(), 200, connResp("The connection."), mopt{forbid: true, notFound: connNotFound, body: true})),
		C+"/secret/revoke", o("post", mop("revokeSecret", "Revoke the client secret", "developer",
			"The secret (and any previous one in its overlap) stops at once and its tokens within 30 s; the connection and queue stay.",
			tc, emptyBody(), 200, connResp("The connection."),
			mopt{forbid: true, notFound: connNotFound, conflict: "Decision: no secret is active.", body: true})),
		C+"/revoke", o("post", mop("revokeConnection", "Revoke a connection", "admin",
			"No new tokens at once; pull and publish refused within 30 s (403 `producer.not_registered`). The queue is kept and "+
				"still receives messages. Decision: idempotent (revoking a revoked connection changes nothing).",
			tc, emptyBody(), 200, connResp("The connection."), mopt{forbid: true, notFound: connNotFound, body: true})),
		C+"/restore", o("post", mop("restoreConnection", "Restore a connection", "admin",
			"The same secret works again. Decision: idempotent (restoring an active connection changes nothing).",
			tc, emptyBody(), 200, connResp("The connection."), mopt{forbid: true, notFound: connNotFound, body: true})),
		C+"/dead-letters", o("get", mop("listDeadLetters", "List dead letters", "viewer",
			"Oldest first. A `cursor` is accepted only by the listing of the connection that returned it: one of another "+
				"connection (of this workspace or another), or one made up or altered, is 400 `manage.bad_request` naming `cursor`; "+
				"it stays valid when the dead letter it follows is redriven. Cursors returned by earlier versions of the server "+
				"(bare numbers) are refused the same way; start again from the first page.",
			append(append([]obj{}, tc...), paramRef("limit"), paramRef("cursor")), nil,
			200, resp("A page of dead letters.", ref("DeadLetterList"), nil), mopt{notFound: queueNotFound})),
		C+"/dead-letters/redrive", o("post", mop("redriveDeadLetters", "Redrive dead letters", "developer",
			"Moves them back to the queue, each at the end of its story, `receive_count` starting again.",
			tc, jsonBody("RedriveRequest", false, "Optional: all dead letters when left out."),
			200, resp("How many were moved.", ref("RedriveResponse"), nil),
			mopt{forbid: true, notFound: queueNotFound, body: true})),
		C+"/purge", o("post", mop("purgeQueue", "Purge the queue", "admin", "Drops every message of the queue (not the dead letters).",
			tc, emptyBody(), 200, resp("How many were dropped.", ref("PurgeResponse"), nil),
			mopt{forbid: true, notFound: queueNotFound, body: true})),
		C+"/skills", o(
			"get", mop("getSkills", "Read skill registrations", "viewer", "", tc, nil,
				200, resp("The registrations.", ref("Skills"), nil), mopt{notFound: queueNotFound}),
			"put", mop("putSkills", "Replace skill registrations", "admin", "", tc, jsonBody("SkillsPutRequest", true, ""),
				200, resp("The registrations as stored.", ref("Skills"), nil),
				mopt{forbid: true, notFound: queueNotFound, body: true}),
		),
		C+"/usage", o("get", mop("getUsage", "Quota usage", "viewer",
			"Decision: the connection's quota tier and its requests counted this UTC day (both kinds of connection).",
			tc, nil, 200, resp("The usage.", ref("Usage"), nil), mopt{notFound: connNotFound})),
		"/v1/manage/workspaces/{t}/audit", o("get", mop("listAudit", "Read the audit log", "admin", "Newest first.",
			[]obj{paramRef("tenant"), paramRef("limit"), paramRef("cursor")}, nil,
			200, resp("A page of audit entries.", ref("AuditList"), nil), mopt{forbid: true, notFound: wsNotFound})),
		"/v1/manage/audit", o("get", mop("listGlobalAudit", "Read the audit entries of users and API keys", "operator",
			"Decision: the changes that belong to no workspace (`user.create` and `key.create`; the first operator's creation has "+
				"the actor `system`), newest first, paged like a workspace's audit log. Anyone but an operator gets 403 "+
				"`manage.forbidden`.",
			[]obj{paramRef("limit"), paramRef("cursor")}, nil,
			200, resp("A page of audit entries.", ref("AuditList"), nil), mopt{forbid: true})),

		// ---- operations ----
		"/healthz", o("get", op("healthz", "operations", "Liveness", "The process is up.", secNone, nil, nil,
			o("200", resp("Up.", ref("Health"), nil), "500", internalErr))),
		"/readyz", o("get", op("readyz", "operations", "Readiness", "The store is reachable and takes writes.", secNone, nil, nil,
			o(
				"200", resp("Ready.", ref("Health"), nil),
				"500", internalErr,
				"503", refusal("Not ready (decision 27): the store cannot be reached or does not answer within 2 s, or the embedded "+
					"store stopped taking writes after a failed fsync and the process must be restarted.", retryOnly, "store.unavailable"),
			))),
		"/metrics", o("get", op("metrics", "operations", "Prometheus metrics", "Prometheus text exposition format. "+
			"Decision 28: a node started with `--metrics-listen` serves the metrics only on that address, and this path answers 404 `route.not_found`.", secNone, nil, nil,
			o("200", o("description", "The metrics.", "content", o(
				"text/plain", o("schema", o("type", "string")),
				"application/openmetrics-text", o("schema", o("type", "string")),
			)), "404", refusal("The node serves its metrics on `--metrics-listen` instead (decision 28).", nil, "route.not_found"), "500", internalErr))),
		"/v1/openapi.json", o("get", op("getOpenAPI", "operations", "This document",
			"Decision: as served, `servers` holds one server, the node's public URL (`--public-url`, by default `http://` (`https://` with `--tls-cert`) and the "+
				"listen address), from which every path here starts.", secNone, nil, nil,
			o("200", resp("The OpenAPI document.", o("type", "object", "required", []string{"openapi", "paths"}), nil), "500", internalErr))),
	)
}

func oauthErr(codes ...string) obj {
	return o("allOf", []obj{ref("OAuthError"), o("properties", o("error", o("enum", codes)))})
}
