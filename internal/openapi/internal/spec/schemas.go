package spec

// Schema helpers and the components/schemas section.

const (
	// timePattern: RFC 3339 UTC with exactly three fraction digits, as the HTTP contract
	// fixes ("2026-09-25T10:15:02.114Z"). Go's default time encoding trims
	// trailing zeros; the pattern catches that.
	timePattern   = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$`
	printable     = `^[ -~]{1,128}$`
	noSpaces      = `^[!-~]{1,128}$`
	messageTypeRE = `^[a-z0-9_-]+(\.[a-z0-9_-]+)*$`
	topicRE       = `^som\.[a-z0-9_-]+(\.[a-z0-9_-]+)*$`
	patternRE     = `^((\*|[a-z0-9_-]+)\.)*(\*|>|[a-z0-9_-]+)$`
	semverRE      = `^1\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`
)

func ref(name string) obj { return o("$ref", "#/components/schemas/"+name) }

func desc(d string) any {
	if d == "" {
		return nil
	}
	return d
}

func str(d string) obj { return o("type", "string", "description", desc(d)) }

func strLen(min, max int, d string) obj {
	return o("type", "string", "minLength", min, "maxLength", max, "description", desc(d))
}

func pattern(re, d string) obj { return o("type", "string", "pattern", re, "description", desc(d)) }

func id(prefix, d string) obj {
	return pattern("^"+prefix+"[a-z2-7]{20,}$", d)
}

func integer(min, max any, d string) obj {
	return o("type", "integer", "minimum", min, "maximum", max, "description", desc(d))
}

func boolean(d string) obj { return o("type", "boolean", "description", desc(d)) }

func timeField(d string) obj {
	return o("type", "string", "format", "date-time", "pattern", timePattern, "description", desc(d))
}

func nullableTime(d string) obj {
	return o("type", []string{"string", "null"}, "format", "date-time", "pattern", timePattern, "description", desc(d))
}

func anyObject(d string) obj { return o("type", "object", "description", desc(d)) }

func array(items obj, d string) obj {
	return o("type", "array", "items", items, "description", desc(d))
}

func enum(d string, values ...string) obj {
	return o("type", "string", "enum", values, "description", desc(d))
}

// closed is an object schema that refuses unknown properties.
func closed(d string, required []string, props obj) obj {
	return o(
		"type", "object",
		"description", desc(d),
		"required", nonEmpty(required),
		"properties", props,
		"additionalProperties", false,
	)
}

func nonEmpty(s []string) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

func schemas() obj {
	return o(
		"Violation", closed("One failed check of a request.", []string{"rule", "message"}, o(
			"rule", str("A stable, dotted rule name such as `pull.bad_request`; clients branch on it."),
			"message", str("What was wrong, in words a developer can act on: which parameter or field, which limit."),
		)),
		"Refusal", closed("The bus's usual refusal body, used by every refusal on every route but the token endpoint. "+
			"Each response that refuses lists the rules it can carry.", []string{"accepted", "violations"}, o(
			"accepted", o("const", false),
			"violations", array(ref("Violation"), "Every failed check, one violation each.").with("minItems", 1),
		)),
		"OAuthError", closed("An RFC 6749 §5.2 error answer of the token endpoint (the token endpoint never uses the Refusal body).",
			[]string{"error"}, o(
				"error", enum("The RFC 6749 error code. `slow_down` answers a client or address with too many failed authentications "+
					"(20 per client id or 100 per remote address within a minute); `temporarily_unavailable` answers when the store "+
					"cannot be reached; `server_error` an unexpected failure.",
					"invalid_request", "invalid_client", "unsupported_grant_type", "slow_down", "temporarily_unavailable", "server_error"),
				"error_description", str("Optional human-readable detail. Never says which part of a credential was wrong."),
			)),

		// Token service.
		"TokenRequest", o(
			"type", "object",
			"description", "Form fields of a token request. The client authenticates with HTTP Basic (`client_id:client_secret`) "+
				"or with the `client_id` and `client_secret` fields (RFC 6749 §2.3.1), not both. Decision: an `Authorization` header "+
				"that is not one HTTP Basic header (another scheme, a malformed value, two headers) is 401 `invalid_client`, even "+
				"beside the form fields; an empty one is taken as absent. Unrecognized parameters (such as "+
				"`scope`) are ignored, as RFC 6749 §3.1 requires of an authorization server: this is the one request body that "+
				"does not refuse unknown fields.",
			"required", []string{"grant_type"},
			"properties", o(
				"grant_type", o("type", "string", "enum", []string{"client_credentials"},
					"description", "Only `client_credentials`; anything else is 400 `unsupported_grant_type`, a missing one 400 `invalid_request`."),
				"client_id", id("c", "The connection's id, when not sent with HTTP Basic."),
				"client_secret", str("The connection's client secret, when not sent with HTTP Basic."),
			),
		),
		"TokenResponse", closed("RFC 6749 §5.1 access token answer.", []string{"access_token", "token_type", "expires_in"}, o(
			"access_token", str("A signed JWT (asymmetric key, public keys at `/v1/oauth/jwks`) with claims `iss`, `aud` (the server's "+
				"environment), `sub` and `client_id` (the connection id), `tenant` (workspace id), `role` (`consumer` or `producer`), "+
				"`credential_version`, `iat`, `exp` (one hour) and `jti`."),
			"token_type", o("const", "Bearer"),
			"expires_in", integer(1, 3600, "Seconds until the token expires: 3600."),
		)),
		"JWKS", closed("RFC 7517 JSON Web Key Set of the token signing keys.", []string{"keys"}, o(
			"keys", array(ref("JWK"), "Every key whose tokens may still be valid; verify with the key whose `kid` is the token's."),
		)),
		"JWK", o(
			"type", "object",
			"description", "A public JSON Web Key (RFC 7517). Other members follow the key type (`crv`, `x`, `y` for EC; `n`, `e` for RSA; `crv`, `x` for OKP).",
			"required", []string{"kty", "kid"},
			"properties", o(
				"kty", str("Key type."),
				"kid", str("Key id, as in the token's header."),
				"use", o("const", "sig"),
				"alg", str("Signing algorithm."),
			),
		),

		// Publishing.
		"Envelope", closed("A SOM envelope, kept byte for byte as accepted; its topic is `som.` + `message_type`. "+
			"Each failed check is its own violation, all reported at once (rules `envelope.malformed`, `envelope.som_version`, "+
			"`envelope.message_id`, `envelope.message_type`, `envelope.correlation_id`, `envelope.payload`). "+
			"Decision: the envelope is the one request body that keeps members outside these five: it is the producer's SOM "+
			"document, kept and delivered byte for byte, and later SOM 1.x minor versions may add members. Only the five are checked.",
			[]string{"som_version", "message_id", "message_type", "correlation_id", "payload"}, o(
				"som_version", pattern(semverRE, "`MAJOR.MINOR.PATCH` with major 1 (decision: no leading zeros, as in Semantic Versioning)."),
				"message_id", pattern(printable, "1 to 128 printable ASCII characters (decision: space to `~`, U+0020–U+007E). "+
					"The same id from the same producer within 5 minutes is a duplicate."),
				"message_type", pattern(messageTypeRE, "Dot-separated segments of `[a-z0-9_-]`, at most 128 characters.").with("maxLength", 128),
				"correlation_id", pattern(printable, "The story: 1 to 128 printable ASCII characters (space to `~`). "+
					"Consumers receive one story's messages in the order the bus accepted them."),
				"payload", anyObject("The message's content: any JSON object."),
			)).with("additionalProperties", true),
		"PublishAccepted", closed("The answer to an accepted envelope. Decision: a duplicate (same `message_id` from the same producer "+
			"within 5 minutes) answers like the original, with the original's `deliveries` and `duplicate: true`, and is not delivered "+
			"again; `duplicate` is left out when the message is not a duplicate.",
			[]string{"accepted", "message_id", "topic", "deliveries"}, o(
				"accepted", o("const", true),
				"message_id", pattern(printable, "The envelope's `message_id`."),
				"topic", pattern(topicRE, "`som.` + `message_type`."),
				"deliveries", integer(0, nil, "How many consumer queues the message was placed in (for a duplicate: the original's count)."),
				"duplicate", o("const", true, "description", "Present, and true, only when the message is a duplicate."),
			)),
		"BatchPublishRequest", closed("1 to 100 envelopes, 1 MiB in all. Decision: a body that is not a JSON object with exactly a "+
			"`messages` array of 1 to 100 items is 400 `envelope.malformed`, over 1 MiB 413 `envelope.too_large`. Each item is then "+
			"checked on its own exactly like a single publish (an item over 256 KiB gets its own `envelope.too_large` result), so the "+
			"item schema here is left open: a bad item is a refused result, not a refused request.",
			[]string{"messages"}, o(
				"messages", o("type", "array", "minItems", 1, "maxItems", 100,
					"items", o("description", "An envelope (see Envelope), checked on its own."),
				),
			)),
		"BatchPublishResponse", closed("One result per envelope, in request order; accepted ones were accepted in array order.",
			[]string{"results"}, o(
				"results", o("type", "array", "minItems", 1, "maxItems", 100,
					"items", o("oneOf", []obj{ref("PublishAccepted"), ref("Refusal")}),
				),
			)),

		// Pulling.
		"ReceivedMessage", closed("A delivered message: exactly the pull API's fields.", []string{
			"receipt_handle", "message_type", "correlation_id", "topic", "producer_id", "receive_count", "enqueued_at", "envelope",
		}, o(
			"receipt_handle", strLen(1, 1024, "Opaque and unforgeable; acknowledges or releases this delivery, and only this one."),
			"message_type", pattern(messageTypeRE, "").with("maxLength", 128),
			"correlation_id", pattern(printable, ""),
			"topic", pattern(topicRE, ""),
			"producer_id", id("c", "The producer connection that published it."),
			"receive_count", integer(1, nil, "Deliveries of this message, this one included."),
			"enqueued_at", timeField("When the bus accepted it."),
			"envelope", anyObject("The producer's envelope as accepted (the accepted bytes)."),
		)),
		"ReceiveResponse", closed("The received messages; empty when none arrived within `wait`.", []string{"messages"}, o(
			"messages", array(ref("ReceivedMessage"), "").with("maxItems", 10),
		)),
		"AckRequest", closed("", []string{"receipt_handles"}, o(
			"receipt_handles", receiptHandles(),
		)),
		"NackRequest", closed("", []string{"receipt_handles"}, o(
			"receipt_handles", receiptHandles(),
			"delay_seconds", integer(0, 43200, "Seconds before the messages become visible again; 0 releases at once.").with("default", 0),
		)),
		"SettleFailure", closed("A handle that failed.", []string{"receipt_handle", "code", "message"}, o(
			"receipt_handle", str("The handle as sent."),
			"code", enum("`ReceiptHandleIsInvalid`: malformed, not from this queue, or not the message's latest delivery.", "ReceiptHandleIsInvalid"),
			"message", str("Why, in words."),
		)),
		"AckResponse", closed("Each handle succeeds or fails on its own: the answer is 200 even when all fail.", []string{"acked", "failed"}, o(
			"acked", array(str(""), "Handles acknowledged (again, for an already acknowledged latest delivery)."),
			"failed", array(ref("SettleFailure"), ""),
		)),
		"NackResponse", closed("Each handle succeeds or fails on its own: the answer is 200 even when all fail.", []string{"nacked", "failed"}, o(
			"nacked", array(str(""), "Handles released."),
			"failed", array(ref("SettleFailure"), ""),
		)),

		// Skills.
		"SkillRegistration", closed("A configured skill instance bound to a consumer connection.",
			[]string{"instance_id", "skill", "name", "values", "authority_scale"}, o(
				"instance_id", shownText("Unique within the connection's registrations. "),
				"skill", shownText(""),
				"name", shownText(""),
				"values", anyObject("The instance's configured values."),
				"authority_scale", integer(0, 100, ""),
			)),
		"Skills", closed("A consumer connection's skill registrations. Decision: until registrations were first put, "+
			"`registrations` is empty and `updated_at` is the connection's creation time.", []string{"registrations", "updated_at"}, o(
			"registrations", array(ref("SkillRegistration"), ""),
			"updated_at", timeField("When the registrations were last put; before the first put, when the connection was created."),
		)),
		"SkillsPutRequest", closed("Replaces the registrations (an empty list clears them). Decision: at most 100 registrations, "+
			"`instance_id` unique among them (400 `manage.bad_request` otherwise). A registration's `values` left out or null "+
			"is stored as `{}` (clients of earlier versions send null for none); its other members are required.", []string{"registrations"}, o(
			"registrations", array(ref("SkillRegistration"), "").with("maxItems", 100),
		)),

		// Management.
		"Role", enum("A user's role in a workspace: `viewer` < `developer` < `admin` < `owner`.", "viewer", "developer", "admin", "owner"),
		"User", closed("", []string{"id", "name", "email", "operator", "created_at"}, o(
			"id", id("u", ""),
			"name", strLen(1, 128, ""),
			"email", o("type", "string", "format", "email", "maxLength", 254),
			"operator", boolean("Operators may create users and workspaces."),
			"created_at", timeField(""),
		)),
		"UserCreateRequest", closed("Decision: names are 1 to 128 characters; emails are unique across the server, compared "+
			"case-insensitively (409 `manage.conflict`).", []string{"name", "email"}, o(
			"name", nameField(),
			"email", o("type", "string", "format", "email", "maxLength", 254, "description",
				"A bare address (no display name or comment). Decision: no white space, control or format characters anywhere "+
					"(Unicode categories Zs, Zl, Zp, Cc, Cf: U+00A0, U+2028, U+200B, U+200F, U+FEFF, U+00AD among them), which would "+
					"make an address read as another one; 400 `manage.bad_request` naming the field and the character. Emails are "+
					"compared case-insensitively but not Unicode-normalized: the same address in NFC and NFD are two emails."),
			"operator", boolean("").with("default", false),
		)),
		"APIKeyCreated", closed("A new API key. `api_key` is shown only in this answer; only its hash is kept.",
			[]string{"id", "api_key", "created_at"}, o(
				"id", str("The key's id (not a secret)."),
				"api_key", strLen(1, 256, "The key, for `Authorization: Bearer <api key>`."),
				"created_at", timeField(""),
			)),
		"Whoami", closed("The caller and its roles.", []string{"user", "roles"}, o(
			"user", ref("User"),
			"roles", array(closed("", []string{"workspace_id", "role"}, o(
				"workspace_id", id("w", ""),
				"role", ref("Role"),
			)), "One entry per workspace the caller has a role in."),
		)),
		"Workspace", closed("", []string{"id", "name", "created_at"}, o(
			"id", id("w", ""),
			"name", strLen(1, 128, ""),
			"created_at", timeField(""),
		)),
		"WorkspaceCreateRequest", closed("", []string{"name"}, o("name", nameField())),
		"WorkspaceList", closed("Oldest first.", []string{"workspaces"}, o("workspaces", array(ref("Workspace"), ""))),
		"Member", closed("", []string{"workspace_id", "user_id", "role"}, o(
			"workspace_id", id("w", ""),
			"user_id", id("u", ""),
			"role", ref("Role"),
		)),
		"PasswordPutRequest", closed("Decision: a portal password.", []string{"password"}, o("password",
			strLen(12, 1024, "At least 12 characters and at most 1024 bytes of UTF-8, without control characters (line breaks, tabs, NUL)."))),
		"MemberPutRequest", closed("", []string{"role"}, o("role", ref("Role"))),
		"Subscription", closed("Routes messages whose topic matches `topic` (and, when `producers` is given, that come from one of them). "+
			"Patterns match dot-separated segments: `*` exactly one segment, a final `>` one or more; other segments are "+
			"`[a-z0-9_-]+`. Any other pattern is 400 `manage.bad_request`. Decision: so is a pattern that no topic can match, "+
			"with a message saying why: every topic is `som.` followed by a message type of one or more segments and at most "+
			"128 characters, so the first segment must be `som`, `*` or `>`, a second segment must follow (but after a lone "+
			"`>`), and the shortest match (`*` and `>` standing for one character) must fit in 132 characters.", []string{"topic"}, o(
			"topic", pattern(patternRE, "").with("maxLength", 256),
			"producers", o("type", "array", "minItems", 1, "maxItems", 100, "uniqueItems", true, "items", id("c",
				"Decision: each id must be a producer connection of the workspace (a revoked one too); any other id is 400 "+
					"`manage.bad_request`, since the filter could never accept a message.")),
		)),
		"Subscriptions", array(ref("Subscription"), "Decision: at most 100 per connection. Only consumer connections have "+
			"subscriptions: a producer's list is always empty and giving it a non-empty one is 400 `manage.bad_request`. "+
			"A change applies to messages accepted after it.").with("maxItems", 100),
		"SecretState", closed("Decision: the state of the connection's client secret. `previous_expires_at` is the end of a "+
			"rotation's overlap while the previous secret still gets tokens, else null.",
			[]string{"state", "issued_at", "previous_expires_at"}, o(
				"state", enum("`none`: never issued; `active`; `revoked`.", "none", "active", "revoked"),
				"issued_at", nullableTime("When the current (or revoked) secret was issued; null when none ever was."),
				"previous_expires_at", nullableTime(""),
			)),
		"ConsumerConnection", closed("A consumer connection with its queue counts.", append(connRequired(), queueCountNames...), connProps("consumer").with(
			"ready", integer(0, nil, "Messages ready to be received."),
			"in_flight", integer(0, nil, "Received and not yet acknowledged, released or timed out."),
			"delayed", integer(0, nil, "Released with a delay that has not run out."),
			"dead_letters", integer(0, nil, "Messages in its dead-letter queue."),
			"oldest_ready_age_seconds", o("type", "number", "minimum", 0, "description", "Age of the oldest ready message; 0 when none is ready."),
		)),
		"ProducerConnection", closed("A producer connection (no queue, so no queue counts).", connRequired(), connProps("producer")),
		"Connection", o(
			"description", "Decision: the queue counts are top-level fields, present exactly on consumer connections.",
			"oneOf", []obj{ref("ConsumerConnection"), ref("ProducerConnection")},
		),
		"ConnectionList", closed("Decision: oldest first, one page at a time: `next_cursor` is passed as `cursor` for the next "+
			"page and is null on the last page. The queue counts of a page's consumers are read together, in one snapshot.",
			[]string{"connections", "next_cursor"}, o(
				"connections", array(ref("Connection"), "").with("maxItems", 100),
				"next_cursor", cursor(),
			)),
		"ConnectionCreateRequest", closed("", []string{"kind", "name"}, o(
			"kind", enum("", "consumer", "producer"),
			"name", nameField(),
			"attempt_limit", integer(1, 1000, "The most deliveries a message gets before it moves to the dead-letter queue (consumers).").with("default", 5),
			"quota_tier", o("type", "string", "minLength", 1, "default", "standard",
				"description", "A tier of the server's configuration; an unknown tier is 400 `manage.bad_request`."),
			"subscriptions", ref("Subscriptions"),
		)),
		"ConnectionUpdateRequest", closed("Fields left out are unchanged; `kind` cannot be changed. Decision: an empty object changes "+
			"nothing and answers the connection; a field sent as null is 400 `manage.bad_request` (decision 32).", nil, o(
			"name", nameField(),
			"attempt_limit", integer(1, 1000, ""),
			"quota_tier", o("type", "string", "minLength", 1),
			"subscriptions", ref("Subscriptions"),
		)),
		"ClientSecret", closed("A new client secret, shown only in this answer (only its hash is kept), with the URLs filled in for "+
			"the connection. Decision: for a producer connection `messages_url` is its publish URL "+
			"(`/v1/tenants/{t}/messages`) and `ack_url`, `nack_url` and `skills_url` are left out; for a consumer "+
			"`messages_url` is its receive URL and the other three are present.",
			[]string{"client_id", "client_secret", "credential_version", "token_url", "messages_url"}, o(
				"client_id", id("c", "The connection id."),
				"client_secret", strLen(1, 256, ""),
				"credential_version", integer(0, nil, "Goes up with each rotation or revocation; tokens carry it."),
				"token_url", uri(),
				"messages_url", uri(),
				"ack_url", uri(),
				"nack_url", uri(),
				"skills_url", uri(),
			)),
		"RotateRequest", closed("", nil, o(
			"overlap", enum("How long the previous secret still gets tokens.", "24h", "3d", "1h", "none").with("default", "24h"),
		)),
		"EmptyRequest", o("type", "object", "maxProperties", 0, "description",
			"Decision: this route takes no parameters; send no body, or `{}`. Anything else is 400 `manage.bad_request`."),
		"DeadLetter", closed("A dead-lettered message.", []string{
			"message_id", "correlation_id", "message_type", "topic", "producer_id", "receive_count", "enqueued_at", "dead_lettered_at", "envelope",
		}, o(
			"message_id", pattern(printable, ""),
			"correlation_id", pattern(printable, ""),
			"message_type", pattern(messageTypeRE, "").with("maxLength", 128),
			"topic", pattern(topicRE, ""),
			"producer_id", id("c", ""),
			"receive_count", integer(1, nil, "Deliveries it had."),
			"enqueued_at", timeField(""),
			"dead_lettered_at", timeField(""),
			"envelope", anyObject("The envelope as accepted."),
		)),
		"DeadLetterList", closed("Decision: oldest first; `next_cursor` is passed as `cursor` for the next page and is null on the last page. "+
			"Dead letters are kept 14 days.", []string{"dead_letters", "next_cursor"}, o(
			"dead_letters", array(ref("DeadLetter"), "").with("maxItems", 100),
			"next_cursor", cursor(),
		)),
		"RedriveRequest", closed("Decision: without `message_ids` (or with no body) every dead letter is moved back; ids that are not "+
			"in the dead-letter queue are skipped and not counted. `message_ids` is left out for all, never null (decision 32).", nil, o(
			"message_ids", o("type", "array", "minItems", 1, "maxItems", 100, "uniqueItems", true, "items", pattern(printable, "")),
		)),
		"RedriveResponse", closed("", []string{"redriven"}, o("redriven", integer(0, nil, "Messages moved back to the queue."))),
		"PurgeResponse", closed("", []string{"purged"}, o("purged", integer(0, nil, "Messages dropped (dead letters are kept)."))),
		"AuditEntry", closed("One recorded change. No secret ever appears in it.", []string{"id", "at", "actor", "action", "target", "details"}, o(
			"id", str(""),
			"at", timeField(""),
			"actor", str("The user id of whoever made the change; `system` for the first operator, made by the server itself."),
			"action", pattern(`^[a-z_]+(\.[a-z_]+)+$`, "A dotted name: `workspace.create`, `user.create`, `key.create`, `member.set`, "+
				"`member.remove`, `connection.create`, `connection.update`, `connection.revoke`, `connection.restore`, `connection.remove`, "+
				"`secret.issue`, `secret.rotate`, `secret.stop_previous`, `secret.revoke`, `dead_letters.redrive`, `queue.purge`, `skills.update`."),
			"target", str("The id of what was changed."),
			"details", anyObject("What changed."),
		)),
		"AuditList", closed("Decision: newest first; `next_cursor` is passed as `cursor` for the next page and is null on the last page.",
			[]string{"entries", "next_cursor"}, o(
				"entries", array(ref("AuditEntry"), "").with("maxItems", 100),
				"next_cursor", cursor(),
			)),
		"Usage", closed("Decision: a connection's quota usage for the current UTC day.", []string{"connection_id", "tier", "day", "requests_today", "daily_quota", "remaining", "resets_at"}, o(
			"connection_id", id("c", "The connection."),
			"tier", str("The connection's quota tier."),
			"day", o("type", "string", "format", "date", "description", "The current UTC day, `YYYY-MM-DD`."),
			"requests_today", integer(0, nil, "Requests counted on the connection's workspace routes this UTC day."),
			"daily_quota", o("type", []string{"integer", "null"}, "minimum", 0, "description", "The tier's daily quota; null when the tier has none (unlimited)."),
			"remaining", o("type", []string{"integer", "null"}, "minimum", 0, "description", "Requests left today under the tier's daily quota (never below 0); null when the tier has no daily quota."),
			"resets_at", timeField("When the count starts again: the next midnight UTC."),
		)),
		"Health", closed("", []string{"status"}, o("status", o("const", "ok"))),
	)
}

var queueCountNames = []string{"ready", "in_flight", "delayed", "dead_letters", "oldest_ready_age_seconds"}

func connRequired() []string {
	return []string{"id", "workspace_id", "kind", "name", "status", "attempt_limit", "quota_tier", "credential_version", "secret", "subscriptions", "created_at"}
}

func connProps(kind string) obj {
	return o(
		"id", id("c", "The connection id, also its client id and (for a consumer) its queue id."),
		"workspace_id", id("w", "The workspace it belongs to."),
		"kind", o("const", kind),
		"name", strLen(1, 128, ""),
		"status", enum("`revoked`: no new tokens, and its tokens get 403 `producer.not_registered`.", "active", "revoked"),
		"attempt_limit", integer(1, 1000, ""),
		"quota_tier", str(""),
		"credential_version", integer(0, nil, ""),
		"secret", ref("SecretState"),
		"subscriptions", ref("Subscriptions"),
		"created_at", timeField(""),
	)
}

func receiptHandles() obj {
	return o("type", "array", "minItems", 1, "maxItems", 10, "uniqueItems", true,
		"items", o("type", "string"),
		"description", "1 to 10 distinct receipt handles; an empty, longer or repeated list, or a null handle, is 400 `pull.bad_request` (naming the handle's index); an empty handle is a malformed one and fails on its own with `ReceiptHandleIsInvalid`.")
}

func uri() obj { return o("type", "string", "format", "uri") }

func cursor() obj {
	return o("type", []string{"string", "null"}, "description", "Opaque.")
}

// shownText is a string of 1 to 128 characters that people see shown: no
// control characters, no bidirectional embedding, override or isolate
// characters, which would reorder the text shown after it, and at least one
// visible character.
func shownText(d string) obj {
	return strLen(1, 128, d+"Decision: no control characters, no bidirectional embedding, override or isolate characters "+
		"(U+202A to U+202E, U+2066 to U+2069), and at least one visible character: a value made only of white space, "+
		"format characters (such as U+200B, U+200E, U+FEFF, U+00AD) and other invisible characters is 400 `manage.bad_request`.")
}

// nameField is the name of a user, workspace or connection (decision 3).
func nameField() obj {
	return shownText("Decision: names need not be unique. ")
}
