package postgres

import (
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

// BenchmarkPublishConsumers publishes single messages into a workspace of
// 1 and of 1,000 consumers (storetest.BenchPublishConsumers), each run on a
// schema of its own.
func BenchmarkPublishConsumers(b *testing.B) {
	storetest.BenchPublishConsumers(b, func(b *testing.B) bus.Store { return OpenTest(b) })
}
