package main

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestParseCounter(t *testing.T) {
	good := map[string]int64{"0": 0, "7": 7, "-7": -7, "9223372036854775807": 9223372036854775807, "-9223372036854775808": -9223372036854775808}
	for s, want := range good {
		if v, ok := parseCounter(s); !ok || v != want {
			t.Errorf("parseCounter(%q) = %d, %t", s, v, ok)
		}
	}
	for _, s := range []string{"", "+1", "01", "-0", " 1", "1 ", "1.0", "x", "9223372036854775808"} {
		if _, ok := parseCounter(s); ok {
			t.Errorf("parseCounter(%q) accepted", s)
		}
	}
}

func TestStep(t *testing.T) {
	missing := regState{}
	one := regState{Present: true, Value: "1"}
	word := regState{Present: true, Value: "abc"}
	top := regState{Present: true, Value: "9223372036854775807"}
	cases := []struct {
		name  string
		state regState
		in    opInput
		out   opOutput
		ok    bool
		next  regState
	}{
		{"get missing", missing, opInput{Kind: opGet}, opOutput{}, true, missing},
		{"get missing as value", missing, opInput{Kind: opGet}, opOutput{Present: true, Value: ""}, false, missing},
		{"get value", one, opInput{Kind: opGet}, opOutput{Present: true, Value: "1"}, true, one},
		{"get wrong value", one, opInput{Kind: opGet}, opOutput{Present: true, Value: "2"}, false, one},
		{"set", one, opInput{Kind: opSet, Value: "abc"}, opOutput{}, true, word},
		{"incr missing", missing, opInput{Kind: opIncr, Delta: 1}, opOutput{Int: 1}, true, one},
		{"incr wrong", missing, opInput{Kind: opIncr, Delta: 1}, opOutput{Int: 2}, false, missing},
		{"incr word", word, opInput{Kind: opIncr, Delta: 1}, opOutput{Int: 1}, false, word},
		{"incr overflow", top, opInput{Kind: opIncr, Delta: 1}, opOutput{Int: -9223372036854775808}, false, top},
		{"incr unknown word", word, opInput{Kind: opIncr, Delta: 1}, opOutput{Unknown: true}, true, word},
		{"incr unknown", one, opInput{Kind: opIncr, Delta: -1}, opOutput{Unknown: true}, true, regState{Present: true, Value: "0"}},
		{"cas absent ok", missing, opInput{Kind: opCas, Value: "1"}, opOutput{Ok: true}, true, one},
		{"cas absent lie", missing, opInput{Kind: opCas, Value: "1"}, opOutput{Ok: false}, false, one},
		{"cas absent but present", one, opInput{Kind: opCas, Value: "abc"}, opOutput{Ok: false}, true, one},
		{"cas match", one, opInput{Kind: opCas, ExpPresent: true, Expected: "1", Value: "abc"}, opOutput{Ok: true}, true, word},
		{"cas mismatch", word, opInput{Kind: opCas, ExpPresent: true, Expected: "1", Value: "x"}, opOutput{Ok: false}, true, word},
		{"cas expected on missing", missing, opInput{Kind: opCas, ExpPresent: true, Expected: "", Value: "x"}, opOutput{Ok: false}, true, missing},
		{"cas unknown", one, opInput{Kind: opCas, ExpPresent: true, Expected: "1", Value: "abc"}, opOutput{Unknown: true}, true, word},
	}
	for _, c := range cases {
		ok, next := step(c.state, c.in, c.out)
		if ok != c.ok || (ok && next.(regState) != c.next) {
			t.Errorf("%s: step = %t, %+v; want %t, %+v", c.name, ok, next, c.ok, c.next)
		}
	}
}

func TestParseLine(t *testing.T) {
	r, err := parseLine(1, []byte(`{"client":1,"key":"k","op":"cas","input":{"expected":null,"new":"n"},"call_us":1,"return_us":null,"outcome":"unknown","output":null}`))
	if err != nil || r.In.Kind != opCas || r.In.ExpPresent || r.In.Value != "n" || !r.Out.Unknown {
		t.Fatalf("cas: %+v %v", r, err)
	}
	r, err = parseLine(1, []byte(`{"client":1,"key":"k","op":"get","input":{},"call_us":1,"return_us":2,"outcome":"ok","output":{"value":"v"}}`))
	if err != nil || !r.Out.Present || r.Out.Value != "v" {
		t.Fatalf("get: %+v %v", r, err)
	}
	bad := []string{
		`{"client":1,"key":"k","op":"get","input":{},"call_us":1,"return_us":2,"outcome":"ok","output":{}}`,
		`{"client":1,"key":"k","op":"cas","input":{"new":"n"},"call_us":1,"return_us":2,"outcome":"ok","output":{"ok":true}}`,
		`{"client":1,"key":"k","op":"incr","input":{"delta":1},"call_us":1,"return_us":2,"outcome":"ok","output":{"value":"1"}}`,
		`{"client":1,"key":"k","op":"set","input":{"value":"v"},"call_us":3,"return_us":2,"outcome":"ok","output":{}}`,
		`{"client":1,"key":"k","op":"set","input":{"value":"v"},"call_us":1,"outcome":"ok","output":{}}`,
		`{"client":1,"key":"k","op":"set","input":{"value":"v"},"call_us":1,"return_us":2,"outcome":"ok","output":{},"x":1}`,
		`{"client":1,"key":"k","op":"del","input":{},"call_us":1,"return_us":2,"outcome":"ok","output":{}}`,
		`{"client":1,"key":"k","op":"get","input":{},"call_us":18446744073709551615,"return_us":null,"outcome":"unknown","output":null}`,
	}
	for _, b := range bad {
		if _, err := parseLine(1, []byte(b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
}

// randomGetSetHistory is a small history of gets and sets on one key, with unknown sets,
// generated from a sequential register and then, sometimes, corrupted.
func randomGetSetHistory(rng *rand.Rand) []record {
	values := []string{"a", "b", "c"}
	n := 3 + rng.Intn(8)
	type planned struct {
		r  record
		at int64
	}
	var ps []planned
	for i := 0; i < n; i++ {
		call := int64(rng.Intn(100))
		ret := call + 1 + int64(rng.Intn(40))
		r := record{Line: i + 1, Client: uint64(i), Key: "k", Call: call, Return: ret, Outcome: outcomeOk}
		if rng.Intn(2) == 0 {
			r.In = opInput{Kind: opGet}
		} else {
			r.In = opInput{Kind: opSet, Value: values[rng.Intn(len(values))]}
			if rng.Intn(3) == 0 {
				r.Outcome = outcomeUnknown
				r.Out = opOutput{Unknown: true}
			}
		}
		at := call + rng.Int63n(ret-call+1)
		if r.Outcome == outcomeUnknown && rng.Intn(2) == 0 {
			at = -1 // never applied
		}
		ps = append(ps, planned{r, at})
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].at < ps[j].at })
	var state regState
	for i := range ps {
		if ps[i].at < 0 {
			continue
		}
		if ps[i].r.In.Kind == opSet {
			state = regState{Present: true, Value: ps[i].r.In.Value}
		} else {
			ps[i].r.Out = opOutput{Present: state.Present, Value: state.Value}
		}
	}
	recs := make([]record, len(ps))
	for i := range ps {
		recs[i] = ps[i].r
	}
	if rng.Intn(2) == 0 {
		for i := range recs {
			if recs[i].In.Kind == opGet {
				recs[i].Out = opOutput{Present: rng.Intn(4) != 0, Value: values[rng.Intn(len(values))]}
				if !recs[i].Out.Present {
					recs[i].Out.Value = ""
				}
				break
			}
		}
	}
	return recs
}

func checkRecords(recs []record, prune bool) (porcupine.CheckResult, int) {
	keys, byKey, _ := prepare(recs, prune)
	var history []porcupine.Operation
	for _, k := range keys {
		history = append(history, byKey[k]...)
	}
	res, _ := porcupine.CheckOperationsVerbose(kvModel(keys), history, 0)
	return res, len(history)
}

// Leaving out unread unknown sets and bounding read ones never changes the verdict.
func TestPruningIsExact(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	counts := map[porcupine.CheckResult]int{}
	pruned := 0
	for i := 0; i < 20000; i++ {
		recs := randomGetSetHistory(rng)
		a, na := checkRecords(recs, true)
		b, nb := checkRecords(recs, false)
		if a != b {
			var desc []string
			for _, r := range recs {
				desc = append(desc, fmt.Sprintf("%+v", r))
			}
			t.Fatalf("history %d: pruned %v, unpruned %v:\n%s", i, a, b, strings.Join(desc, "\n"))
		}
		counts[a]++
		if na < nb {
			pruned++
		}
	}
	if counts[porcupine.Ok] < 1000 || counts[porcupine.Illegal] < 1000 || pruned < 1000 {
		t.Fatalf("generator too narrow: %v, %d pruned", counts, pruned)
	}
	t.Logf("verdicts %v, %d histories pruned", counts, pruned)
}
