package main

import (
	"os"
	"fmt"
	"testing"
	"testing/synctest"
)

func TestZZTable(t *testing.T) {
	var results []outcome
	synctest.Test(t, func(t *testing.T) {
		results = runOutage(figureClients, []strategy{outageStrategies[1], outageStrategies[7]})
	})
	for _, o := range results {
		sent, _ := o.calls()
		d, ok := o.goodputBack()
		p, at := o.peak()
		fmt.Printf("%-45s sent %6d ok %5d back %v %v peak %.1f at %v\n", o.name, sent, o.succeeded(), d, ok, p, at)
	}
	var ms []msOutcome
	synctest.Test(t, func(t *testing.T) { ms = runMetastable(msStrategies) })
	printMetastable(os.Stdout, ms)
}

func TestZZSeries(t *testing.T) {
	var results []outcome
	synctest.Test(t, func(t *testing.T) {
		results = runOutage(figureClients, []strategy{outageStrategies[7]})
	})
	for _, o := range results {
		s := o.sent()
		for i := 28; i < 60 && i < len(s); i++ {
			fmt.Printf("%4.1fs off %4d sent %5d ok %4d\n", float64(i)/10, at(o.offered, i), s[i], at(o.ok, i))
		}
	}
}
