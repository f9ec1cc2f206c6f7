// The oracle: reads what our hand-written TypeScript readers read, with the Go libraries that
// kube-apiserver, kube-controller-manager and kubelet use, so tests can compare the two on generated inputs.
//
// Protocol: one JSON request a line on stdin, {"kind": "<reader>", "input": <any JSON>}; one JSON answer a
// line on stdout, in the same order. Each reader registers itself (register) from a file of its own.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

type request struct {
	Kind  string          `json:"kind"`
	Input json.RawMessage `json:"input"`
}

// A reader answers one input; it never fails the program: what Go refuses is part of its answer.
type reader func(input json.RawMessage) any

var readers = map[string]reader{}

func register(kind string, read reader) { readers[kind] = read }

// echo proves the protocol itself.
func init() { register("echo", func(input json.RawMessage) any { return input }) }

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)
	for {
		line, err := in.ReadBytes('\n')
		if err == io.EOF && len(line) == 0 {
			break
		} else if err != nil && err != io.EOF {
			fmt.Fprintln(os.Stderr, "oracle:", err)
			os.Exit(1)
		}
		var req request
		var answer any
		if err := json.Unmarshal(line, &req); err != nil {
			answer = map[string]string{"protocolError": err.Error()}
		} else if read, ok := readers[req.Kind]; !ok {
			answer = map[string]string{"protocolError": fmt.Sprintf("no reader %q", req.Kind)}
		} else {
			answer = read(req.Input)
		}
		if err := encoder.Encode(answer); err != nil {
			fmt.Fprintln(os.Stderr, "oracle:", err)
			os.Exit(1)
		}
		// Flush when no further request is already buffered, so a batch is answered in one write.
		if in.Buffered() == 0 {
			if err := out.Flush(); err != nil {
				os.Exit(1)
			}
		}
	}
	_ = out.Flush()
}
