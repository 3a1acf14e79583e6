#!/usr/bin/env bash
# The whole comparison in one command (from the repository's root:
# `make compare`, or `bash tools/compare/run.sh [compare flags]`):
#
#  - builds sombus (from this checkout) and the compare tool;
#  - installs nats-server $NATS_VERSION with `go install` unless
#    $NATS_SERVER names a binary;
#  - makes three fresh databases on $PG (dropping them first):
#    sombus_compare for a sombus node, sombus_compare_two for two nodes,
#    sombus_compare_plain for the plain table;
#  - starts sombus nodes with their default settings on free ports of
#    127.0.0.1: one on a SQLite file in a new directory under $COMPARE_DIR
#    (default: the system's temporary directory, which must be on a real
#    disk, not tmpfs, for fsyncs to cost what they cost), one on
#    PostgreSQL, and two sharing another PostgreSQL database (TWO_NODES=0
#    leaves these out);
#  - runs the tool against the floor, NATS JetStream (a server it starts
#    itself), the plain table and the nodes, passing on its own arguments
#    (-runs, -messages, …); the table goes to standard output;
#  - stops what it started.
set -euo pipefail
cd "$(dirname "$0")/../.."

PG="${PG:-postgres://postgres@127.0.0.1:5432}"
NATS_VERSION="${NATS_VERSION:-v2.15.2}"
NATS_SERVER="${NATS_SERVER:-}"
COMPARE_DIR="${COMPARE_DIR:-${TMPDIR:-/tmp}}"
TWO_NODES="${TWO_NODES:-1}"
# Nodes sharing a store must write the same issuer into tokens; the URL
# need not resolve.
PUBLIC_URL=http://sombus-compare.test

work="$(mktemp -d "$COMPARE_DIR/sombus-compare-XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "== build" >&2
go build -o "$work/sombus" ./cmd/sombus
(cd tools/compare && go build -o "$work/compare" .)

if [ -z "$NATS_SERVER" ]; then
  NATS_SERVER="$(go env GOPATH)/bin/nats-server"
  if ! [ -x "$NATS_SERVER" ] || ! "$NATS_SERVER" --version | grep -q "${NATS_VERSION#v}"; then
    echo "== go install nats-server $NATS_VERSION" >&2
    go install "github.com/nats-io/nats-server/v2@$NATS_VERSION"
  fi
fi

echo "== databases on $PG" >&2
for db in sombus_compare sombus_compare_two sombus_compare_plain; do
  psql -q -v ON_ERROR_STOP=1 "$PG/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >&2
done

key="sbk_compare-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"

# start NAME STORE: starts a node on a free port; sets url_NAME.
start() {
  local name="$1" store="$2"
  mkdir -p "$work/$name"
  SOMBUS_BOOTSTRAP_KEY="$key" "$work/sombus" serve --listen 127.0.0.1:0 --store "$store" --public-url "$PUBLIC_URL" \
    >"$work/$name/out" 2>"$work/$name/log" &
  pids+=("$!")
  for _ in $(seq 100); do
    if url="$(sed -n 's/^sombus is listening on \(http[^ ]*\).*/\1/p' "$work/$name/out")" && [ -n "$url" ]; then
      printf -v "url_$name" '%s' "$url"
      return
    fi
    sleep 0.1
  done
  echo "the $name node did not start:" >&2
  cat "$work/$name/out" "$work/$name/log" >&2
  exit 1
}
echo "== sombus nodes" >&2
start sqlite "sqlite:$work/sqlite/sombus.db"
start postgres "$PG/sombus_compare?sslmode=disable"
two=()
if [ "$TWO_NODES" != 0 ]; then
  start two_a "$PG/sombus_compare_two?sslmode=disable"
  start two_b "$PG/sombus_compare_two?sslmode=disable"
  two=(-sombus "PostgreSQL, two nodes=$url_two_a,$url_two_b")
fi

echo "== compare (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
"$work/compare" \
  -nats-server "$NATS_SERVER" \
  -postgres "$PG/sombus_compare_plain?sslmode=disable" \
  -sombus "embedded store=$url_sqlite" \
  -sombus "PostgreSQL, one node=$url_postgres" \
  "${two[@]}" \
  -sombus-key "$key" \
  "$@"
