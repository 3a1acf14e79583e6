//go:build race

package strictjson

// raceEnabled: the race detector allocates on its own, so allocation counts mean nothing.
const raceEnabled = true
