// rmqgo: one CLI over github.com/apache/rocketmq-client-go/v2 (v2.1.2) with JSON-lines output.
//
// Every subcommand writes one JSON object per line on stdout (each has a "type" field) and
// finishes with a {"type":"summary",...} line; diagnostics go to stderr. Every run is bounded
// by --timeout plus a hard watchdog, so a silent peer can never hang the caller.
//
// Exit codes: 0 success, 1 operation failed (send error, start failure, ...), 2 usage error,
// 3 timed out before the requested count was reached.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

const (
	harnessVersion = "1.0.0"
	clientModule   = "github.com/apache/rocketmq-client-go/v2"
	exitOK         = 0
	exitFailed     = 1
	exitUsage      = 2
	exitTimeout    = 3
	// Extra time after --timeout before the watchdog kills the process: room for a bounded
	// shutdown (shutdownBound) plus the summary line.
	watchdogGrace = 7 * time.Second
	// Upper bound for client Shutdown(): a broker that stopped answering must not hold us.
	shutdownBound = 5 * time.Second
)

// output serialises JSON lines from many goroutines (async callbacks, consumer workers).
type output struct {
	mu      sync.Mutex
	encoder *json.Encoder
}

var out = &output{encoder: json.NewEncoder(os.Stdout)}

func (o *output) emit(record map[string]interface{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// Encode writes the object and a newline in one Write on an unbuffered stdout.
	if err := o.encoder.Encode(record); err != nil {
		fmt.Fprintf(os.Stderr, "rmqgo: cannot write stdout: %v\n", err)
		os.Exit(exitFailed)
	}
}

// usageError is returned by flag parsing and validation; main maps it to exit code 2.
type usageError struct{ message string }

func (e usageError) Error() string { return e.message }

// timeoutError means the deadline passed before the requested count; exit code 3.
type timeoutError struct{ message string }

func (e timeoutError) Error() string { return e.message }

type subcommand struct {
	name    string
	summary string
	run     func(args []string) error
}

func subcommands() []subcommand {
	return []subcommand{
		{"send", "produce messages (sync|async|oneway, batches, tags/keys/props, selectors)",
			runSend},
		{"consume", "push consumer (clustering|broadcasting, orderly) until --count or --timeout",
			runConsume},
		{"pull", "pull consumer: PullFrom explicit queue offsets, optional offset commit",
			runPull},
		{"admin", "admin API: create-topic, delete-topic, topic-list, queues",
			runAdmin},
		{"sqltable", "pull a topic from offset 0 once per SQL92 selector of --exprs-file",
			runSQLTable},
		{"version", "print harness, Go client and Go toolchain versions as JSON",
			func([]string) error { return printVersion() }},
	}
}

func printUsage() {
	var b strings.Builder
	b.WriteString("usage: rmqgo <subcommand> [flags]   (rmqgo <subcommand> -h for its flags)\n\n")
	for _, c := range subcommands() {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	b.WriteString("\nOutput: JSON lines on stdout, each with a \"type\" field; " +
		"the last is \"summary\".\n")
	b.WriteString("Exit: 0 ok, 1 failed, 2 usage, 3 timed out before --count.\n")
	b.WriteString("Query/view of a message by id or key: not offered by the v2.1.2 Go API.\n")
	fmt.Fprint(os.Stderr, b.String())
}

// clientVersion reads the linked rocketmq-client-go version from the build info, so the
// report proves what was really compiled in rather than what go.mod intended.
func clientVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == clientModule {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}

func printVersion() error {
	out.emit(map[string]interface{}{
		"type": "version", "rmqgo": harnessVersion, "client": clientVersion(),
		"go": runtime.Version(),
	})
	return nil
}

// startWatchdog kills the process if it outlives its deadline plus a grace period: the Go
// client has code paths (route lookups, shutdown) that block without a context.
func startWatchdog(timeout time.Duration) {
	go func() {
		time.Sleep(timeout + watchdogGrace)
		fmt.Fprintf(os.Stderr, "rmqgo: watchdog: still running %v after the %v deadline\n",
			watchdogGrace, timeout)
		os.Exit(exitTimeout)
	}()
}

// boundedShutdown runs a client Shutdown() but gives up after shutdownBound.
func boundedShutdown(name string, shutdown func() error) {
	done := make(chan error, 1)
	go func() { done <- shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "rmqgo: %s shutdown: %v\n", name, err)
		}
	case <-time.After(shutdownBound):
		fmt.Fprintf(os.Stderr, "rmqgo: %s shutdown did not finish in %v\n", name, shutdownBound)
	}
}

func exitCodeOf(err error) int {
	switch err.(type) {
	case nil:
		return exitOK
	case usageError:
		return exitUsage
	case timeoutError:
		return exitTimeout
	default:
		return exitFailed
	}
}

func main() {
	rlog.SetLogLevel("warn")
	if len(os.Args) < 2 {
		printUsage()
		os.Exit(exitUsage)
	}
	name := os.Args[1]
	switch name {
	case "-h", "-help", "--help", "help":
		printUsage()
		os.Exit(exitOK)
	case "-version", "--version":
		name = "version"
	}
	for _, c := range subcommands() {
		if c.name == name {
			err := c.run(os.Args[2:])
			if err != nil {
				fmt.Fprintf(os.Stderr, "rmqgo %s: %v\n", name, err)
			}
			os.Exit(exitCodeOf(err))
		}
	}
	fmt.Fprintf(os.Stderr, "rmqgo: unknown subcommand %q\n", name)
	printUsage()
	os.Exit(exitUsage)
}
