package idempotency

// MaxOrphans is how many claims left by failed Begins a Guard remembers,
// for the tests of the bound.
const MaxOrphans = maxOrphans
