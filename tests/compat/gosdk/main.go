// rmqgo5: scenarios of the official RocketMQ 5 Go SDK (github.com/apache/rocketmq-clients/golang/v5)
// through a gRPC proxy, the same ones as tools/proxy_sdk/python_sdk.py and JavaSdk.java.
//
// Usage: rmqgo5 ENDPOINT OP KEY=VALUE... [then OP KEY=VALUE...]
// Ops: produce normal=T fifo=T delay=T run=R [delay_s=3]
// Prints "RESULT op=... k=v" lines (values URL-encoded), "RESULT op=done of=OP" after each op,
// exits 0 when every op completed.
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

func result(op string, pairs ...string) {
	var line strings.Builder
	line.WriteString("RESULT op=" + op)
	for i := 0; i+1 < len(pairs); i += 2 {
		line.WriteString(" " + pairs[i] + "=" + url.QueryEscape(pairs[i+1]))
	}
	fmt.Println(line.String())
}

func send(producer rmq.Producer, op string, msg *rmq.Message, fields ...string) {
	receipts, err := producer.Send(context.TODO(), msg)
	if err != nil {
		result(op, append([]string{"status", "error", "error", err.Error()}, fields...)...)
		return
	}
	result(op, append([]string{"status", "ok", "msg_id", receipts[0].MessageID}, fields...)...)
}

func message(topic, body, tag string) *rmq.Message {
	msg := &rmq.Message{Topic: topic, Body: []byte(body)}
	msg.SetTag(tag)
	return msg
}

func produce(config *rmq.Config, args map[string]string) error {
	run := args["run"]
	producer, err := rmq.NewProducer(config, rmq.WithTopics(args["normal"], args["fifo"],
		args["delay"]))
	if err != nil {
		return err
	}
	if err = producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	for i := 0; i < 3; i++ {
		msg := message(args["normal"], fmt.Sprintf("%s-normal-%d", run, i), "TagA")
		msg.SetKeys(fmt.Sprintf("%s-key-%d", run, i))
		msg.AddProperty("color", "blue")
		msg.AddProperty("index", strconv.Itoa(i))
		send(producer, "normal", msg, "index", strconv.Itoa(i))
	}
	for i := 0; i < 4; i++ {
		group := fmt.Sprintf("group-%d", i%2)
		msg := message(args["fifo"], fmt.Sprintf("%s-fifo-%d", run, i), "TagF")
		msg.SetMessageGroup(group)
		send(producer, "fifo", msg, "index", strconv.Itoa(i), "group", group)
	}
	delay, _ := strconv.Atoi(valueOr(args, "delay_s", "3"))
	deliver := time.Now().Truncate(time.Second).Add(time.Duration(delay) * time.Second)
	msg := message(args["delay"], run+"-delay", "TagD")
	msg.SetDelayTimestamp(deliver)
	send(producer, "delay", msg, "deliver_s", strconv.FormatInt(deliver.Unix(), 10))
	send(producer, "mismatch", message(args["fifo"], run+"-mismatch", "TagM"))
	return nil
}

func valueOr(args map[string]string, key, fallback string) string {
	if value, ok := args[key]; ok {
		return value
	}
	return fallback
}

func main() {
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	config := &rmq.Config{Endpoint: os.Args[1], Credentials: &credentials.SessionCredentials{}}
	var runs [][]string
	current := []string{}
	for _, word := range os.Args[2:] {
		if word == "then" {
			runs = append(runs, current)
			current = []string{}
		} else {
			current = append(current, word)
		}
	}
	runs = append(runs, current)
	ops := map[string]func(*rmq.Config, map[string]string) error{"produce": produce}
	for _, words := range runs {
		args := map[string]string{}
		for _, pair := range words[1:] {
			parts := strings.SplitN(pair, "=", 2)
			args[parts[0]] = parts[1]
		}
		op, known := ops[words[0]]
		if !known {
			fmt.Fprintln(os.Stderr, "unknown op", words[0])
			os.Exit(2)
		}
		if err := op(config, args); err != nil {
			fmt.Fprintln(os.Stderr, words[0], "failed:", err)
			os.Exit(1)
		}
		result("done", "of", words[0])
	}
}
