package bus

// QueueGauge is one consumer queue's counts with the connection it belongs
// to, as a metrics scrape reads them.
type QueueGauge struct {
	WorkspaceID  string
	ConnectionID string
	QueueStats
}
