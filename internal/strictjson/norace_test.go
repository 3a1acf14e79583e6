//go:build !race

package strictjson

const raceEnabled = false
