//go:build amd64 && !purego

package router

// prefetchPrefix asks the CPU to bring the first PrefixTokens tokens from p
// into cache. It is only a hint (it never faults and changes no result);
// groupSorter issues it a few requests ahead of its prefix hashing.
//
//go:noescape
func prefetchPrefix(p *int32)

// The assembly prefetches 256 bytes: PrefixTokens int32 tokens.
var _ [0]struct{} = [4*PrefixTokens - 256]struct{}{}
