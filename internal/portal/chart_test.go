package portal

import (
	"encoding/xml"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var chartNow = time.Date(2030, 1, 2, 12, 34, 56, 0, time.UTC)

// svgParts parses an SVG and returns its elements by name, failing the
// test when it is not well-formed XML.
func svgParts(t *testing.T, svg string) map[string][]xmlElem {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	out := map[string][]xmlElem{}
	var stack []*xmlElem
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed: %v\n%s", err, svg)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			e := &xmlElem{Attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.Attrs[a.Name.Local] = a.Value
			}
			stack = append(stack, e)
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].Text += string(tk)
			}
		case xml.EndElement:
			e := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			out[tk.Name.Local] = append(out[tk.Name.Local], *e)
		}
	}
	return out
}

type xmlElem struct {
	Attrs map[string]string
	Text  string
}

func texts(es []xmlElem) []string {
	var out []string
	for _, e := range es {
		out = append(out, strings.TrimSpace(e.Text))
	}
	return out
}

func samplesEvery(from time.Time, n int, every time.Duration, f func(i int) bus.QueueSample) []bus.QueueSample {
	var out []bus.QueueSample
	for i := range n {
		s := f(i)
		s.At = from.Add(time.Duration(i) * every)
		out = append(out, s)
	}
	return out
}

// TestQueueChartHour: the hour chart is a well-formed, labelled SVG with a
// title and description for screen readers, a legend naming the three
// series, a y axis up to a round number above the highest count, x labels
// every 10 minutes, and one path per series.
func TestQueueChartHour(t *testing.T) {
	samples := samplesEvery(chartNow.Add(-time.Hour).Truncate(10*time.Second).Add(10*time.Second), 360, 10*time.Second, func(i int) bus.QueueSample {
		return bus.QueueSample{Ready: int64(i % 37), InFlight: 3, DeadLetters: int64(i / 100)}
	})
	q := newQueueChart("qc", samples, chartNow, "1h", 10*time.Second)
	parts := svgParts(t, string(q.SVG))
	svg := parts["svg"][0]
	if svg.Attrs["role"] != "img" || svg.Attrs["aria-labelledby"] != "qc-title qc-desc" {
		t.Errorf("svg attributes: %v", svg.Attrs)
	}
	if got := texts(parts["title"]); len(got) != 4 || got[0] != "Queue counts over the last hour" {
		// The chart's title, then one per line.
		t.Errorf("titles: %q", got)
	}
	if d := texts(parts["desc"]); len(d) != 1 || !strings.Contains(d[0], "ready 26 now, at most 36; in flight 3 now, at most 3; dead letters 3 now, at most 3") {
		t.Errorf("desc: %q", d)
	}
	all := strings.Join(texts(parts["text"]), "|")
	for _, want := range []string{"|Ready|In flight|Dead letters", "0|10|20|30|40|", "11:40|11:50|12:00|12:10|12:20|12:30|", "Time (UTC)", "Messages"} {
		if !strings.Contains(all, want) {
			t.Errorf("texts %q lack %q", all, want)
		}
	}
	paths := parts["path"]
	if len(paths) != 3 {
		t.Fatalf("%d paths, want 3", len(paths))
	}
	for i, p := range paths {
		if n := strings.Count(p.Attrs["d"], "M"); n != 1 {
			t.Errorf("path %d has %d segments, want 1 (no gap)", i, n)
		}
		if n := strings.Count(p.Attrs["d"], "L"); n != 359 {
			t.Errorf("path %d joins %d points, want 359", i, n)
		}
	}
	// The series differ by dash as well as colour.
	if paths[0].Attrs["stroke-dasharray"] != "" || paths[1].Attrs["stroke-dasharray"] == "" || paths[2].Attrs["stroke-dasharray"] == paths[1].Attrs["stroke-dasharray"] {
		t.Errorf("dash patterns: %q %q %q", paths[0].Attrs["stroke-dasharray"], paths[1].Attrs["stroke-dasharray"], paths[2].Attrs["stroke-dasharray"])
	}
	// The table: 13 rows of 5 minutes, newest first, the highest counts in each.
	if len(q.Rows) != 13 || q.RowSpan != "5 minutes" {
		t.Fatalf("%d rows of %s, want 13 of 5 minutes", len(q.Rows), q.RowSpan)
	}
	if r := q.Rows[0]; r.From != "12:30" || r.To != "12:35" || !r.Sampled || r.InFlight != 3 || r.DeadLetters != 3 {
		t.Errorf("first row %+v", r)
	}
	if r := q.Rows[12]; r.From != "11:30" || r.Sampled {
		t.Errorf("last row %+v: before the first sample", r)
	}
}

// yOf returns the y coordinates of a path's points.
func yOf(t *testing.T, d string) []string {
	t.Helper()
	var ys []string
	for _, m := range regexp.MustCompile(`[ML]([0-9.]+) ([0-9.]+)`).FindAllStringSubmatch(d, -1) {
		ys = append(ys, m[2])
	}
	return ys
}

// TestQueueChartScale: counts map onto the plot linearly from 0 at the
// bottom to the round maximum at the top.
func TestQueueChartScale(t *testing.T) {
	samples := []bus.QueueSample{
		{At: chartNow.Add(-30 * time.Second), Ready: 0},
		{At: chartNow.Add(-20 * time.Second), Ready: 50},
		{At: chartNow.Add(-10 * time.Second), Ready: 100},
	}
	q := newQueueChart("qc", samples, chartNow, "1h", 10*time.Second)
	parts := svgParts(t, string(q.SVG))
	// Plot from y=40 (top) to y=240 (bottom); the top is 100.
	if got := yOf(t, parts["path"][0].Attrs["d"]); strings.Join(got, ",") != "240,140,40" {
		t.Errorf("ready ys = %v, want 240,140,40", got)
	}
	if got := texts(parts["text"]); !strings.Contains(strings.Join(got, "|"), "0|25|50|75|100|") {
		t.Errorf("y labels: %q", got)
	}
}

// TestQueueChartGaps: where the bus took no sample for longer than two
// intervals the line breaks; a lone sample is drawn as a dot.
func TestQueueChartGaps(t *testing.T) {
	var samples []bus.QueueSample
	for _, ago := range []time.Duration{50 * time.Minute, 49*time.Minute + 50*time.Second, 30 * time.Minute, 10 * time.Minute, 9*time.Minute + 50*time.Second} {
		samples = append(samples, bus.QueueSample{At: chartNow.Add(-ago), Ready: 1})
	}
	q := newQueueChart("qc", samples, chartNow, "1h", 10*time.Second)
	d := svgParts(t, string(q.SVG))["path"][0].Attrs["d"]
	if n := strings.Count(d, "M"); n != 3 {
		t.Errorf("path %q has %d segments, want 3", d, n)
	}
	if n := strings.Count(d, "h0"); n != 1 {
		t.Errorf("path %q has %d dots, want 1 (the lone sample 30 minutes ago)", d, n)
	}
}

// TestQueueChartDay: a day of samples every 10 s is drawn with at most
// chartMaxDots points a line, each the highest of its run, so a peak of
// one sample stays visible; x labels every 3 hours; 25 table rows of an
// hour.
func TestQueueChartDay(t *testing.T) {
	from := chartNow.Add(-24 * time.Hour).Truncate(10 * time.Second).Add(10 * time.Second)
	samples := samplesEvery(from, 8640, 10*time.Second, func(i int) bus.QueueSample {
		if i == 4321 {
			return bus.QueueSample{DeadLetters: 500}
		}
		return bus.QueueSample{Ready: 2}
	})
	q := newQueueChart("qc", samples, chartNow, "24h", 10*time.Second)
	parts := svgParts(t, string(q.SVG))
	for i, p := range parts["path"] {
		if n := strings.Count(p.Attrs["d"], "L") + strings.Count(p.Attrs["d"], "M"); n > chartMaxDots+1 || n < chartMaxDots-1 {
			t.Errorf("path %d has %d points, want about %d", i, n, chartMaxDots)
		}
		if n := strings.Count(p.Attrs["d"], "M"); n != 1 {
			t.Errorf("path %d has %d segments, want 1", i, n)
		}
	}
	// The y axis goes to 600 in steps of 200: 500 is at 240 - 200*5/6.
	if ys := yOf(t, parts["path"][2].Attrs["d"]); !contains(ys, "73.3") {
		t.Errorf("the dead-letter peak is not drawn: %v", ys)
	}
	all := strings.Join(texts(parts["text"]), "|")
	if !strings.Contains(all, "15:00|18:00|21:00|00:00|03:00|06:00|09:00|12:00") {
		t.Errorf("x labels: %q", all)
	}
	if len(q.Rows) != 25 || q.RowSpan != "1 hour" || q.Label != "the last 24 hours" {
		t.Errorf("%d rows of %s (%s)", len(q.Rows), q.RowSpan, q.Label)
	}
	peak := 0
	for _, r := range q.Rows {
		if r.DeadLetters == 500 {
			peak++
		}
	}
	if peak != 1 {
		t.Errorf("%d table rows show the peak, want 1", peak)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestQueueChartEmpty: without samples the chart still has its axes and
// legend, says so in the picture and in words, and lists the rows as not
// sampled; an unknown window is the hour.
func TestQueueChartEmpty(t *testing.T) {
	q := newQueueChart("qc", nil, chartNow, "7d", 10*time.Second)
	if q.Window != "1h" {
		t.Errorf("window %q, want 1h", q.Window)
	}
	parts := svgParts(t, string(q.SVG))
	if len(parts["path"]) != 0 {
		t.Errorf("%d paths without samples", len(parts["path"]))
	}
	all := strings.Join(texts(parts["text"]), "|")
	if !strings.Contains(all, "No samples yet") || !strings.Contains(all, "Dead letters") {
		t.Errorf("texts: %q", all)
	}
	if !strings.HasPrefix(q.Summary, "No samples in the last hour yet") {
		t.Errorf("summary %q", q.Summary)
	}
	for _, r := range q.Rows {
		if r.Sampled {
			t.Errorf("row %+v sampled", r)
		}
	}
}

// TestLineChartEscapes: text put into the chart is escaped.
func TestLineChartEscapes(t *testing.T) {
	svg := string(renderLineChart(lineChart{ID: `a"b`, Title: "<script>x</script>", Desc: "a & b", End: chartNow,
		Series: []chartSeries{{Name: `<b>"x"</b>`, Color: `red" onload="x`, Points: []chartPoint{{chartNow.Add(-time.Minute), 1}}}}}))
	parts := svgParts(t, svg)
	if strings.Contains(svg, "<script>") || strings.Contains(svg, "<b>") || strings.Contains(svg, `" onload`) {
		t.Fatalf("unescaped text in %s", svg)
	}
	if got := texts(parts["desc"]); got[0] != "a & b" {
		t.Errorf("desc %q", got)
	}
}

// TestLineChartLongSpan: a chart of years still has a few x labels.
func TestLineChartLongSpan(t *testing.T) {
	svg := string(renderLineChart(lineChart{ID: "c", Start: chartNow.AddDate(-3, 0, 0), End: chartNow}))
	if n := len(svgParts(t, svg)["text"]); n > 20 {
		t.Errorf("%d texts for a 3-year span", n)
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ top, max, step float64 }{
		{0, 4, 1}, {1, 4, 1}, {3, 4, 1}, {4, 4, 1}, {5, 6, 2}, {7, 8, 2}, {10, 10, 5}, {36, 40, 10}, {99, 100, 25}, {1234, 1500, 500},
	} {
		if m, s := niceScale(tc.top); m != tc.max || s != tc.step {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tc.top, m, s, tc.max, tc.step)
		}
	}
}
