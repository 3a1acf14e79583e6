package httpapi

import (
	"io"
	"net/http"
	"strconv"

	"github.com/sombus/sombus/internal/bus"
)

// actorHandler is a management handler for an authenticated user.
type actorHandler func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error

// manage authenticates the API key of a management route that takes no
// query parameters: any is refused (decision 23).
func (s *Server) manage(pattern string, h actorHandler) {
	s.manageRoute(pattern, false, h)
}

// manageQuery is manage for a route that checks its own query parameters.
func (s *Server) manageQuery(pattern string, h actorHandler) {
	s.manageRoute(pattern, true, h)
}

func (s *Server) manageRoute(pattern string, ownQuery bool, h actorHandler) {
	s.handle(pattern, func(w http.ResponseWriter, r *http.Request) error {
		if r.Header.Get("Authorization") != "" && bearer(r) == "" {
			return bus.Errorf(bus.RuleManageUnauthenticated, "Authorization must be \"Bearer <api key>\".")
		}
		a, err := s.svc.AuthenticateAPIKey(r.Context(), bearer(r))
		if err != nil {
			return err
		}
		if err := checkPathIDs(r); err != nil {
			return err
		}
		if !ownQuery {
			if err := noQuery(r); err != nil {
				return err
			}
		}
		if err := noBody(r); err != nil {
			return err
		}
		return h(w, r, a)
	})
}

// noBody refuses a body on a GET or DELETE, which take none: one sent is
// refused as a POST's unknown field is, rather than passed over.
func noBody(r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		return nil
	}
	has := r.ContentLength > 0
	if r.ContentLength < 0 { // chunked: a body of no bytes is no body
		var one [1]byte
		n, _ := io.ReadFull(r.Body, one[:])
		has = n > 0
	}
	if has {
		return bus.Errorf(bus.RuleManageBadRequest, "A %s request takes no body; send it without one.", r.Method)
	}
	return nil
}

// pathIDs are the ids a management path may carry, with what each names.
var pathIDs = []struct{ wildcard, what string }{{"t", "Workspace"}, {"c", "Connection"}, {"u", "User"}}

// checkPathIDs answers, for an id in the path that no store could hold
// (not UTF-8, or with NUL or another control character), what an unknown
// id answers: 404 manage.not_found. Such ids never reach a store (PostgreSQL
// refuses them with an error).
func checkPathIDs(r *http.Request) error {
	for _, p := range pathIDs {
		if v := r.PathValue(p.wildcard); v != "" && !bus.PlainText(v) {
			return bus.Errorf(bus.RuleManageNotFound, "%s %s not found.", p.what, strconv.QuoteToASCII(v))
		}
	}
	return nil
}

// connectionCreate is bus.ConnectionParams as creating a connection reads
// it, where kind and name are required (an update takes each or not).
type connectionCreate struct {
	Kind          *bus.ConnectionKind `json:"kind" strictjson:"required"`
	Name          *string             `json:"name" strictjson:"required"`
	AttemptLimit  *int                `json:"attempt_limit"`
	QuotaTier     *string             `json:"quota_tier"`
	Subscriptions *[]bus.Subscription `json:"subscriptions"`
}

// readManage decodes a management body strictly into v.
func readManage(r *http.Request, v any) error {
	b, err := readBody(r, bodyOptions{limit: limitManage, rule: bus.RuleManageBadRequest})
	if err != nil {
		return err
	}
	return decodeStrict(b, v, bus.RuleManageBadRequest)
}

// readOptionalManage decodes a body that may be left out entirely. An empty
// body is no parameters: with Content-Length 0 whatever its Content-Type
// (clients often send "Content-Type: application/json" on every request),
// or an empty application/json body of unknown length.
func readOptionalManage(r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	b, err := readBody(r, bodyOptions{limit: limitManage, rule: bus.RuleManageBadRequest})
	if err != nil || len(b) == 0 {
		return err
	}
	return decodeStrict(b, v, bus.RuleManageBadRequest)
}

// noQuery refuses query parameters on routes that take none.
func noQuery(r *http.Request) error { return refuseQuery(r, bus.RuleManageBadRequest) }

// pageParams reads limit (1 to 100, default 50) and cursor.
func pageParams(r *http.Request) (int, string, error) {
	limit, cursor, _, err := pageParamsOf(r, bus.DefaultAuditPage)
	return limit, cursor, err
}

// pageParamsOf reads limit (1 to 100, default def) and cursor; the route
// may take the extra query parameters too, returned with them.
func pageParamsOf(r *http.Request, def int, extra ...string) (int, string, map[string]string, error) {
	q, err := queryParams(r, bus.RuleManageBadRequest, append([]string{"limit", "cursor"}, extra...)...)
	if err != nil {
		return 0, "", nil, err
	}
	limit := def
	if v, ok := q["limit"]; ok {
		if !digits.MatchString(v) {
			return 0, "", nil, bus.Errorf(bus.RuleManageBadRequest, "limit must be an integer between 1 and %d.", bus.MaxAuditPage)
		}
		limit, _ = strconv.Atoi(v)
		if limit < 1 || limit > bus.MaxAuditPage {
			return 0, "", nil, bus.Errorf(bus.RuleManageBadRequest, "limit must be an integer between 1 and %d.", bus.MaxAuditPage)
		}
	}
	return limit, q["cursor"], q, nil
}

func (s *Server) manageRoutes() {
	const ws = "/v1/manage/workspaces/{t}"
	const conn = ws + "/connections/{c}"

	s.manage("GET /v1/manage/whoami", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		writeJSON(w, http.StatusOK, s.svc.Whoami(a))
		return nil
	})
	s.manage("POST /v1/manage/users", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p bus.CreateUserParams
		if err := readManage(r, &p); err != nil {
			return err
		}
		u, err := s.svc.CreateUser(r.Context(), a, p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, u)
		return nil
	})
	s.manage("POST /v1/manage/users/{u}/keys", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct{}
		if err := readOptionalManage(r, &p); err != nil {
			return err
		}
		k, err := s.svc.CreateAPIKey(r.Context(), a, r.PathValue("u"))
		if err != nil {
			return err
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusCreated, k)
		return nil
	})
	s.manage("PUT /v1/manage/users/{u}/password", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct {
			Password *string `json:"password" strictjson:"required"`
		}
		if err := readManage(r, &p); err != nil {
			return err
		}
		if p.Password == nil {
			return bus.Errorf(bus.RuleManageBadRequest, "password is required.")
		}
		if err := s.svc.SetPassword(r.Context(), a, r.PathValue("u"), *p.Password); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.manage("POST /v1/manage/workspaces", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct {
			Name string `json:"name" strictjson:"required"`
		}
		if err := readManage(r, &p); err != nil {
			return err
		}
		wsp, err := s.svc.CreateWorkspace(r.Context(), a, p.Name)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, wsp)
		return nil
	})
	s.manage("GET /v1/manage/workspaces", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		list, err := s.svc.ListWorkspaces(r.Context(), a)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"workspaces": list})
		return nil
	})
	s.manage("GET "+ws, func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		wsp, err := s.svc.GetWorkspace(r.Context(), a, r.PathValue("t"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wsp)
		return nil
	})
	s.manage("PUT "+ws+"/members/{u}", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct {
			Role bus.Role `json:"role" strictjson:"required"`
		}
		if err := readManage(r, &p); err != nil {
			return err
		}
		m, err := s.svc.SetMember(r.Context(), a, r.PathValue("t"), r.PathValue("u"), p.Role)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, m)
		return nil
	})
	s.manage("DELETE "+ws+"/members/{u}", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		if err := s.svc.RemoveMember(r.Context(), a, r.PathValue("t"), r.PathValue("u")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.manage("POST "+ws+"/connections", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p connectionCreate
		if err := readManage(r, &p); err != nil {
			return err
		}
		v, err := s.svc.CreateConnection(r.Context(), a, r.PathValue("t"), bus.ConnectionParams(p))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, v)
		return nil
	})
	s.manageQuery("GET "+ws+"/connections", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		limit, cursor, q, err := pageParamsOf(r, bus.DefaultConnectionPage, "kind")
		if err != nil {
			return err
		}
		page, err := s.svc.ListConnections(r.Context(), a, r.PathValue("t"), bus.ConnectionKind(q["kind"]), limit, cursor)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, page)
		return nil
	})
	s.manage("GET "+conn, func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		v, err := s.svc.GetConnection(r.Context(), a, r.PathValue("t"), r.PathValue("c"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	})
	s.manage("PATCH "+conn, func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p bus.ConnectionParams
		if err := readManage(r, &p); err != nil {
			return err
		}
		v, err := s.svc.UpdateConnection(r.Context(), a, r.PathValue("t"), r.PathValue("c"), p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	})
	s.manage("DELETE "+conn, func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		if err := s.svc.RemoveConnection(r.Context(), a, r.PathValue("t"), r.PathValue("c")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.manage("POST "+conn+"/secret", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct{}
		if err := readOptionalManage(r, &p); err != nil {
			return err
		}
		out, err := s.svc.IssueSecret(r.Context(), a, r.PathValue("t"), r.PathValue("c"))
		if err != nil {
			return err
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusCreated, out)
		return nil
	})
	s.manage("POST "+conn+"/secret/rotate", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct {
			Overlap string `json:"overlap"`
		}
		if err := readOptionalManage(r, &p); err != nil {
			return err
		}
		out, err := s.svc.RotateSecret(r.Context(), a, r.PathValue("t"), r.PathValue("c"), p.Overlap)
		if err != nil {
			return err
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusCreated, out)
		return nil
	})
	connChange := func(path string, do func(r *http.Request, a *bus.Actor) (bus.ConnectionView, error)) {
		s.manage("POST "+conn+path, func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
			var p struct{}
			if err := readOptionalManage(r, &p); err != nil {
				return err
			}
			v, err := do(r, a)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, v)
			return nil
		})
	}
	connChange("/secret/stop-previous", func(r *http.Request, a *bus.Actor) (bus.ConnectionView, error) {
		return s.svc.StopPreviousSecret(r.Context(), a, r.PathValue("t"), r.PathValue("c"))
	})
	connChange("/secret/revoke", func(r *http.Request, a *bus.Actor) (bus.ConnectionView, error) {
		return s.svc.RevokeSecret(r.Context(), a, r.PathValue("t"), r.PathValue("c"))
	})
	connChange("/revoke", func(r *http.Request, a *bus.Actor) (bus.ConnectionView, error) {
		return s.svc.SetConnectionStatus(r.Context(), a, r.PathValue("t"), r.PathValue("c"), bus.StatusRevoked)
	})
	connChange("/restore", func(r *http.Request, a *bus.Actor) (bus.ConnectionView, error) {
		return s.svc.SetConnectionStatus(r.Context(), a, r.PathValue("t"), r.PathValue("c"), bus.StatusActive)
	})
	s.manageQuery("GET "+conn+"/dead-letters", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		limit, cursor, err := pageParams(r)
		if err != nil {
			return err
		}
		page, err := s.svc.ListDeadLetters(r.Context(), a, r.PathValue("t"), r.PathValue("c"), limit, cursor)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, page)
		return nil
	})
	s.manage("POST "+conn+"/dead-letters/redrive", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct {
			MessageIDs []string `json:"message_ids"`
		}
		if err := readOptionalManage(r, &p); err != nil {
			return err
		}
		n, err := s.svc.Redrive(r.Context(), a, r.PathValue("t"), r.PathValue("c"), p.MessageIDs)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]int{"redriven": n})
		return nil
	})
	s.manage("POST "+conn+"/purge", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct{}
		if err := readOptionalManage(r, &p); err != nil {
			return err
		}
		n, err := s.svc.Purge(r.Context(), a, r.PathValue("t"), r.PathValue("c"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]int{"purged": n})
		return nil
	})
	s.manage("PUT "+conn+"/skills", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		var p struct {
			Registrations []bus.SkillRegistration `json:"registrations" strictjson:"required"`
		}
		if err := readManage(r, &p); err != nil {
			return err
		}
		sk, err := s.svc.PutSkills(r.Context(), a, r.PathValue("t"), r.PathValue("c"), p.Registrations)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, sk)
		return nil
	})
	s.manage("GET "+conn+"/skills", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		sk, err := s.svc.GetSkills(r.Context(), a, r.PathValue("t"), r.PathValue("c"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, sk)
		return nil
	})
	s.manage("GET "+conn+"/usage", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		c, err := s.svc.ConnectionOf(r.Context(), a, r.PathValue("t"), r.PathValue("c"), bus.RoleViewer)
		if err != nil {
			return err
		}
		tier, ok := s.cfg.Tiers.Get(c.QuotaTier)
		if !ok {
			tier, _ = s.cfg.Tiers.Get("standard")
		}
		u, err := s.cfg.Limiter.Usage(r.Context(), c.ID, tier, s.svc.Clock().Now())
		if err != nil {
			return err
		}
		out := map[string]any{"connection_id": c.ID, "tier": c.QuotaTier, "day": u.Day, "requests_today": u.RequestsToday,
			"daily_quota": nil, "remaining": nil, "resets_at": bus.FormatTime(u.ResetsAt)}
		if !u.Unlimited {
			out["daily_quota"], out["remaining"] = u.DailyQuota, u.Remaining
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
	s.manageQuery("GET /v1/manage/audit", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		limit, cursor, err := pageParams(r)
		if err != nil {
			return err
		}
		page, err := s.svc.ListGlobalAudit(r.Context(), a, limit, cursor)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, page)
		return nil
	})
	s.manageQuery("GET "+ws+"/audit", func(w http.ResponseWriter, r *http.Request, a *bus.Actor) error {
		limit, cursor, err := pageParams(r)
		if err != nil {
			return err
		}
		page, err := s.svc.ListAudit(r.Context(), a, r.PathValue("t"), limit, cursor)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, page)
		return nil
	})
}
