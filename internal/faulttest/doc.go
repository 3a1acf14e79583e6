// Package faulttest holds the crash and fault tests of sombus: real
// `sombus serve` processes killed with SIGKILL under load, PostgreSQL
// connections cut by a proxy in the test, two nodes with one killed, and
// the embedded store's disk filling up. Everything is in its tests; the
// package has no code of its own.
//
// The short forms run with every `go test ./...`; `go test
// ./internal/faulttest -long` (make crash-long) runs the long ones.
package faulttest
