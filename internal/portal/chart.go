package portal

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// The queue picture: a consumer queue's samples (ready, in flight, dead
// letters) over the last hour or day, drawn as an SVG line chart on the
// server (no script, nothing loaded from elsewhere), with a summary and a
// table for readers who cannot see the lines.

// chartWidth and chartHeight are the SVG's own units; the page scales it
// to the width of its column.
const (
	chartWidth   = 720
	chartHeight  = 280
	chartLeft    = 56 // room for the y labels
	chartRight   = 16
	chartTop     = 40 // room for the legend
	chartBottom  = 40 // room for the x labels
	chartMaxDots = 360
)

// chartSeries is one line: its name, colour and dash pattern (so the lines
// differ without colour too), and its points in time order.
type chartSeries struct {
	Name   string
	Color  string
	Dash   string // stroke-dasharray; "" for a solid line
	Points []chartPoint
}

type chartPoint struct {
	T time.Time
	V float64
}

// lineChart is what renderLineChart draws.
type lineChart struct {
	ID         string // prefix of the element ids (unique in the page)
	Title      string // the chart's accessible name
	Desc       string // a sentence saying what the lines show
	Start, End time.Time
	// Gap: two points further apart than this are not joined (the bus did
	// not sample in between: it was stopped or unreachable).
	Gap    time.Duration
	YLabel string
	Empty  string // the text drawn when no series has a point
	Series []chartSeries
}

// renderLineChart draws c as SVG: a y axis from 0 to a round maximum, an x
// axis in UTC with round times, one path per series, and a legend.
func renderLineChart(c lineChart) template.HTML {
	var b strings.Builder
	esc := template.HTMLEscapeString
	plotW := float64(chartWidth - chartLeft - chartRight)
	plotH := float64(chartHeight - chartTop - chartBottom)
	span := c.End.Sub(c.Start)
	if span <= 0 || c.Start.IsZero() {
		span = time.Hour
		c.Start = c.End.Add(-span)
	}
	top := 0.0
	points := 0
	for _, s := range c.Series {
		for _, p := range s.Points {
			top = math.Max(top, p.V)
			points++
		}
	}
	ymax, ystep := niceScale(top)
	x := func(t time.Time) float64 {
		return chartLeft + plotW*float64(t.Sub(c.Start))/float64(span)
	}
	y := func(v float64) float64 { return chartTop + plotH - plotH*v/ymax }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="100%%" viewBox="0 0 %d %d" role="img" aria-labelledby="%s-title %s-desc" font-family="system-ui, sans-serif" font-size="12">`,
		chartWidth, chartHeight, esc(c.ID), esc(c.ID))
	fmt.Fprintf(&b, `<title id="%s-title">%s</title><desc id="%s-desc">%s</desc>`, esc(c.ID), esc(c.Title), esc(c.ID), esc(c.Desc))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, chartWidth, chartHeight)

	// The y axis: grid lines and labels at each step.
	b.WriteString(`<g class="chart-y" fill="#374151" text-anchor="end">`)
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		yy := y(v)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e5e7eb"/>`, num(chartLeft), num(yy), num(chartLeft+plotW), num(yy))
		fmt.Fprintf(&b, `<text x="%s" y="%s">%s</text>`, num(chartLeft-6), num(yy+4), esc(countLabel(v)))
	}
	fmt.Fprintf(&b, `<text x="12" y="%s" text-anchor="middle" transform="rotate(-90 12 %s)">%s</text>`,
		num(chartTop+plotH/2), num(chartTop+plotH/2), esc(c.YLabel))
	b.WriteString(`</g>`)

	// The x axis: ticks at round times.
	step := timeStep(span)
	b.WriteString(`<g class="chart-x" fill="#374151" text-anchor="middle">`)
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#6b7280"/>`, num(chartLeft), num(chartTop+plotH), num(chartLeft+plotW), num(chartTop+plotH))
	for t := c.Start.Truncate(step); !t.After(c.End); t = t.Add(step) {
		if t.Before(c.Start) {
			continue
		}
		xx := x(t)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#6b7280"/>`, num(xx), num(chartTop+plotH), num(xx), num(chartTop+plotH+5))
		fmt.Fprintf(&b, `<text x="%s" y="%s">%s</text>`, num(xx), num(chartTop+plotH+18), t.UTC().Format("15:04"))
	}
	fmt.Fprintf(&b, `<text x="%s" y="%d">%s</text>`, num(chartLeft+plotW/2), chartHeight-4, "Time (UTC)")
	b.WriteString(`</g>`)

	// The lines.
	for i, s := range c.Series {
		var d strings.Builder
		var prev time.Time
		for j, p := range s.Points {
			if p.T.Before(c.Start) || p.T.After(c.End) {
				continue
			}
			cmd := "L"
			if j == 0 || prev.IsZero() || (c.Gap > 0 && p.T.Sub(prev) > c.Gap) {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%s %s ", cmd, num(x(p.T)), num(y(p.V)))
			if cmd == "M" && (j+1 == len(s.Points) || (c.Gap > 0 && s.Points[j+1].T.Sub(p.T) > c.Gap)) {
				d.WriteString("h0 ") // a lone point: the round cap draws a dot
			}
			prev = p.T
		}
		if d.Len() == 0 {
			continue
		}
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, esc(s.Dash))
		}
		fmt.Fprintf(&b, `<path class="chart-line chart-line-%d" d="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" stroke-linecap="round"%s><title>%s</title></path>`,
			i, strings.TrimSpace(d.String()), esc(s.Color), dash, esc(s.Name))
	}
	if points == 0 && c.Empty != "" {
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" fill="#374151">%s</text>`, num(chartLeft+plotW/2), num(chartTop+plotH/2), esc(c.Empty))
	}

	// The legend, above the plot.
	b.WriteString(`<g class="chart-legend" fill="#111827">`)
	lx := float64(chartLeft)
	for _, s := range c.Series {
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, esc(s.Dash))
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="16" x2="%s" y2="16" stroke="%s" stroke-width="3"%s/>`, num(lx), num(lx+24), esc(s.Color), dash)
		fmt.Fprintf(&b, `<text x="%s" y="20">%s</text>`, num(lx+30), esc(s.Name))
		lx += 30 + 8*float64(len(s.Name)) + 24
	}
	b.WriteString(`</g></svg>`)
	return template.HTML(b.String()) //nolint:gosec // built above with every text escaped
}

// niceScale returns a round top for the y axis, at or above top, and the
// step between its grid lines (whole numbers: counts are whole).
func niceScale(top float64) (ymax, step float64) {
	if top <= 0 {
		return 4, 1
	}
	raw := top / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 1
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		c := m * mag
		if c != math.Trunc(c) {
			continue // counts are whole: so are the steps
		}
		if step = c; c >= raw {
			break
		}
	}
	step = math.Max(1, step)
	ymax = math.Ceil(top/step) * step
	if step == 1 {
		ymax = math.Max(ymax, 4) // small counts do not fill the whole height
	}
	return ymax, step
}

// timeStep is the distance between two x ticks for a chart spanning span.
func timeStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour} {
		if span/s <= 8 {
			return s
		}
	}
	return (span / 8).Truncate(24*time.Hour) + 24*time.Hour
}

// num formats a coordinate with at most one decimal.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// countLabel formats a y label: 1200 as 1.2k, 3000000 as 3M.
func countLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}

// Chart windows a page may ask for.
var chartWindows = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour}

// queueChart is a queue's picture for a page: the SVG, a summary sentence
// and a table of the highest counts in each part of the window.
type queueChart struct {
	Window  string // "1h" or "24h"
	Label   string // "the last hour", "the last 24 hours"
	SVG     template.HTML
	Summary string
	// RowSpan says how long each row of Rows covers ("5 minutes", "1 hour").
	RowSpan string
	Rows    []queueChartRow
}

// queueChartRow holds the highest counts sampled in one part of the
// window; Sampled is false when the bus took no sample in it.
type queueChartRow struct {
	From, To                     string
	Sampled                      bool
	Ready, InFlight, DeadLetters int64
}

// newQueueChart draws samples (oldest first) over the window ending at now.
// every is the sampling interval. Beyond chartMaxDots samples, each dot is
// the highest count of a run of samples, so a short peak stays visible.
func newQueueChart(id string, samples []bus.QueueSample, now time.Time, window string, every time.Duration) queueChart {
	span, ok := chartWindows[window]
	if !ok {
		window, span = "1h", time.Hour
	}
	label := "the last hour"
	rowSpan, rowLabel := 5*time.Minute, "5 minutes"
	if span > time.Hour {
		label = "the last 24 hours"
		rowSpan, rowLabel = time.Hour, "1 hour"
	}
	start := now.Add(-span)
	var in []bus.QueueSample
	for _, s := range samples {
		if !s.At.Before(start) && !s.At.After(now) {
			in = append(in, s)
		}
	}
	gap := 2*every + every/2
	dots := in
	if len(in) > chartMaxDots {
		width := span / chartMaxDots
		dots = mergeSamples(in, start, width)
		gap = max(gap, 2*width+width/2)
	}
	series := []chartSeries{
		{Name: "Ready", Color: "#1d4ed8"},
		{Name: "In flight", Color: "#b45309", Dash: "8 4"},
		{Name: "Dead letters", Color: "#b91c1c", Dash: "2 4"},
	}
	for _, s := range dots {
		series[0].Points = append(series[0].Points, chartPoint{s.At, float64(s.Ready)})
		series[1].Points = append(series[1].Points, chartPoint{s.At, float64(s.InFlight)})
		series[2].Points = append(series[2].Points, chartPoint{s.At, float64(s.DeadLetters)})
	}

	q := queueChart{Window: window, Label: label, RowSpan: rowLabel}
	if len(in) == 0 {
		q.Summary = fmt.Sprintf("No samples in %s yet: the bus records this queue's counts every %s.", label, every)
	} else {
		var top bus.QueueSample
		for _, s := range in {
			top.Ready = max(top.Ready, s.Ready)
			top.InFlight = max(top.InFlight, s.InFlight)
			top.DeadLetters = max(top.DeadLetters, s.DeadLetters)
		}
		last := in[len(in)-1]
		q.Summary = fmt.Sprintf("Over %s (%d samples, the last at %s UTC): ready %d now, at most %d; in flight %d now, at most %d; dead letters %d now, at most %d.",
			label, len(in), last.At.UTC().Format("15:04:05"), last.Ready, top.Ready, last.InFlight, top.InFlight, last.DeadLetters, top.DeadLetters)
	}
	q.SVG = renderLineChart(lineChart{
		ID:     id,
		Title:  "Queue counts over " + label,
		Desc:   q.Summary,
		Start:  start,
		End:    now,
		Gap:    gap,
		YLabel: "Messages",
		Empty:  "No samples yet",
		Series: series,
	})

	// The table: one row per part of the window, newest first.
	for from := now.Truncate(rowSpan); from.Add(rowSpan).After(start); from = from.Add(-rowSpan) {
		row := queueChartRow{From: from.UTC().Format("15:04"), To: from.Add(rowSpan).UTC().Format("15:04")}
		for _, s := range in {
			if s.At.Before(from) || !s.At.Before(from.Add(rowSpan)) {
				continue
			}
			row.Sampled = true
			row.Ready = max(row.Ready, s.Ready)
			row.InFlight = max(row.InFlight, s.InFlight)
			row.DeadLetters = max(row.DeadLetters, s.DeadLetters)
		}
		q.Rows = append(q.Rows, row)
	}
	return q
}

// mergeSamples groups samples (oldest first) into runs of width from start
// and keeps, for each run, its first time and the highest counts in it.
func mergeSamples(in []bus.QueueSample, start time.Time, width time.Duration) []bus.QueueSample {
	var out []bus.QueueSample
	cur := int64(-1)
	for _, s := range in {
		k := int64(s.At.Sub(start) / width)
		if k != cur || len(out) == 0 {
			cur = k
			out = append(out, bus.QueueSample{At: start.Add(time.Duration(k) * width)})
		}
		o := &out[len(out)-1]
		o.Ready = max(o.Ready, s.Ready)
		o.InFlight = max(o.InFlight, s.InFlight)
		o.Delayed = max(o.Delayed, s.Delayed)
		o.DeadLetters = max(o.DeadLetters, s.DeadLetters)
	}
	return out
}
