package loadcheck

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverEveryValue(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<20; v++ {
		i := bucket(v)
		if i != prev && i != prev+1 {
			t.Fatalf("bucket(%d) = %d after %d", v, i, prev)
		}
		if lowest(i) > v || lowest(i+1) <= v {
			t.Fatalf("%d in bucket %d of [%d, %d)", v, i, lowest(i), lowest(i+1))
		}
		prev = i
	}
}

// TestHistogramQuantiles compares the histogram's quantiles with those of
// the sorted samples: within 1 %.
func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h histogram
	var all []time.Duration
	for range 100000 {
		d := time.Duration(r.ExpFloat64() * float64(3*time.Millisecond))
		h.add(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		want := all[int(q*float64(len(all))+0.999999)-1]
		got := h.quantile(q)
		if diff := float64(got-want) / float64(want); diff > 0.01 || diff < -0.01 {
			t.Errorf("q%.2f = %v, want %v (%.2f %%)", q, got, want, 100*diff)
		}
	}
	if l := latency(&h); l.Count != 100000 || l.Max != ms(all[len(all)-1]) {
		t.Fatalf("latency %+v, max %v", l, all[len(all)-1])
	}
	if len(h.counts) > 3000 {
		t.Fatalf("%d buckets", len(h.counts))
	}
}
