// Command lincheck checks a Waverunner chaos history for linearizability with Porcupine.
//
//	lincheck -history FILE [-html OUT.html] [-timeout 60s] [-no-prune]
//
// The history is one JSON object per line (see crates/chaos/README.md):
//
//	{"client":1,"key":"k3","op":"set","input":{"value":"a"},"call_us":10,"return_us":25,"outcome":"ok","output":null}
//
// Each key is checked on its own against a register-with-counter model (get, set, incr, cas;
// a missing key reads as null and incr starts it from 0, as Redis INCR does). Operations whose
// outcome is "fail" are left out; those whose outcome is "unknown" never return (their return
// time is after every other operation) and the model accepts them in any state.
//
// The last line printed is the verdict:
//
//	linearizable=yes|no|unknown ops=N keys=K
//
// where N counts the operations given to the checker and K the keys. Exit status: 0 yes,
// 1 no (each failing key is named and, with -html, Porcupine's visualization of the failing
// keys is written), 2 unknown (the checker timed out) or bad input.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

func usage() {
	fmt.Fprintf(os.Stderr, "usage: lincheck -history FILE [-html OUT.html] [-timeout 60s] [-no-prune]\n")
	flag.PrintDefaults()
}

func fatal(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "lincheck: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	historyPath := flag.String("history", "", "history file: one JSON operation per line (required)")
	htmlPath := flag.String("html", "", "on failure, write Porcupine's HTML visualization of the failing keys here")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long and answer unknown (0: no limit)")
	noPrune := flag.Bool("no-prune", false, "give every unknown set to the checker as is (slower; same verdict)")
	flag.Usage = usage
	flag.Parse()
	if *historyPath == "" || flag.NArg() != 0 {
		usage()
		os.Exit(2)
	}
	if *timeout < 0 {
		fatal("-timeout must not be negative")
	}

	f, err := os.Open(*historyPath)
	if err != nil {
		fatal("%v", err)
	}
	recs, err := readHistory(f, *historyPath)
	f.Close()
	if err != nil {
		fatal("%v", err)
	}

	keys, byKey, st := prepare(recs, !*noPrune)
	var history []porcupine.Operation
	for _, k := range keys {
		history = append(history, byKey[k]...)
	}
	fmt.Fprintf(os.Stderr,
		"lincheck: %d operations: %d ok, %d failed (left out), %d unknown (%d reads left out, %d unread writes left out, %d writes bounded by a read, %d left open)\n",
		st.Lines, st.Ok, st.Fail, st.Unknown, st.UnknownGets, st.UnseenWrites, st.BoundedWrites, st.OpenUnknown)

	model := kvModel(keys)
	start := time.Now()
	result, info := porcupine.CheckOperationsVerbose(model, history, *timeout)
	elapsed := time.Since(start).Round(time.Millisecond)

	summary := func(verdict string) {
		fmt.Printf("linearizable=%s ops=%d keys=%d\n", verdict, len(history), len(keys))
	}
	switch result {
	case porcupine.Ok:
		fmt.Fprintf(os.Stderr, "lincheck: checked in %v\n", elapsed)
		summary("yes")
		os.Exit(0)
	case porcupine.Unknown:
		fmt.Printf("timed out after %v: no violation found so far, but the check is incomplete (raise -timeout)\n", elapsed)
		summary("unknown")
		os.Exit(2)
	}

	// Illegal: a partition is linearizable iff some partial linearization covers all of it.
	partials := info.PartialLinearizations()
	var failed []string
	var failedOps []porcupine.Operation
	for i, k := range keys {
		longest := 0
		for _, p := range partials[i] {
			if len(p) > longest {
				longest = len(p)
			}
		}
		if longest < len(byKey[k]) {
			failed = append(failed, k)
			failedOps = append(failedOps, byKey[k]...)
			fmt.Printf("key %q is not linearizable: %d operations, the longest linearizable prefix has %d\n", k, len(byKey[k]), longest)
		}
	}
	if *htmlPath != "" {
		// Visualize only the failing keys: smaller, and what the reader wants to see.
		vinfo := info
		if len(failed) > 0 && len(failed) < len(keys) {
			res, finfo := porcupine.CheckOperationsVerbose(kvModel(failed), failedOps, *timeout)
			if res == porcupine.Illegal {
				model, vinfo = kvModel(failed), finfo
			}
		}
		if err := porcupine.VisualizePath(model, vinfo, *htmlPath); err != nil {
			fmt.Fprintf(os.Stderr, "lincheck: writing %s: %v\n", *htmlPath, err)
		} else {
			fmt.Printf("visualization: %s\n", *htmlPath)
		}
	} else {
		fmt.Printf("pass -html OUT.html for Porcupine's visualization\n")
	}
	summary("no")
	os.Exit(1)
}
