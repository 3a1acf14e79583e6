# Everyday targets. `make help` lists them.
GOLANGCI_LINT_VERSION ?= v2.15.0
# FUZZTIME is how long `make fuzz` runs each fuzz target.
FUZZTIME ?= 60s
# COMPARE_FLAGS are passed to tools/compare (make compare COMPARE_FLAGS='-runs 5 -messages 20000').
COMPARE_FLAGS ?=

.PHONY: help build run test test-short lint bench compare fuzz crash-long ci
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
build: ## build the sombus binary into ./bin
	go build -o bin/sombus ./cmd/sombus
run: ## run a node on 127.0.0.1:8080 with ./sombus.db
	go run ./cmd/sombus serve
test: ## run every test with the race detector (needs PostgreSQL, see README)
	go test -race ./...
test-short: ## quick tests without the race detector
	go test -short ./...
lint: ## go vet and golangci-lint
	go vet ./...
	go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...
bench: ## the message-path benchmarks over HTTP (see docs/benchmarks.md)
	go test -run '^$$' -bench . -benchtime 3s ./internal/bench/
compare: ## sombus next to a bare net/http server, NATS JetStream and a plain PostgreSQL table (tools/compare/README.md)
	bash tools/compare/run.sh $(COMPARE_FLAGS)
fuzz: ## run every fuzz target for FUZZTIME each (make fuzz FUZZTIME=5m)
	FUZZTIME=$(FUZZTIME) bash .ci/fuzz
crash-long: ## the crash and fault tests' long forms: 50 SIGKILLs per store, 20 PostgreSQL cuts, 10 node kills (needs PostgreSQL)
	go test -race -count=1 -timeout 30m -v -run . ./internal/faulttest/ -args -long
ci: ## what CI runs
	bash .ci/run
