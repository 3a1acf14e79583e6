package bus

import "sort"

func sortMembers(ms []Member) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].WorkspaceID < ms[j].WorkspaceID })
}
