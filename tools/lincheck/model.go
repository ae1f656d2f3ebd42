package main

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// opKind is the operation of one history entry.
type opKind int

const (
	opGet opKind = iota
	opSet
	opIncr
	opCas
)

func (k opKind) String() string {
	switch k {
	case opGet:
		return "get"
	case opSet:
		return "set"
	case opIncr:
		return "incr"
	case opCas:
		return "cas"
	}
	return fmt.Sprintf("op(%d)", int(k))
}

// opInput is what a client asked for. Only the fields of its kind are meaningful.
type opInput struct {
	Kind  opKind
	Value string // set: the value written; cas: the new value
	Delta int64  // incr
	// cas: the value expected (ExpPresent) or that the key is missing (!ExpPresent).
	ExpPresent bool
	Expected   string
}

// opOutput is what the client saw. Unknown marks an operation whose outcome the client
// never learned: the model accepts it in any state (and applies its input as the real
// system would have, if it took effect at all).
type opOutput struct {
	Unknown bool
	Present bool   // get: the key existed
	Value   string // get: its value
	Int     int64  // incr: the new value
	Ok      bool   // cas: the comparison matched and the value was written
}

// regState is the state of one key: missing, or a string value. Comparable with ==.
type regState struct {
	Present bool
	Value   string
}

// opMeta is attached to every porcupine operation for partitioning and visualization.
type opMeta struct {
	Key    string
	Client uint64
	Line   int
}

// parseCounter reads a value as a signed 64-bit counter with Redis's syntax (the key-value
// store's `IncrBy`): canonical decimal only, no '+', no leading zeros, no spaces, no "-0".
func parseCounter(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s {
		return 0, false
	}
	return v, true
}

// incrResult is what INCRBY does to state: the new value, or ok=false when the stored value
// is not a counter or the sum overflows (the real store answers an error and changes nothing).
func incrResult(state regState, delta int64) (int64, bool) {
	var cur int64
	if state.Present {
		v, ok := parseCounter(state.Value)
		if !ok {
			return 0, false
		}
		cur = v
	}
	sum := cur + delta
	if (delta > 0 && sum < cur) || (delta < 0 && sum > cur) {
		return 0, false
	}
	return sum, true
}

func casMatches(state regState, in opInput) bool {
	if !in.ExpPresent {
		return !state.Present
	}
	return state.Present && state.Value == in.Expected
}

// step is the sequential specification of one key: a register with a counter.
func step(stateI, inputI, outputI interface{}) (bool, interface{}) {
	state := stateI.(regState)
	in := inputI.(opInput)
	out := outputI.(opOutput)
	switch in.Kind {
	case opGet:
		if out.Unknown {
			return true, state
		}
		return out.Present == state.Present && out.Value == state.Value, state
	case opSet:
		return true, regState{Present: true, Value: in.Value}
	case opIncr:
		sum, applied := incrResult(state, in.Delta)
		if out.Unknown {
			if !applied {
				return true, state // it would have failed: nothing changed
			}
			return true, regState{Present: true, Value: strconv.FormatInt(sum, 10)}
		}
		if !applied || sum != out.Int {
			return false, state
		}
		return true, regState{Present: true, Value: strconv.FormatInt(sum, 10)}
	case opCas:
		match := casMatches(state, in)
		next := state
		if match {
			next = regState{Present: true, Value: in.Value}
		}
		if out.Unknown {
			return true, next
		}
		return out.Ok == match, next
	}
	return false, state
}

func quote(present bool, value string) string {
	if !present {
		return "nil"
	}
	return strconv.Quote(value)
}

func describeOperation(inputI, outputI interface{}) string {
	in := inputI.(opInput)
	out := outputI.(opOutput)
	var call string
	switch in.Kind {
	case opGet:
		call = "get()"
	case opSet:
		call = fmt.Sprintf("set(%s)", strconv.Quote(in.Value))
	case opIncr:
		call = fmt.Sprintf("incr(%d)", in.Delta)
	case opCas:
		call = fmt.Sprintf("cas(%s → %s)", quote(in.ExpPresent, in.Expected), strconv.Quote(in.Value))
	}
	if out.Unknown {
		return call + " → ? (unknown outcome)"
	}
	switch in.Kind {
	case opGet:
		return fmt.Sprintf("%s → %s", call, quote(out.Present, out.Value))
	case opIncr:
		return fmt.Sprintf("%s → %d", call, out.Int)
	case opCas:
		return fmt.Sprintf("%s → %t", call, out.Ok)
	}
	return call
}

func describeState(stateI interface{}) string {
	s := stateI.(regState)
	return quote(s.Present, s.Value)
}

func describeMetadata(metaI interface{}) string {
	m, ok := metaI.(opMeta)
	if !ok {
		return ""
	}
	return fmt.Sprintf("client %d, history line %d", m.Client, m.Line)
}

func hashState(stateI interface{}) uint64 {
	s := stateI.(regState)
	h := fnv.New64a()
	if s.Present {
		_, _ = h.Write([]byte{1})
		_, _ = h.Write([]byte(s.Value))
	} else {
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// partitionByKey splits a history into one partition per key, keys in the order given.
func partitionByKey(keys []string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(history []porcupine.Operation) [][]porcupine.Operation {
		index := make(map[string]int, len(keys))
		for i, k := range keys {
			index[k] = i
		}
		parts := make([][]porcupine.Operation, len(keys))
		for _, op := range history {
			i := index[op.Metadata.(opMeta).Key]
			parts[i] = append(parts[i], op)
		}
		return parts
	}
}

// kvModel is the register-with-counter model, partitioned by key when keys (the partitions'
// order) is given, else for a history of one key.
func kvModel(keys []string) porcupine.Model {
	var partition func([]porcupine.Operation) [][]porcupine.Operation
	if keys != nil {
		partition = partitionByKey(keys)
	}
	return porcupine.Model{
		Partition:                 partition,
		Init:                      func() interface{} { return regState{} },
		Step:                      step,
		Hash:                      hashState,
		DescribeOperation:         describeOperation,
		DescribeState:             describeState,
		DescribeOperationMetadata: describeMetadata,
	}
}
