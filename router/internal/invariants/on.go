//go:build invariants

package invariants

// Enabled reports whether the checks run (-tags invariants).
const Enabled = true
