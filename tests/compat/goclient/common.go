// Shared pieces of rmqgo: flag parsing, templates, deterministic bodies, message records.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// errHelp is returned after -h printed a subcommand's flags: exit 0, nothing more to do.
var errHelp = errors.New("help shown")

// commonFlags are accepted by every client subcommand.
type commonFlags struct {
	namesrv   string
	timeout   time.Duration
	logLevel  string
	accessKey string
	secretKey string
}

func (c *commonFlags) register(fs *flag.FlagSet, defaultTimeout time.Duration) {
	fs.StringVar(&c.namesrv, "namesrv", "127.0.0.1:9876",
		"name server address(es) host:port, ';' or ',' separated (loopback only in tests)")
	fs.DurationVar(&c.timeout, "timeout", defaultTimeout,
		"bound on the whole run (Go duration, e.g. 30s); a watchdog exits 3 after +7s")
	fs.StringVar(&c.logLevel, "log-level", "warn", "Go client log level on stderr: "+
		"debug|info|warn|error")
	fs.StringVar(&c.accessKey, "access-key", "", "ACL 1.0 access key (with --secret-key)")
	fs.StringVar(&c.secretKey, "secret-key", "", "ACL 1.0 secret key: requests are signed")
}

// credentials are the ACL account to sign with; IsEmpty() when none was given.
func (c *commonFlags) credentials() primitive.Credentials {
	return primitive.Credentials{AccessKey: c.accessKey, SecretKey: c.secretKey}
}

// nameServers splits --namesrv; the Go client would otherwise fall back to an HTTP resolver.
func (c *commonFlags) nameServers() ([]string, error) {
	fields := strings.FieldsFunc(c.namesrv, func(r rune) bool { return r == ';' || r == ',' })
	if len(fields) == 0 {
		return nil, usageError{"--namesrv is empty"}
	}
	if _, err := primitive.NewNamesrvAddr(fields...); err != nil {
		return nil, usageError{fmt.Sprintf("--namesrv %q: %v", c.namesrv, err)}
	}
	return fields, nil
}

func (c *commonFlags) apply() {
	rlog.SetLogLevel(c.logLevel)
	startWatchdog(c.timeout)
}

// parseFlags parses args, turning -h into errHelp and bad flags into usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	if err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected arguments: %v", fs.Args())}
	}
	return nil
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("rmqgo "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// propFlags collects repeated --props k=v flags in order.
type propFlags []string

func (p *propFlags) String() string { return strings.Join(*p, " ") }

func (p *propFlags) Set(value string) error {
	if !strings.Contains(value, "=") || strings.HasPrefix(value, "=") {
		return fmt.Errorf("want key=value, got %q", value)
	}
	*p = append(*p, value)
	return nil
}

// templatePattern finds {i} and {i%N} in tag/keys/props/sharding-key templates.
var templatePattern = regexp.MustCompile(`\{i(?:%([0-9]+))?\}`)

// expand replaces {i} with the message index and {i%N} with index modulo N.
func expand(template string, index int) string {
	return templatePattern.ReplaceAllStringFunc(template, func(match string) string {
		groups := templatePattern.FindStringSubmatch(match)
		if groups[1] == "" {
			return strconv.Itoa(index)
		}
		modulus, err := strconv.Atoi(groups[1])
		if err != nil || modulus <= 0 {
			return match
		}
		return strconv.Itoa(index % modulus)
	})
}

// makeBody returns the body of message `index`: the literal text if given, else the string
// "rmqgo:<index>:" repeated and cut to sizeBytes, so a test can recompute it exactly.
func makeBody(literal string, sizeBytes int, index int) []byte {
	if literal != "" {
		return []byte(expand(literal, index))
	}
	unit := "rmqgo:" + strconv.Itoa(index) + ":"
	repeats := sizeBytes/len(unit) + 1
	return []byte(strings.Repeat(unit, repeats)[:sizeBytes])
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// messageRecord is the JSON line for one received message (push or pull).
func messageRecord(msg *primitive.MessageExt, delivery int) map[string]interface{} {
	props := msg.GetProperties()
	if props == nil {
		props = map[string]string{}
	}
	record := map[string]interface{}{
		"type":            "message",
		"msgId":           msg.MsgId,
		"offsetMsgId":     msg.OffsetMsgId,
		"topic":           msg.Topic,
		"tags":            msg.GetTags(),
		"keys":            msg.GetKeys(),
		"props":           props,
		"bodySize":        len(msg.Body),
		"bodySha256":      sha256Hex(msg.Body),
		"queueOffset":     msg.QueueOffset,
		"commitLogOffset": msg.CommitLogOffset,
		"storeSize":       msg.StoreSize,
		"sysFlag":         msg.SysFlag,
		"bodyCRC":         msg.BodyCRC,
		"reconsumeTimes":  msg.ReconsumeTimes,
		"bornTimestamp":   msg.BornTimestamp,
		"storeTimestamp":  msg.StoreTimestamp,
		"bornHost":        msg.BornHost,
		"storeHost":       msg.StoreHost,
		"delivery":        delivery,
	}
	if msg.Queue != nil {
		record["queueId"] = msg.Queue.QueueId
		record["brokerName"] = msg.Queue.BrokerName
	}
	return record
}

// sortedKeys returns a map's keys in order, for stable output.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
