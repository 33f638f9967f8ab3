package router

import "github.com/adprouter/adprouter/router/internal/prefix"

// AppendBlockHashes extends hashes, the chained block hashes of the first
// len(hashes) full blocks of tokens (empty to start), with those of the
// remaining full blocks of tokensPerBlock tokens; a trailing partial block
// is not hashed. The chain starts from a root scoped by loraID and cacheSalt,
// so blocks of different adapters or salts never share a hash.
//
// These are the prefix index's keys ("adprouter block hash v1", also
// adpr_block_hashes in C): block i's hash names block i's tokens and, through
// the chain, every token before it, so two prompts of one scope share block
// i's hash exactly when they share their first (i+1)*tokensPerBlock tokens
// (up to 64-bit collisions). The router hashes a prompt without its last
// token, as engines cache it. The values never change within version 1.
func AppendBlockHashes(hashes []uint64, tokens []int32, tokensPerBlock int, loraID, cacheSalt uint64) []uint64 {
	if tokensPerBlock < 1 {
		return hashes
	}
	h := prefix.Root(loraID, cacheSalt)
	if len(hashes) > 0 {
		h = hashes[len(hashes)-1]
	}
	for b := len(hashes); (b+1)*tokensPerBlock <= len(tokens); b++ {
		h = prefix.Block(h, tokens[b*tokensPerBlock:(b+1)*tokensPerBlock])
		hashes = append(hashes, h)
	}
	return hashes
}
