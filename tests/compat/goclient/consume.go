// rmqgo consume: the Go push consumer (clustering or broadcasting, concurrent or orderly).
package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

type consumeFlags struct {
	common     commonFlags
	group      string
	topic      string
	expr       string
	exprType   string
	model      string
	from       string
	timestamp  string
	count      int
	linger     time.Duration
	orderly    bool
	retryFirst bool
	batchMax   int
	instance   string
}

func parseConsumeFlags(args []string) (*consumeFlags, error) {
	f := &consumeFlags{}
	fs := newFlagSet("consume")
	f.common.register(fs, 60*time.Second)
	fs.StringVar(&f.group, "group", "rmqgo_consumer", "consumer group")
	fs.StringVar(&f.topic, "topic", "", "topic (required)")
	fs.StringVar(&f.expr, "expr", "*", "subscription expression (tags 'A || B' or SQL92)")
	fs.StringVar(&f.exprType, "expr-type", "tag", "tag|sql92")
	fs.StringVar(&f.model, "model", "clustering", "clustering|broadcasting")
	fs.StringVar(&f.from, "from", "first", "where a new group starts: first|last|timestamp")
	fs.StringVar(&f.timestamp, "timestamp", "", "yyyyMMddHHmmss for --from timestamp")
	fs.IntVar(&f.count, "count", 0, "exit once this many distinct msgIds were consumed "+
		"successfully (0 = run until --timeout)")
	fs.DurationVar(&f.linger, "linger", 0, "after --count, keep listening this long "+
		"(reveals extra deliveries)")
	fs.BoolVar(&f.orderly, "orderly", false, "orderly consumption (queue locks)")
	fs.BoolVar(&f.retryFirst, "retry-first", false, "ask for redelivery of every message's "+
		"first delivery (retry topic / send-back path)")
	fs.IntVar(&f.batchMax, "batch-max", 1, "most messages per consume callback")
	fs.StringVar(&f.instance, "instance", "", "client instance name (default: the pid)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return f, f.validate()
}

func (f *consumeFlags) validate() error {
	switch {
	case f.topic == "":
		return usageError{"--topic is required"}
	case f.count < 0 || f.batchMax < 1:
		return usageError{"--count must be >= 0 and --batch-max >= 1"}
	case f.model != "clustering" && f.model != "broadcasting":
		return usageError{"--model must be clustering or broadcasting"}
	case f.exprType != "tag" && f.exprType != "sql92":
		return usageError{"--expr-type must be tag or sql92"}
	case f.from == "timestamp" && f.timestamp == "":
		return usageError{"--from timestamp needs --timestamp yyyyMMddHHmmss"}
	}
	return nil
}

func (f *consumeFlags) options(nameServers []string) ([]consumer.Option, error) {
	options := []consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(nameServers)),
		consumer.WithGroupName(f.group), consumer.WithConsumerOrder(f.orderly),
		consumer.WithConsumeMessageBatchMaxSize(f.batchMax),
	}
	switch f.from {
	case "first":
		options = append(options, consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	case "last":
		options = append(options, consumer.WithConsumeFromWhere(consumer.ConsumeFromLastOffset))
	case "timestamp":
		options = append(options, consumer.WithConsumeFromWhere(consumer.ConsumeFromTimestamp),
			consumer.WithConsumeTimestamp(f.timestamp))
	default:
		return nil, usageError{"--from must be first, last or timestamp"}
	}
	if f.model == "broadcasting" {
		options = append(options, consumer.WithConsumerModel(consumer.BroadCasting))
	} else {
		options = append(options, consumer.WithConsumerModel(consumer.Clustering))
	}
	if f.instance != "" {
		options = append(options, consumer.WithInstance(f.instance))
	}
	if credentials := f.common.credentials(); !credentials.IsEmpty() {
		options = append(options, consumer.WithCredentials(credentials))
	}
	return options, nil
}

func (f *consumeFlags) selector() consumer.MessageSelector {
	if f.exprType == "sql92" {
		return consumer.MessageSelector{Type: consumer.SQL92, Expression: f.expr}
	}
	return consumer.MessageSelector{Type: consumer.TAG, Expression: f.expr}
}

// tally counts deliveries per msgId and signals once enough distinct msgIds were consumed
// successfully (a delivery refused by --retry-first does not count).
type tally struct {
	mu         sync.Mutex
	deliveries map[string]int
	consumed   map[string]bool
	total      int
	target     int
	reached    chan struct{}
	closed     bool
}

func newTally(target int) *tally {
	return &tally{deliveries: map[string]int{}, consumed: map[string]bool{}, target: target,
		reached: make(chan struct{})}
}

// record returns how many times this msgId has now been delivered.
func (t *tally) record(msgID string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deliveries[msgID]++
	t.total++
	return t.deliveries[msgID]
}

// acknowledge marks msgIds consumed successfully.
func (t *tally) acknowledge(msgs []*primitive.MessageExt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, msg := range msgs {
		t.consumed[msg.MsgId] = true
	}
	if t.target > 0 && !t.closed && len(t.consumed) >= t.target {
		t.closed = true
		close(t.reached)
	}
}

func (t *tally) snapshot() (distinct, consumed, total, duplicated int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.deliveries {
		if n > 1 {
			duplicated++
		}
	}
	return len(t.deliveries), len(t.consumed), t.total, duplicated
}

// handler builds the consume callback: emit each message, optionally refuse first deliveries.
func (f *consumeFlags) handler(t *tally) func(context.Context, ...*primitive.MessageExt) (
	consumer.ConsumeResult, error) {
	return func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		refuse := false
		for _, msg := range msgs {
			delivery := t.record(msg.MsgId)
			out.emit(messageRecord(msg, delivery))
			if f.retryFirst && delivery == 1 {
				refuse = true
			}
		}
		if !refuse {
			t.acknowledge(msgs)
			return consumer.ConsumeSuccess, nil
		}
		if f.orderly {
			return consumer.SuspendCurrentQueueAMoment, nil
		}
		return consumer.ConsumeRetryLater, nil
	}
}

func runConsume(args []string) error {
	f, err := parseConsumeFlags(args)
	if err != nil {
		return helpIsSuccess(err)
	}
	nameServers, err := f.common.nameServers()
	if err != nil {
		return err
	}
	options, err := f.options(nameServers)
	if err != nil {
		return err
	}
	f.common.apply()
	started := time.Now()
	c, err := rocketmq.NewPushConsumer(options...)
	if err != nil {
		return err
	}
	t := newTally(f.count)
	if err := c.Subscribe(f.topic, f.selector(), f.handler(t)); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("consumer start: %w", err)
	}
	reached := waitForCount(t, f, started)
	// Shut down before the summary: it commits offsets, and no callback may print after it.
	boundedShutdown("consumer", c.Shutdown)
	return consumeSummary(t, f, reached, started)
}

// waitForCount blocks until the target is reached (then lingers) or the deadline passes.
func waitForCount(t *tally, f *consumeFlags, started time.Time) bool {
	deadline := time.NewTimer(f.common.timeout - time.Since(started))
	defer deadline.Stop()
	select {
	case <-t.reached:
		if f.linger > 0 {
			time.Sleep(f.linger)
		}
		return true
	case <-deadline.C:
		return f.count == 0
	}
}

func consumeSummary(t *tally, f *consumeFlags, reached bool, started time.Time) error {
	distinct, consumed, total, duplicated := t.snapshot()
	out.emit(map[string]interface{}{
		"type": "summary", "command": "consume", "distinct": distinct, "consumed": consumed,
		"deliveries": total,
		"duplicated": duplicated, "target": f.count, "reached": reached,
		"model": f.model, "orderly": f.orderly, "expr": strings.TrimSpace(f.expr),
		"elapsedMs": time.Since(started).Milliseconds(),
	})
	if !reached {
		return timeoutError{fmt.Sprintf("timed out after %v with %d of %d messages consumed",
			f.common.timeout, consumed, f.count)}
	}
	return nil
}
