package httpapi

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/jsonenc"
)

// The answers of the message routes (publish, receive, ack, nack) are
// written by hand into pooled buffers: byte for byte what encoding/json
// wrote for them (the field order of their types, omitempty, json.Marshal's
// HTML escaping where the answer was built with it), without reflection,
// maps or a fresh buffer per request. Tests compare both encodings.

// maxPooledBuffer is the largest answer buffer kept for reuse: a larger one
// (a receive of big envelopes) is left to the garbage collector, so that
// the pool does not hold on to rare peaks.
const maxPooledBuffer = 1 << 20

var bufferPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// getBuffer returns an empty buffer of at least size bytes.
func getBuffer(size int) *[]byte {
	b := bufferPool.Get().(*[]byte)
	if cap(*b) < size {
		*b = make([]byte, 0, size)
	}
	*b = (*b)[:0]
	return b
}

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		bufferPool.Put(b)
	}
}

// Header values shared by every answer (full slices: an Add to one copies
// it), set without Header.Set's allocation of a fresh slice.
var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// writeBody writes a JSON answer built in b and gives b back to the pool.
//
// The answer is whole before it is written, so it goes with its
// Content-Length: net/http otherwise sends an answer over 2 KiB chunked,
// and the chunk's end and the closing chunk in writes of their own (a
// receive of 10 messages of 1 KiB took four writes to the socket, and
// the client read its answer whole only after the handler had returned).
// With the length it takes two writes, the second of them by the Write
// below, so the caller has the whole answer once writeBody returns.
func writeBody(w http.ResponseWriter, status int, b *[]byte) error {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(*b))}
	w.WriteHeader(status)
	_, err := w.Write(*b)
	putBuffer(b)
	return err
}

// appendPublishResult appends r as encoding/json writes a bus.PublishResult
// (without HTML escaping, as writeJSON).
func appendPublishResult(dst []byte, r *bus.PublishResult) []byte {
	if r.Accepted {
		dst = append(dst, `{"accepted":true`...)
	} else {
		dst = append(dst, `{"accepted":false`...)
	}
	if r.MessageID != "" {
		dst = append(dst, `,"message_id":`...)
		dst = jsonenc.AppendString(dst, r.MessageID, false)
	}
	if r.Topic != "" {
		dst = append(dst, `,"topic":`...)
		dst = jsonenc.AppendString(dst, r.Topic, false)
	}
	if r.Deliveries != nil {
		dst = append(dst, `,"deliveries":`...)
		dst = strconv.AppendInt(dst, int64(*r.Deliveries), 10)
	}
	if r.Duplicate {
		dst = append(dst, `,"duplicate":true`...)
	}
	if len(r.Violations) > 0 {
		dst = append(dst, `,"violations":[`...)
		for i, v := range r.Violations {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"rule":`...)
			dst = jsonenc.AppendString(dst, v.Rule, false)
			dst = append(dst, `,"message":`...)
			dst = jsonenc.AppendString(dst, cutText(v.Message, maxMessageBytes), false)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendPublishResults appends {"results":[…]}, the answer of a batch.
func appendPublishResults(dst []byte, rs []bus.PublishResult) []byte {
	dst = append(dst, `{"results":[`...)
	for i := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendPublishResult(dst, &rs[i])
	}
	return append(dst, "]}\n"...)
}

// appendSettled appends the answer of an ack (key "acked") or a nack
// ("nacked"): the handles settled and those that failed, in the key order
// of the map encoding/json wrote it from.
func appendSettled(dst []byte, key string, res []bus.HandleResult) []byte {
	okList := func(dst []byte) []byte {
		dst = append(dst, '"')
		dst = append(dst, key...)
		dst = append(dst, `":[`...)
		first := true
		for i := range res {
			if res[i].OK {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				dst = jsonenc.AppendString(dst, res[i].ReceiptHandle, false)
			}
		}
		return append(dst, ']')
	}
	failedList := func(dst []byte) []byte {
		dst = append(dst, `"failed":[`...)
		first := true
		for i := range res {
			h := &res[i]
			if h.OK {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, `{"receipt_handle":`...)
			dst = jsonenc.AppendString(dst, h.ReceiptHandle, false)
			if h.Code != "" {
				dst = append(dst, `,"code":`...)
				dst = jsonenc.AppendString(dst, h.Code, false)
			}
			if h.Message != "" {
				dst = append(dst, `,"message":`...)
				dst = jsonenc.AppendString(dst, h.Message, false)
			}
			dst = append(dst, '}')
		}
		return append(dst, ']')
	}
	dst = append(dst, '{')
	if key < "failed" {
		dst = append(okList(dst), ',')
		dst = failedList(dst)
	} else {
		dst = append(failedList(dst), ',')
		dst = okList(dst)
	}
	return append(dst, "}\n"...)
}

// appendMessages appends {"messages":[…]}, the answer of a receive, with
// each envelope exactly as it was accepted (encoding/json would re-format
// it) and the other fields as json.Marshal wrote a wireMessage (with HTML
// escaping).
func (s *Server) appendMessages(dst []byte, ds []bus.Delivery) []byte {
	dst = append(dst, `{"messages":[`...)
	for i := range ds {
		d := &ds[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"receipt_handle":"`...)
		dst = s.svc.AppendHandle(dst, d.Handle) // base64url: nothing to escape
		dst = append(dst, `","message_type":`...)
		dst = jsonenc.AppendString(dst, d.MessageType, true)
		dst = append(dst, `,"correlation_id":`...)
		dst = jsonenc.AppendString(dst, d.CorrelationID, true)
		dst = append(dst, `,"topic":`...)
		dst = jsonenc.AppendString(dst, d.Topic, true)
		dst = append(dst, `,"producer_id":`...)
		dst = jsonenc.AppendString(dst, d.ProducerID, true)
		dst = append(dst, `,"receive_count":`...)
		dst = strconv.AppendInt(dst, int64(d.ReceiveCount), 10)
		dst = append(dst, `,"enqueued_at":"`...)
		dst = d.EnqueuedAt.UTC().AppendFormat(dst, bus.TimeFormat)
		dst = append(dst, `","envelope":`...)
		dst = append(dst, d.Envelope...)
		dst = append(dst, '}')
	}
	return append(dst, "]}\n"...)
}

// messagesSize is about the size of the receive answer of ds.
func messagesSize(ds []bus.Delivery) int {
	n := 16
	for i := range ds {
		d := &ds[i]
		n += 256 + len(d.Envelope) + len(d.Handle.QueueID)*4/3 + len(d.MessageType) + len(d.CorrelationID) + len(d.Topic) + len(d.ProducerID)
	}
	return n
}
