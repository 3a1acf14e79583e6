package edge

import "net/http"

// Recorded runs h on r with a writer that keeps only the status and the
// headers, and returns them: how a server learns which answer the standard
// mux would give (its 404, its 405 with Allow, its redirects to a clean
// path) without sending the mux's plain-text body. httptest's recorder
// would do, but it links the testing package into the binary.
func Recorded(h http.Handler, r *http.Request) (status int, header http.Header) {
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	return rec.code, rec.header
}

// statusRecorder keeps the first status and the headers written to it and
// drops the body.
type statusRecorder struct {
	header http.Header
	code   int
}

func (r *statusRecorder) Header() http.Header { return r.header }

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(p), nil
}
