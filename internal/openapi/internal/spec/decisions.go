package spec

// infoDescription is the document's top-level description: the conventions of
// API.md and the decisions it leaves open. Each decision is repeated where it
// applies, in the description of the schema, parameter or response.
const infoDescription = `The HTTP contract of sombus. The consumer pull API follows the HTTPS pull API seed; the rest follows API.md.

## Conventions

- JSON in UTF-8 everywhere except the token endpoint (form-encoded request).
- Times are RFC 3339 UTC with milliseconds: ` + "`2026-09-25T10:15:02.114Z`" + `.
- Ids are opaque strings: workspace ids start with ` + "`w`" + `, connection (client) ids with ` + "`c`" + `, user ids with ` + "`u`" + `, then at least 96 random bits in lowercase base32.
- Every refusal, on every route but the token endpoint, has the Refusal body ` + "`{\"accepted\": false, \"violations\": [{\"rule\", \"message\"}]}`" + `. Each response lists the rules it can carry.
- 429 and 503 answers carry ` + "`Retry-After`" + ` (whole seconds).
- Request bodies refuse unknown fields (` + "`additionalProperties: false`" + `), except the token endpoint's form (RFC 6749 §3.1) and the SOM envelope itself (decision 19).
- Body limits: ack and nack 64 KiB; publish 256 KiB; batch publish and management 1 MiB; over the limit is 413 with the route's bad-request rule (publish: ` + "`envelope.too_large`" + `).
- Unknown routes answer 404 ` + "`route.not_found`" + `; a wrong method 405 ` + "`route.method_not_allowed`" + ` (components/responses RouteNotFound and MethodNotAllowed).
- The portal is served under ` + "`/portal/`" + ` (HTML, not part of this API).

## Decisions not fixed by API.md

1. **Duplicate publish**: the same ` + "`message_id`" + ` from the same producer within 5 minutes answers 202 like the original, with the original's ` + "`deliveries`" + ` and ` + "`duplicate: true`" + `; ` + "`duplicate`" + ` is absent on a first acceptance.
2. **Connection ` + "`secret`" + `**: ` + "`{\"state\": \"none\"|\"active\"|\"revoked\", \"issued_at\": time|null, \"previous_expires_at\": time|null}`" + `.
3. **Connection object**: ` + "`id`, `workspace_id`, `kind`, `name`, `status`, `attempt_limit`, `quota_tier`, `credential_version`, `secret`, `subscriptions`, `created_at`" + `. Its queue counts (` + "`ready`, `in_flight`, `delayed`, `dead_letters`, `oldest_ready_age_seconds`" + `) are top-level fields present exactly on consumer connections. Producer connections have no subscriptions (always ` + "`[]`" + `; a non-empty list is 400). At most 100 subscriptions per connection, 100 producers per subscription. Names (users, workspaces, connections) are 1 to 128 characters and need not be unique.
4. **Collections** answer objects: ` + "`{\"workspaces\": [...]}`, `{\"connections\": [...]}`" + `, oldest first.
5. **Dead letters**: ` + "`{\"dead_letters\": [{message_id, correlation_id, message_type, topic, producer_id, receive_count, enqueued_at, dead_lettered_at, envelope}], \"next_cursor\": string|null}`" + `, oldest first, ` + "`limit`" + ` 1 to 100 (default 50), ` + "`cursor`" + ` the previous page's ` + "`next_cursor`" + ` (null on the last page).
6. **Audit**: ` + "`{\"entries\": [...], \"next_cursor\": string|null}`" + `, newest first, ` + "`limit`" + ` 1 to 100 (default 50).
7. **whoami**: ` + "`{\"user\": {id, name, email, operator, created_at}, \"roles\": [{workspace_id, role}]}`" + `.
8. **Users and keys**: ` + "`POST /users`" + ` answers 201 with the user; emails are unique, compared case-insensitively (409). ` + "`POST /users/{u}/keys`" + ` answers 201 ` + "`{id, api_key, created_at}`" + `, the key shown once.
9. **Workspaces and members**: ` + "`POST /workspaces`" + ` answers 201 ` + "`{id, name, created_at}`" + `. ` + "`PUT`" + ` member answers 200 ` + "`{workspace_id, user_id, role}`" + `, ` + "`DELETE`" + ` 204; a change that would leave a workspace without an owner is 409.
10. **Access**: a workspace the caller has no role in answers 404 ` + "`manage.not_found`" + ` (its existence is not revealed); a member whose role is too weak gets 403 ` + "`manage.forbidden`" + `. ` + "`GET /workspaces`" + ` lists the caller's workspaces, every workspace for an operator, and operators may read any workspace; other workspace routes need a role.
11. **Connections**: create answers 201 with the connection object; ` + "`PATCH`" + ` 200 with it (an empty object changes nothing); revoke and restore 200 with it and are idempotent; ` + "`DELETE`" + ` 204.
12. **Secrets**: issue and rotate answer 201 ` + "`{client_id, client_secret, credential_version, token_url, messages_url, ack_url, nack_url, skills_url}`" + `; for a producer ` + "`messages_url`" + ` is the publish URL and the ack, nack and skills URLs are left out. Issue is 409 while a secret is active; rotate and revoke are 409 when none is. Stop-previous (idempotent) and revoke answer 200 with the connection object. Secret routes work whatever the connection's status.
13. **Queue sub-resources** (dead letters, redrive, purge, skills) of a producer connection answer 404 ` + "`manage.not_found`" + `: it has no queue.
14. **Redrive** answers 200 ` + "`{redriven}`" + `; ` + "`message_ids`" + ` (1 to 100, optional) not in the dead-letter queue are skipped. **Purge** answers 200 ` + "`{purged}`" + `.
15. **Skills**: ` + "`PUT`" + ` takes ` + "`{registrations: [{instance_id, skill, name, values (object), authority_scale 0..100}]}`" + ` (at most 100, unique ` + "`instance_id`" + `) and answers 200 ` + "`{registrations, updated_at}`" + `; before any put, ` + "`registrations`" + ` is empty and ` + "`updated_at`" + ` is the connection's creation time (always a time, never null).
16. **Usage**: ` + "`GET .../connections/{c}/usage`" + ` answers ` + "`{connection_id, tier, day, requests_today, daily_quota, remaining, resets_at}`" + ` for the current UTC day (` + "`daily_quota`" + ` and ` + "`remaining`" + ` are null on a tier without a daily quota).
17. **Pull answers**: receive ` + "`{messages: [...]}`" + ` with exactly the seed's fields; ack ` + "`{acked: [], failed: [{receipt_handle, code, message}]}`" + `; nack ` + "`{nacked: [], failed: [...]}`" + `; 200 even when every handle fails. The pull routes refuse any query parameter they do not define (400 ` + "`pull.bad_request`" + `).
18. **Batch publish** answers 200 ` + "`{results: [...]}`" + `, each a publish answer or ` + "`{accepted: false, violations}`" + `. A body that is not ` + "`{messages: [1 to 100 items]}`" + ` is 400 ` + "`envelope.malformed`" + `, over 1 MiB 413 ` + "`envelope.too_large`" + `; an item over 256 KiB gets its own ` + "`envelope.too_large`" + ` result.
19. **Envelope checks**: ` + "`message_id`" + ` and ` + "`correlation_id`" + ` are 1 to 128 characters from space to ` + "`~`" + `; ` + "`som_version`" + ` has no leading zeros. The envelope is the one request body that keeps unknown members: it is the producer's SOM document, kept and delivered byte for byte, and later SOM 1.x minor versions may add members; only the five are checked.
20. **Token endpoint**: ` + "`{access_token, token_type, expires_in}`" + ` with ` + "`Cache-Control: no-store`" + `; errors are RFC 6749 bodies with an optional ` + "`error_description`" + `: 429 ` + "`slow_down`" + `, 503 ` + "`temporarily_unavailable`" + `, 500 ` + "`server_error`" + `, and a body over 64 KiB 413 ` + "`invalid_request`" + `. Unrecognized parameters are ignored. A wrong method on its path is the usual 405 Refusal.
21. **Health**: ` + "`/healthz`" + ` and ` + "`/readyz`" + ` answer ` + "`{\"status\": \"ok\"}`" + `; ` + "`/readyz`" + ` answers 503 ` + "`store.unavailable`" + ` when the store is unreachable. The same rule answers 503 (with ` + "`Retry-After`" + `) on publish, JWKS and management routes when the store cannot be reached. Any route may answer 500 ` + "`internal.error`" + `.
22. **Rate-limit headers**: every answer of a workspace route (` + "`/v1/tenants/...`" + `) but 401 and 500 carries ` + "`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`" + `, describing whichever limit is closer to refusing: the per-second allowance (limit = its burst, reset = seconds until it is full again) or, once fewer requests are left of it, the daily quota (reset = seconds until the next UTC day). The management API is not rate limited.
23. **Management query strings**: unknown query parameters are 400 ` + "`manage.bad_request`" + `. Routes that take no parameters accept no body or ` + "`{}`" + `.
`
