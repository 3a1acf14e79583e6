package server_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/server/servertest"
)

var metricName = regexp.MustCompile(`sombus_[a-zA-Z0-9_]+`)

// exprs collects every "expr" string of a Grafana dashboard, in panels and
// rows at any depth.
func exprs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "expr" {
				*out = append(*out, s)
			} else {
				exprs(e, out)
			}
		}
	case []any:
		for _, e := range x {
			exprs(e, out)
		}
	}
}

// family is the metric family a series name of a query belongs to in s:
// the name itself, or for a histogram's _bucket, _sum and _count series the
// histogram ("" when s has none).
func (s scrape) family(name string) string {
	if _, ok := s["# TYPE "+name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if typ, found := s["# TYPE "+base]; ok && found && typ == familyTypes["histogram"] {
			return base
		}
	}
	return ""
}

// Every sombus_ metric the Grafana dashboard queries exists in a scrape of
// a node after traffic, and docs/metrics.md documents exactly the sombus_
// families the node serves.
func TestDashboardAndDocsNameServedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json is not JSON: %v", err)
	}
	for _, k := range []string{"title", "uid", "panels", "schemaVersion"} {
		if _, ok := dash[k]; !ok {
			t.Errorf("the dashboard has no %q", k)
		}
	}
	var qs []string
	exprs(dash["panels"], &qs)
	if len(qs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(qs))
	}

	n := servertest.Start(t, servertest.Options{})
	traffic(t, n)
	s := scrapeAt(t, n, n.URL)

	used := map[string]bool{}
	for _, q := range qs {
		names := metricName.FindAllString(q, -1)
		if len(names) == 0 {
			t.Errorf("query %q uses no sombus_ metric", q)
		}
		for _, name := range names {
			f := s.family(name)
			if f == "" {
				t.Errorf("the dashboard queries %s, which the node does not serve (query %q)", name, q)
				continue
			}
			used[f] = true
		}
	}

	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(sombus_[a-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	var served []string
	for k := range s {
		if f, ok := strings.CutPrefix(k, "# TYPE "); ok && strings.HasPrefix(f, "sombus_") {
			served = append(served, f)
		}
	}
	sort.Strings(served)
	for _, f := range served {
		if !documented[f] {
			t.Errorf("docs/metrics.md does not document %s", f)
		}
		if !used[f] {
			t.Errorf("the dashboard does not show %s", f)
		}
		delete(documented, f)
	}
	for f := range documented {
		t.Errorf("docs/metrics.md documents %s, which the node does not serve", f)
	}
}
