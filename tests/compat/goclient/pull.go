// rmqgo pull: the v2.1.2 pull consumer's PullFrom over explicit queues and offsets.
//
// v2.1.2 sends every pull with the suspend flag and suspendTimeoutMillis=20000 on a context it
// does not let us cancel, so a pull at the end of a queue blocks until a message arrives or the
// broker gives up (~20 s). Queues are therefore pulled in parallel, and the run ends as soon as
// --count messages arrived, every queue reported no more messages, or the deadline passed.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// rebalanceSettle is how long --commit waits after Start for the first rebalance.
const rebalanceSettle = time.Second

type pullFlags struct {
	common   commonFlags
	group    string
	topic    string
	expr     string
	exprType string
	queueID  int
	offset   int64
	count    int
	batch    int
	commit   bool
	instance string
}

func parsePullFlags(args []string) (*pullFlags, error) {
	f := &pullFlags{}
	fs := newFlagSet("pull")
	f.common.register(fs, 60*time.Second)
	fs.StringVar(&f.group, "group", "rmqgo_pull", "consumer group")
	fs.StringVar(&f.topic, "topic", "", "topic (required)")
	fs.StringVar(&f.expr, "expr", "*", "subscription expression")
	fs.StringVar(&f.exprType, "expr-type", "tag", "tag|sql92")
	fs.IntVar(&f.queueID, "queue-id", -1, "queue to pull (-1 = every queue in the route)")
	fs.Int64Var(&f.offset, "offset", 0, "first queue offset; -1 = the group's stored offset")
	fs.IntVar(&f.count, "count", 0, "stop after this many messages (0 = until every queue "+
		"reports no new message)")
	fs.IntVar(&f.batch, "batch", 32, "maxMsgNums per pull request")
	fs.BoolVar(&f.commit, "commit", false, "store each queue's next offset for the group")
	fs.StringVar(&f.instance, "instance", "", "client instance name (default rmqgo-pull-<pid>)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	switch {
	case f.topic == "":
		return nil, usageError{"--topic is required"}
	case f.batch < 1 || f.count < 0 || f.offset < -1:
		return nil, usageError{"--batch >= 1, --count >= 0, --offset >= -1 required"}
	case f.exprType != "tag" && f.exprType != "sql92":
		return nil, usageError{"--expr-type must be tag or sql92"}
	}
	return f, nil
}

func pullStatusName(status primitive.PullStatus) string {
	switch status {
	case primitive.PullFound:
		return "FOUND"
	case primitive.PullNoNewMsg:
		return "NO_NEW_MSG"
	case primitive.PullNoMsgMatched:
		return "NO_MATCHED_MSG"
	case primitive.PullOffsetIllegal:
		return "OFFSET_ILLEGAL"
	}
	return "BROKER_TIMEOUT"
}

// routeQueues asks the name server for the topic's queues through the admin API.
func routeQueues(ctx context.Context, f *pullFlags, nameServers []string) (
	[]*primitive.MessageQueue, error) {
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))
	if err != nil {
		return nil, err
	}
	defer boundedShutdown("admin", adm.Close)
	queues, err := adm.FetchPublishMessageQueues(ctx, f.topic)
	if err != nil {
		return nil, fmt.Errorf("route of %s: %w", f.topic, err)
	}
	var chosen []*primitive.MessageQueue
	for _, q := range queues {
		if f.queueID < 0 || q.QueueId == f.queueID {
			chosen = append(chosen, q)
		}
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf("topic %s has no queue %d in its route", f.topic, f.queueID)
	}
	return chosen, nil
}

func newPullConsumer(f *pullFlags, nameServers []string) (rocketmq.PullConsumer, error) {
	instance := f.instance
	if instance == "" {
		// Distinct from the admin client's default pid instance: they must not share a client.
		instance = fmt.Sprintf("rmqgo-pull-%d", os.Getpid())
	}
	pc, err := rocketmq.NewPullConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(nameServers)),
		consumer.WithGroupName(f.group), consumer.WithInstance(instance))
	if err != nil {
		return nil, err
	}
	selector := consumer.MessageSelector{Type: consumer.TAG, Expression: f.expr}
	if f.exprType == "sql92" {
		selector.Type = consumer.SQL92
	}
	if err := pc.Subscribe(f.topic, selector); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	if err := pc.Start(); err != nil {
		return nil, fmt.Errorf("pull consumer start: %w", err)
	}
	return pc, nil
}

// puller runs one goroutine per queue and stops everything once the count is reached.
type puller struct {
	flags    *pullFlags
	consumer rocketmq.PullConsumer
	received int64
	failed   int64
	enough   chan struct{}
	once     sync.Once
	pending  sync.WaitGroup
	nextMu   sync.Mutex
	next     map[int]int64
}

func (p *puller) startOffset(mq *primitive.MessageQueue) int64 {
	if p.flags.offset >= 0 {
		return p.flags.offset
	}
	stored, err := p.consumer.CurrentOffset(mq)
	out.emit(map[string]interface{}{"type": "offset", "queueId": mq.QueueId,
		"stored": stored, "error": errorText(err)})
	if err != nil || stored < 0 {
		return 0
	}
	return stored
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// pullQueue pulls one queue until it has no new message (or the run has enough).
func (p *puller) pullQueue(ctx context.Context, mq *primitive.MessageQueue) {
	defer p.pending.Done()
	offset := p.startOffset(mq)
	for ctx.Err() == nil {
		res, err := p.consumer.PullFrom(ctx, mq, offset, p.flags.batch)
		record := map[string]interface{}{"type": "pull", "queueId": mq.QueueId,
			"requestOffset": offset}
		if err != nil {
			atomic.AddInt64(&p.failed, 1)
			record["status"], record["error"] = "ERROR", err.Error()
			out.emit(record)
			return
		}
		msgs := res.GetMessageExts()
		record["status"], record["found"] = pullStatusName(res.Status), len(msgs)
		record["nextBeginOffset"], record["minOffset"] = res.NextBeginOffset, res.MinOffset
		record["maxOffset"] = res.MaxOffset
		out.emit(record)
		for _, msg := range msgs {
			out.emit(messageRecord(msg, 1))
		}
		p.advance(mq, res.NextBeginOffset, len(msgs))
		if !p.keepPulling(res, offset) {
			return
		}
		offset = res.NextBeginOffset
	}
}

// keepPulling: FOUND and NO_MATCHED move on; NO_NEW_MSG ends the queue unless a count is still
// awaited (then the next long poll waits for it); OFFSET_ILLEGAL always ends it.
func (p *puller) keepPulling(res *primitive.PullResult, offset int64) bool {
	switch res.Status {
	case primitive.PullFound, primitive.PullNoMsgMatched:
		return res.NextBeginOffset > offset
	case primitive.PullNoNewMsg:
		return p.flags.count > 0
	}
	return false
}

func (p *puller) advance(mq *primitive.MessageQueue, next int64, found int) {
	p.nextMu.Lock()
	p.next[mq.QueueId] = next
	p.nextMu.Unlock()
	total := atomic.AddInt64(&p.received, int64(found))
	if p.flags.count > 0 && total >= int64(p.flags.count) {
		p.once.Do(func() { close(p.enough) })
	}
}

func runPull(args []string) error {
	f, err := parsePullFlags(args)
	if err != nil {
		return helpIsSuccess(err)
	}
	nameServers, err := f.common.nameServers()
	if err != nil {
		return err
	}
	f.common.apply()
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), f.common.timeout)
	defer cancel()
	queues, err := routeQueues(ctx, f, nameServers)
	if err != nil {
		return err
	}
	pc, err := newPullConsumer(f, nameServers)
	if err != nil {
		return err
	}
	defer boundedShutdown("pull consumer", pc.Shutdown)
	if f.commit {
		// PersistOffset only writes queues the (asynchronous) first rebalance has assigned to
		// this client, and drops the others' offsets: let that rebalance finish first.
		time.Sleep(rebalanceSettle)
	}
	p := &puller{flags: f, consumer: pc, enough: make(chan struct{}), next: map[int]int64{}}
	for _, mq := range queues {
		p.pending.Add(1)
		go p.pullQueue(ctx, mq)
	}
	finished := waitPullers(ctx, p)
	if f.commit {
		commitOffsets(ctx, p, queues)
	}
	return pullSummary(p, len(queues), finished, started)
}

// waitPullers returns true when every queue ran dry or the count was reached in time.
func waitPullers(ctx context.Context, p *puller) bool {
	allDone := make(chan struct{})
	go func() { p.pending.Wait(); close(allDone) }()
	select {
	case <-allDone:
		return p.flags.count == 0 || atomic.LoadInt64(&p.received) >= int64(p.flags.count)
	case <-p.enough:
		return true
	case <-ctx.Done():
		return false
	}
}

// commitOffsets stores each pulled queue's next offset for the group (UPDATE_CONSUMER_OFFSET).
func commitOffsets(ctx context.Context, p *puller, queues []*primitive.MessageQueue) {
	p.nextMu.Lock()
	defer p.nextMu.Unlock()
	for _, mq := range queues {
		next, ok := p.next[mq.QueueId]
		if !ok {
			continue
		}
		err := p.consumer.UpdateOffset(mq, next)
		out.emit(map[string]interface{}{"type": "commit", "queueId": mq.QueueId,
			"offset": next, "error": errorText(err)})
	}
	if err := p.consumer.PersistOffset(ctx, p.flags.topic); err != nil {
		fmt.Fprintf(os.Stderr, "rmqgo pull: persist offsets: %v\n", err)
		atomic.AddInt64(&p.failed, 1)
	}
}

func pullSummary(p *puller, queueCount int, finished bool, started time.Time) error {
	received := atomic.LoadInt64(&p.received)
	failed := atomic.LoadInt64(&p.failed)
	out.emit(map[string]interface{}{
		"type": "summary", "command": "pull", "queues": queueCount, "received": received,
		"failedRequests": failed, "target": p.flags.count, "reached": finished,
		"elapsedMs": time.Since(started).Milliseconds(),
	})
	switch {
	case !finished:
		return timeoutError{fmt.Sprintf("deadline passed with %d of %d messages", received,
			p.flags.count)}
	case failed > 0:
		return fmt.Errorf("%d pull requests failed", failed)
	}
	return nil
}
