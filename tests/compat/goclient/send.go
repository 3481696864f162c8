// rmqgo send: the Go producer in sync, async, oneway and batch modes, with queue selectors.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

type sendFlags struct {
	common        commonFlags
	topic         string
	count         int
	mode          string
	tag           string
	keys          string
	props         propFlags
	bodySizeBytes int
	body          string
	batch         int
	group         string
	instance      string
	retry         int
	sendTimeout   time.Duration
	selector      string
	shardingKey   string
	queueID       int
	delayLevel    int
	inflight      int
}

func parseSendFlags(args []string) (*sendFlags, error) {
	f := &sendFlags{}
	fs := newFlagSet("send")
	f.common.register(fs, 60*time.Second)
	fs.StringVar(&f.topic, "topic", "", "topic (required)")
	fs.IntVar(&f.count, "count", 1, "number of messages")
	fs.StringVar(&f.mode, "mode", "sync", "sync|async|oneway")
	fs.StringVar(&f.tag, "tag", "", "tag template ({i}, {i%N} expand per message)")
	fs.StringVar(&f.keys, "keys", "", "comma-separated key templates")
	fs.Var(&f.props, "props", "user property key=value (value is a template); repeatable")
	fs.IntVar(&f.bodySizeBytes, "body-size", 64, "body size in bytes: \"rmqgo:<i>:\" repeated")
	fs.StringVar(&f.body, "body", "", "literal body template (overrides --body-size)")
	fs.IntVar(&f.batch, "batch", 1, "messages per request; >1 sends SEND_BATCH_MESSAGE")
	fs.StringVar(&f.group, "group", "rmqgo_producer", "producer group")
	fs.StringVar(&f.instance, "instance", "", "client instance name (default: the pid)")
	fs.IntVar(&f.retry, "retry", 2, "client retries per send")
	fs.DurationVar(&f.sendTimeout, "send-timeout", 3*time.Second, "per-request timeout")
	fs.StringVar(&f.selector, "selector", "roundrobin", "roundrobin|hash|random|manual")
	fs.StringVar(&f.shardingKey, "sharding-key", "", "sharding key template (hash selector)")
	fs.IntVar(&f.queueID, "queue-id", -1, "queue id for --selector manual")
	fs.IntVar(&f.delayLevel, "delay-level", 0, "delay level 1..18 (0 = none)")
	fs.IntVar(&f.inflight, "inflight", 64, "async mode: most requests awaiting a callback")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return f, f.validate()
}

func (f *sendFlags) validate() error {
	switch {
	case f.topic == "":
		return usageError{"--topic is required"}
	case f.count < 1 || f.batch < 1 || f.inflight < 1:
		return usageError{"--count, --batch and --inflight must be >= 1"}
	case f.bodySizeBytes < 0 || f.bodySizeBytes > 4*1024*1024:
		return usageError{"--body-size must be within 0..4194304"}
	case f.mode != "sync" && f.mode != "async" && f.mode != "oneway":
		return usageError{"--mode must be sync, async or oneway"}
	case f.selector == "manual" && f.queueID < 0:
		return usageError{"--selector manual needs --queue-id"}
	}
	return nil
}

func queueSelector(name string) (producer.QueueSelector, error) {
	switch name {
	case "roundrobin":
		return producer.NewRoundRobinQueueSelector(), nil
	case "hash":
		return producer.NewHashQueueSelector(), nil
	case "random":
		return producer.NewRandomQueueSelector(), nil
	case "manual":
		return producer.NewManualQueueSelector(), nil
	}
	return nil, usageError{fmt.Sprintf("unknown --selector %q", name)}
}

// buildMessage makes message `index` with every per-message template expanded.
func (f *sendFlags) buildMessage(index int, queue *primitive.MessageQueue) *primitive.Message {
	msg := primitive.NewMessage(f.topic, makeBody(f.body, f.bodySizeBytes, index))
	if f.tag != "" {
		msg.WithTag(expand(f.tag, index))
	}
	if f.keys != "" {
		var keys []string
		for _, key := range strings.Split(f.keys, ",") {
			keys = append(keys, expand(key, index))
		}
		msg.WithKeys(keys)
	}
	for _, prop := range f.props {
		pair := strings.SplitN(prop, "=", 2)
		msg.WithProperty(pair[0], expand(pair[1], index))
	}
	if f.shardingKey != "" {
		msg.WithShardingKey(expand(f.shardingKey, index))
	}
	if f.delayLevel > 0 {
		msg.WithDelayTimeLevel(f.delayLevel)
	}
	msg.Queue = queue
	return msg
}

func statusName(status primitive.SendStatus) string {
	switch status {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return "UNKNOWN_ERROR"
}

// sendRecord is the JSON line for one request: one message or one batch.
func sendRecord(first int, msgs []*primitive.Message, res *primitive.SendResult,
	err error, elapsed time.Duration) map[string]interface{} {
	shas := make([]string, len(msgs))
	for i, m := range msgs {
		shas[i] = sha256Hex(m.Body)
	}
	record := map[string]interface{}{
		"type": "send", "index": first, "count": len(msgs), "bodySha256": shas,
		"elapsedUs": elapsed.Microseconds(),
	}
	switch {
	case err != nil:
		record["status"] = "ERROR"
		record["error"] = err.Error()
	case res == nil:
		record["status"] = "SEND_ONEWAY"
	default:
		record["status"] = statusName(res.Status)
		record["msgId"] = res.MsgID
		record["offsetMsgId"] = res.OffsetMsgID
		record["queueOffset"] = res.QueueOffset
		if res.MessageQueue != nil {
			record["queueId"] = res.MessageQueue.QueueId
			record["brokerName"] = res.MessageQueue.BrokerName
			record["topic"] = res.MessageQueue.Topic
		}
	}
	return record
}

// manualQueue looks the queue up in the route so the manual selector has its broker name.
func manualQueue(ctx context.Context, f *sendFlags, nameServers []string) (
	*primitive.MessageQueue, error) {
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))
	if err != nil {
		return nil, err
	}
	defer boundedShutdown("admin", adm.Close)
	queues, err := adm.FetchPublishMessageQueues(ctx, f.topic)
	if err != nil {
		return nil, fmt.Errorf("route of %s: %w", f.topic, err)
	}
	for _, q := range queues {
		if q.QueueId == f.queueID {
			return q, nil
		}
	}
	return nil, fmt.Errorf("topic %s has no writable queue %d", f.topic, f.queueID)
}

func newProducer(f *sendFlags, nameServers []string) (rocketmq.Producer, error) {
	selector, err := queueSelector(f.selector)
	if err != nil {
		return nil, err
	}
	options := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(nameServers)),
		producer.WithGroupName(f.group), producer.WithRetry(f.retry),
		producer.WithSendMsgTimeout(f.sendTimeout), producer.WithQueueSelector(selector),
	}
	if f.instance != "" {
		options = append(options, producer.WithInstanceName(f.instance))
	}
	if credentials := f.common.credentials(); !credentials.IsEmpty() {
		options = append(options, producer.WithCredentials(credentials))
	}
	p, err := rocketmq.NewProducer(options...)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("producer start: %w", err)
	}
	return p, nil
}

// sender sends the batches of one run and tallies what happened.
type sender struct {
	flags    *sendFlags
	producer rocketmq.Producer
	failed   int64
	acked    int64
	inflight chan struct{}
	pending  sync.WaitGroup
}

func (s *sender) finish(first int, msgs []*primitive.Message, res *primitive.SendResult,
	err error, started time.Time) {
	if err != nil || (res != nil && res.Status != primitive.SendOK) {
		atomic.AddInt64(&s.failed, 1)
	} else {
		atomic.AddInt64(&s.acked, int64(len(msgs)))
	}
	out.emit(sendRecord(first, msgs, res, err, time.Since(started)))
}

func (s *sender) sendOne(ctx context.Context, first int, msgs []*primitive.Message) {
	started := time.Now()
	switch s.flags.mode {
	case "sync":
		res, err := s.producer.SendSync(ctx, msgs...)
		s.finish(first, msgs, res, err, started)
	case "oneway":
		err := s.producer.SendOneWay(ctx, msgs...)
		s.finish(first, msgs, nil, err, started)
	case "async":
		s.inflight <- struct{}{}
		s.pending.Add(1)
		callback := func(_ context.Context, res *primitive.SendResult, err error) {
			defer func() { <-s.inflight; s.pending.Done() }()
			if err == nil && res == nil {
				err = fmt.Errorf("async callback without result")
			}
			s.finish(first, msgs, res, err, started)
		}
		if err := s.producer.SendAsync(ctx, callback, msgs...); err != nil {
			// SendAsync failed before the request left: the callback will not run.
			<-s.inflight
			s.pending.Done()
			s.finish(first, msgs, nil, err, started)
		}
	}
}

// waitPending waits for async callbacks until the run's deadline.
func (s *sender) waitPending(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { s.pending.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func runSend(args []string) error {
	f, err := parseSendFlags(args)
	if err != nil {
		return helpIsSuccess(err)
	}
	nameServers, err := f.common.nameServers()
	if err != nil {
		return err
	}
	f.common.apply()
	ctx, cancel := context.WithTimeout(context.Background(), f.common.timeout)
	defer cancel()
	var queue *primitive.MessageQueue
	if f.selector == "manual" {
		if queue, err = manualQueue(ctx, f, nameServers); err != nil {
			return err
		}
	}
	p, err := newProducer(f, nameServers)
	if err != nil {
		return err
	}
	defer boundedShutdown("producer", p.Shutdown)
	return sendAll(ctx, &sender{flags: f, producer: p,
		inflight: make(chan struct{}, f.inflight)}, queue)
}

func sendAll(ctx context.Context, s *sender, queue *primitive.MessageQueue) error {
	f := s.flags
	started := time.Now()
	requests, sentMessages := 0, 0
	for first := 0; first < f.count && ctx.Err() == nil; first += f.batch {
		msgs := make([]*primitive.Message, 0, f.batch)
		for i := first; i < first+f.batch && i < f.count; i++ {
			msgs = append(msgs, f.buildMessage(i, queue))
		}
		s.sendOne(ctx, first, msgs)
		requests++
		sentMessages += len(msgs)
	}
	drained := s.waitPending(ctx)
	out.emit(map[string]interface{}{
		"type": "summary", "command": "send", "mode": f.mode, "requests": requests,
		"messages": sentMessages, "acked": atomic.LoadInt64(&s.acked),
		"failedRequests": atomic.LoadInt64(&s.failed),
		"elapsedMs":      time.Since(started).Milliseconds(),
	})
	switch {
	case sentMessages < f.count || !drained:
		return timeoutError{fmt.Sprintf("deadline passed: %d of %d messages sent, callbacks "+
			"drained=%v", sentMessages, f.count, drained)}
	case atomic.LoadInt64(&s.failed) > 0:
		return fmt.Errorf("%d of %d requests failed", atomic.LoadInt64(&s.failed), requests)
	}
	return nil
}

// helpIsSuccess maps the -h outcome to a clean exit.
func helpIsSuccess(err error) error {
	if err == errHelp {
		return nil
	}
	if _, ok := err.(usageError); ok {
		fmt.Fprintln(os.Stderr, "(run with -h for the flags)")
	}
	return err
}
