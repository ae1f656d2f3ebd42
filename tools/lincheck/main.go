// Command lincheck checks a Waverunner chaos history for linearizability with Porcupine.
//
//	lincheck -history FILE [-html OUT.html] [-timeout 60s] [-no-prune]
//
// The history is one JSON object per line (see crates/chaos/README.md):
//
//	{"client":1,"key":"k3","op":"set","input":{"value":"a"},"call_us":10,"return_us":25,"outcome":"ok","output":{}}
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
// where N counts the operations given to the checker and K the keys. Keys are checked
// concurrently, each with the timeout. Exit status: 0 yes; 1 no (some key is not
// linearizable: each is named and, with -html, Porcupine's visualization of the failing keys
// is written); 2 unknown (no key failed but some timed out) or bad input.
package main

import (
	"flag"
	"fmt"
	"os"
	"sync"
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

	// Each key is checked on its own (Porcupine's P-compositionality), concurrently, each
	// with the timeout: so a key that fails is told apart from one still undecided.
	start := time.Now()
	results := make([]porcupine.CheckResult, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func(i int, ops []porcupine.Operation) {
			defer wg.Done()
			results[i] = porcupine.CheckOperationsTimeout(kvModel(nil), ops, *timeout)
		}(i, byKey[k])
	}
	wg.Wait()
	elapsed := time.Since(start).Round(time.Millisecond)

	var failed, undecided []string
	for i, k := range keys {
		switch results[i] {
		case porcupine.Illegal:
			failed = append(failed, k)
		case porcupine.Unknown:
			undecided = append(undecided, k)
		}
	}
	fmt.Fprintf(os.Stderr, "lincheck: checked %d keys in %v\n", len(keys), elapsed)
	for _, k := range undecided {
		fmt.Printf("key %q: undecided, the check timed out after %v (raise -timeout)\n", k, *timeout)
	}
	summary := func(verdict string) {
		fmt.Printf("linearizable=%s ops=%d keys=%d\n", verdict, len(history), len(keys))
	}
	if len(failed) == 0 {
		if len(undecided) > 0 {
			summary("unknown")
			os.Exit(2)
		}
		summary("yes")
		os.Exit(0)
	}

	// Not linearizable. Check the failing keys again, keeping what Porcupine needs to draw them.
	var failedOps []porcupine.Operation
	for _, k := range failed {
		failedOps = append(failedOps, byKey[k]...)
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel(failed), failedOps, *timeout)
	if res == porcupine.Illegal {
		partials := info.PartialLinearizations()
		for i, k := range failed {
			longest := 0
			for _, p := range partials[i] {
				if len(p) > longest {
					longest = len(p)
				}
			}
			fmt.Printf("key %q is not linearizable: %d operations, the longest linearizable prefix has %d\n", k, len(byKey[k]), longest)
		}
	} else {
		for _, k := range failed {
			fmt.Printf("key %q is not linearizable: %d operations\n", k, len(byKey[k]))
		}
	}
	switch {
	case *htmlPath == "":
		fmt.Printf("pass -html OUT.html for Porcupine's visualization\n")
	case res != porcupine.Illegal:
		fmt.Fprintf(os.Stderr, "lincheck: no visualization: checking the failing keys again timed out\n")
	default:
		if err := porcupine.VisualizePath(kvModel(failed), info, *htmlPath); err != nil {
			fmt.Fprintf(os.Stderr, "lincheck: writing %s: %v\n", *htmlPath, err)
		} else {
			fmt.Printf("visualization: %s\n", *htmlPath)
		}
	}
	summary("no")
	os.Exit(1)
}
