//go:build !race

package limit_test

const zzRace = false
