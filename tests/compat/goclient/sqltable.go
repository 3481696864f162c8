// rmqgo sqltable: one SQL92 selector after another over a topic, each pulled from offset 0.
//
// For each line of --exprs-file (a JSON string: the selector) the pull consumer subscribes the
// topic with that selector and pulls every queue from offset 0 until its nextBeginOffset
// reaches the queue's max offset (so no pull waits at the end of a queue), then prints
// {"type":"sqlmatch","index":i,"bodies":[...],"error":"..."} with the bodies it received.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

func readSelectors(path string) ([]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var selectors []string
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var selector string
		if err := json.Unmarshal(scanner.Bytes(), &selector); err != nil {
			return nil, fmt.Errorf("--exprs-file line %d: %w", len(selectors)+1, err)
		}
		selectors = append(selectors, selector)
	}
	return selectors, scanner.Err()
}

// pullAll pulls one queue from 0 to its max offset with the subscribed selector.
func pullAll(ctx context.Context, pc interface {
	PullFrom(context.Context, *primitive.MessageQueue, int64, int) (*primitive.PullResult, error)
}, mq *primitive.MessageQueue) ([]string, error) {
	var bodies []string
	offset := int64(0)
	for ctx.Err() == nil {
		res, err := pc.PullFrom(ctx, mq, offset, 32)
		if err != nil {
			return bodies, err
		}
		for _, msg := range res.GetMessageExts() {
			bodies = append(bodies, string(msg.Body))
		}
		if res.Status == primitive.PullNoNewMsg || res.Status == primitive.PullOffsetIllegal ||
			res.NextBeginOffset <= offset || res.NextBeginOffset >= res.MaxOffset {
			return bodies, nil
		}
		offset = res.NextBeginOffset
	}
	return bodies, ctx.Err()
}

func runSQLTable(args []string) error {
	f := &pullFlags{}
	var exprsFile string
	fs := newFlagSet("sqltable")
	f.common.register(fs, 120*time.Second)
	fs.StringVar(&f.group, "group", "rmqgo_sqltable", "consumer group")
	fs.StringVar(&f.topic, "topic", "", "topic (required)")
	fs.StringVar(&exprsFile, "exprs-file", "", "selectors, one JSON string per line (required)")
	if err := parseFlags(fs, args); err != nil {
		return helpIsSuccess(err)
	}
	if f.topic == "" || exprsFile == "" {
		return usageError{"--topic and --exprs-file are required"}
	}
	f.queueID, f.expr, f.exprType = -1, "TRUE", "sql92"
	selectors, err := readSelectors(exprsFile)
	if err != nil {
		return err
	}
	nameServers, err := f.common.nameServers()
	if err != nil {
		return err
	}
	f.common.apply()
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
	for index, selector := range selectors {
		err := pc.Subscribe(f.topic, consumer.MessageSelector{Type: consumer.SQL92,
			Expression: selector})
		bodies := []string{}
		for _, mq := range queues {
			if err != nil {
				break
			}
			var found []string
			found, err = pullAll(ctx, pc, mq)
			bodies = append(bodies, found...)
		}
		out.emit(map[string]interface{}{"type": "sqlmatch", "index": index, "bodies": bodies,
			"error": errorText(err)})
	}
	return ctx.Err()
}
