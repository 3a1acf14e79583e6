package loadcheck

import (
	"math/bits"
	"time"
)

// histogram counts latencies in microseconds, in buckets a 128th of an
// octave wide (a value's bucket is within 0.8 % of it): a run's samples
// take the same few kilobytes however long it lasts. Count and Max are
// exact.
type histogram struct {
	counts []int64
	n      int64
	max    time.Duration
}

// subBits: 1 << subBits buckets an octave.
const subBits = 7

// bucket returns the bucket of v microseconds: v itself below 2 << subBits,
// else the octave's index times 1 << subBits plus v's top subBits+1 bits.
func bucket(v uint64) int {
	if v < 2<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1
	return e<<subBits + int(v>>e)
}

// lowest returns the smallest value of bucket i (the inverse of bucket).
func lowest(i int) uint64 {
	if i < 2<<subBits {
		return uint64(i)
	}
	e := i>>subBits - 1
	return uint64(i-e<<subBits) << e
}

func (h *histogram) add(d time.Duration) {
	us := uint64(max(d, 0) / time.Microsecond)
	i := bucket(us)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

// quantile returns the q-quantile (the smallest sample with at least a
// fraction q of the samples at or below it), as the middle of its bucket,
// never above the largest sample.
func (h *histogram) quantile(q float64) time.Duration {
	rank := max(1, int64(q*float64(h.n)+0.999999))
	var seen int64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			lo, hi := lowest(i), lowest(i+1)
			mid := time.Duration(lo+(hi-lo)/2) * time.Microsecond
			return min(mid, h.max)
		}
	}
	return h.max
}

// latency sums up samples.
func latency(h *histogram) Latency {
	if h.n == 0 {
		return Latency{}
	}
	return Latency{Count: h.n, P50: ms(h.quantile(0.50)), P90: ms(h.quantile(0.90)), P99: ms(h.quantile(0.99)), Max: ms(h.max)}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
