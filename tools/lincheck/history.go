package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/anishathalye/porcupine"
)

// infinity is the return time of an operation whose outcome is unknown: after every other
// operation, so the checker may linearize it anywhere after its call, or never.
const infinity = int64(math.MaxInt64)

// outcome of one recorded operation.
type outcome int

const (
	outcomeOk      outcome = iota // the client saw the reply
	outcomeFail                   // definitely not applied: left out of the check
	outcomeUnknown                // may or may not have been applied
)

// record is one parsed line of the history (the format of crates/chaos/src/history.rs).
type record struct {
	Line     int
	Client   uint64
	Key      string
	In       opInput
	Out      opOutput // meaningful when Outcome == outcomeOk
	Call     int64
	Return   int64 // meaningful when Outcome == outcomeOk
	Outcome  outcome
	Returned bool // return_us was given
}

type rawLine struct {
	Client   *uint64         `json:"client"`
	Key      *string         `json:"key"`
	Op       *string         `json:"op"`
	Input    json.RawMessage `json:"input"`
	CallUs   *uint64         `json:"call_us"`
	ReturnUs *uint64         `json:"return_us"`
	Outcome  *string         `json:"outcome"`
	Output   json.RawMessage `json:"output"`
}

type rawInput struct {
	Value    *string         `json:"value"`
	Delta    *int64          `json:"delta"`
	Expected json.RawMessage `json:"expected"`
	New      *string         `json:"new"`
}

type rawOutput struct {
	Value json.RawMessage `json:"value"`
	Ok    *bool           `json:"ok"`
}

func isNull(m json.RawMessage) bool {
	return len(bytes.TrimSpace(m)) == 0 || string(bytes.TrimSpace(m)) == "null"
}

func decodeStrict(m json.RawMessage, v interface{}) error {
	if isNull(m) {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(m))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// optString decodes a JSON string or null; absent (nil) is an error.
func optString(m json.RawMessage, what string) (bool, string, error) {
	if m == nil {
		return false, "", fmt.Errorf("%s is missing (use null for a missing key)", what)
	}
	if isNull(m) {
		return false, "", nil
	}
	var s string
	if err := json.Unmarshal(m, &s); err != nil {
		return false, "", fmt.Errorf("%s must be a string or null: %v", what, err)
	}
	return true, s, nil
}

func timestamp(v uint64, what string) (int64, error) {
	if v >= uint64(infinity) {
		return 0, fmt.Errorf("%s %d is too large", what, v)
	}
	return int64(v), nil
}

func parseLine(lineNo int, text []byte) (record, error) {
	r := record{Line: lineNo}
	var raw rawLine
	d := json.NewDecoder(bytes.NewReader(text))
	d.DisallowUnknownFields()
	if err := d.Decode(&raw); err != nil {
		return r, fmt.Errorf("not a history object: %v", err)
	}
	if raw.Client == nil || raw.Key == nil || raw.Op == nil || raw.CallUs == nil || raw.Outcome == nil {
		return r, fmt.Errorf("client, key, op, call_us and outcome are required")
	}
	r.Client = *raw.Client
	r.Key = *raw.Key
	var err error
	if r.Call, err = timestamp(*raw.CallUs, "call_us"); err != nil {
		return r, err
	}
	switch *raw.Outcome {
	case "ok":
		r.Outcome = outcomeOk
	case "fail":
		r.Outcome = outcomeFail
	case "unknown":
		r.Outcome = outcomeUnknown
	default:
		return r, fmt.Errorf("outcome %q is not ok, fail or unknown", *raw.Outcome)
	}
	if raw.ReturnUs != nil {
		r.Returned = true
		if r.Return, err = timestamp(*raw.ReturnUs, "return_us"); err != nil {
			return r, err
		}
		if r.Return < r.Call {
			return r, fmt.Errorf("return_us %d is before call_us %d", r.Return, r.Call)
		}
	} else if r.Outcome == outcomeOk {
		return r, fmt.Errorf("an ok operation needs return_us")
	}

	var in rawInput
	if err := decodeStrict(raw.Input, &in); err != nil {
		return r, fmt.Errorf("bad input: %v", err)
	}
	switch *raw.Op {
	case "get":
		r.In.Kind = opGet
		if in.Value != nil || in.Delta != nil || in.Expected != nil || in.New != nil {
			return r, fmt.Errorf("get takes no input fields")
		}
	case "set":
		r.In.Kind = opSet
		if in.Value == nil || in.Delta != nil || in.Expected != nil || in.New != nil {
			return r, fmt.Errorf(`set needs input {"value": string} and nothing else`)
		}
		r.In.Value = *in.Value
	case "incr":
		r.In.Kind = opIncr
		if in.Delta == nil || in.Value != nil || in.Expected != nil || in.New != nil {
			return r, fmt.Errorf(`incr needs input {"delta": i64} and nothing else`)
		}
		r.In.Delta = *in.Delta
	case "cas":
		r.In.Kind = opCas
		if in.New == nil || in.Value != nil || in.Delta != nil {
			return r, fmt.Errorf(`cas needs input {"expected": string|null, "new": string}`)
		}
		r.In.Value = *in.New
		if r.In.ExpPresent, r.In.Expected, err = optString(in.Expected, "cas input expected"); err != nil {
			return r, err
		}
	default:
		return r, fmt.Errorf("op %q is not get, set, incr or cas", *raw.Op)
	}

	if r.Outcome != outcomeOk {
		r.Out = opOutput{Unknown: r.Outcome == outcomeUnknown}
		return r, nil // the output of an operation without a reply is ignored
	}
	var out rawOutput
	if err := decodeStrict(raw.Output, &out); err != nil {
		return r, fmt.Errorf("bad output: %v", err)
	}
	switch r.In.Kind {
	case opGet:
		if out.Ok != nil {
			return r, fmt.Errorf(`get output is {"value": string|null}`)
		}
		if r.Out.Present, r.Out.Value, err = optString(out.Value, "get output value"); err != nil {
			return r, err
		}
	case opSet:
		if out.Ok != nil || out.Value != nil {
			return r, fmt.Errorf("set has no output fields")
		}
	case opIncr:
		if out.Ok != nil || isNull(out.Value) {
			return r, fmt.Errorf(`incr output is {"value": i64}`)
		}
		if err := json.Unmarshal(out.Value, &r.Out.Int); err != nil {
			return r, fmt.Errorf("incr output value must be an i64: %v", err)
		}
	case opCas:
		if out.Ok == nil || out.Value != nil {
			return r, fmt.Errorf(`cas output is {"ok": bool}`)
		}
		r.Out.Ok = *out.Ok
	}
	return r, nil
}

// readHistory parses one JSON object per line; blank lines are skipped.
func readHistory(r io.Reader, name string) ([]record, error) {
	var recs []record
	br := bufio.NewReaderSize(r, 1<<20)
	lineNo := 0
	for {
		text, err := br.ReadBytes('\n')
		if len(text) > 0 {
			lineNo++
			if t := bytes.TrimSpace(text); len(t) > 0 {
				rec, perr := parseLine(lineNo, t)
				if perr != nil {
					return nil, fmt.Errorf("%s:%d: %v", name, lineNo, perr)
				}
				recs = append(recs, rec)
			}
		}
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
	}
}

// stats counts what happened to the records on their way to the checker.
type stats struct {
	Lines, Ok, Fail, Unknown int
	UnknownGets              int // dropped: an unanswered read constrains nothing
	UnseenWrites             int // dropped: an unknown set whose value nobody read
	BoundedWrites            int // an unknown set whose return is bounded by the first read of it
	OpenUnknown              int // given to the checker with an infinite return time
}

// prepare turns records into porcupine operations, partitioned by key (keys sorted).
//
// Operations that failed are left out. An operation with an unknown outcome gets an infinite
// return time, so it may be linearized anywhere after its call or (linearized after
// everything else) never. With prune, two exact simplifications cut the search on keys that
// only see get and set (no incr or cas, whose results depend on earlier writes):
//   - an unknown set whose value no read returned is left out: wherever it is linearized, a
//     read between it and the next set would return its value, so it can be linearized last;
//   - an unknown set whose value is unique among the key's sets and was returned by a read
//     must precede that read: its return time becomes the earliest such read's return.
//
// Unknown gets are always left out.
func prepare(recs []record, prune bool) ([]string, map[string][]porcupine.Operation, stats) {
	st := stats{Lines: len(recs)}
	byKey := make(map[string][]record)
	for _, r := range recs {
		switch r.Outcome {
		case outcomeOk:
			st.Ok++
		case outcomeFail:
			st.Fail++
			continue
		case outcomeUnknown:
			st.Unknown++
			if r.In.Kind == opGet {
				st.UnknownGets++
				continue
			}
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}

	// A client whose operation timed out may carry on; its later operations go on a new
	// visualization lane, since the unknown one stays open forever.
	sorted := make([]record, 0, len(recs))
	for _, rs := range byKey {
		sorted = append(sorted, rs...)
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Line < sorted[j].Line })
	type lane struct {
		client uint64
		gen    int
	}
	gen := make(map[uint64]int)
	laneOf := make(map[int]lane) // by line
	order := make([]int, len(sorted))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return sorted[order[a]].Call < sorted[order[b]].Call })
	for _, i := range order {
		r := sorted[i]
		laneOf[r.Line] = lane{r.Client, gen[r.Client]}
		if r.Outcome == outcomeUnknown {
			gen[r.Client]++
		}
	}

	keys := make([]string, 0, len(byKey))
	ops := make(map[string][]porcupine.Operation)
	for key, rs := range byKey {
		simple := true
		setCount := make(map[string]int)
		firstRead := make(map[string]int64) // value -> earliest return of an ok get of it
		for _, r := range rs {
			switch r.In.Kind {
			case opIncr, opCas:
				simple = false
			case opSet:
				setCount[r.In.Value]++
			case opGet:
				if r.Out.Present {
					if t, ok := firstRead[r.Out.Value]; !ok || r.Return < t {
						firstRead[r.Out.Value] = r.Return
					}
				}
			}
		}
		lanes := make(map[lane]int)
		var laneList []lane
		for _, r := range rs {
			l := laneOf[r.Line]
			if _, ok := lanes[l]; !ok {
				lanes[l] = 0
				laneList = append(laneList, l)
			}
		}
		sort.Slice(laneList, func(i, j int) bool {
			if laneList[i].client != laneList[j].client {
				return laneList[i].client < laneList[j].client
			}
			return laneList[i].gen < laneList[j].gen
		})
		for i, l := range laneList {
			lanes[l] = i
		}

		var kops []porcupine.Operation
		for _, r := range rs {
			ret := r.Return
			if r.Outcome == outcomeUnknown {
				ret = infinity
				if prune && simple && r.In.Kind == opSet {
					t, read := firstRead[r.In.Value]
					switch {
					case !read:
						st.UnseenWrites++
						continue
					case setCount[r.In.Value] == 1 && t >= r.Call:
						ret = t
						st.BoundedWrites++
					}
				}
				if ret == infinity {
					st.OpenUnknown++
				}
			}
			kops = append(kops, porcupine.Operation{
				ClientId: lanes[laneOf[r.Line]],
				Input:    r.In,
				Call:     r.Call,
				Output:   r.Out,
				Return:   ret,
				Metadata: opMeta{Key: key, Client: r.Client, Line: r.Line},
			})
		}
		if len(kops) > 0 {
			keys = append(keys, key)
			ops[key] = kops
		}
	}
	sort.Strings(keys)
	return keys, ops, st
}
