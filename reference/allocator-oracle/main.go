// Command allocator-oracle runs Kubernetes' structured-parameters DRA
// allocator (k8s.io/dynamic-resource-allocation/structured, the code the
// kube-scheduler uses) on cases read as JSON Lines from stdin and writes one
// JSON line per case to stdout. See README.md for the format.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

func main() {
	timeout := flag.Duration("timeout", NewOracle().Timeout, "bound on one Allocate call (0: none)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: allocator-oracle [-timeout 10s] < cases.jsonl > results.jsonl")
		os.Exit(2)
	}
	oracle := NewOracle()
	oracle.Timeout = *timeout
	// The allocator logs through the context's logger; keep it quiet.
	ctx := klog.NewContext(context.Background(), logr.Discard())
	if err := run(ctx, oracle, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "allocator-oracle:", err)
		os.Exit(1)
	}
}

// run judges every non-blank line of in and writes one result line per case
// to out, flushing after each so that a caller can talk to it line by line.
func run(ctx context.Context, oracle *Oracle, in io.Reader, out io.Writer) error {
	reader := bufio.NewReaderSize(in, 1<<20)
	writer := bufio.NewWriterSize(out, 1<<16)
	for {
		line, readErr := reader.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			encoded, err := json.Marshal(oracle.JudgeLine(ctx, line))
			if err != nil {
				return fmt.Errorf("encode result: %w", err)
			}
			encoded = append(encoded, '\n')
			if _, err := writer.Write(encoded); err != nil {
				return err
			}
			if err := writer.Flush(); err != nil {
				return err
			}
		}
		if readErr == io.EOF {
			return writer.Flush()
		}
		if readErr != nil {
			return readErr
		}
	}
}
