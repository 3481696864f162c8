// rmqgo5: scenarios of the official RocketMQ 5 Go SDK (github.com/apache/rocketmq-clients/golang/v5)
// through a gRPC proxy, the same ones as tools/proxy_sdk/python_sdk.py and JavaSdk.java.
//
// Usage: rmqgo5 ENDPOINT OP KEY=VALUE... [then OP KEY=VALUE...]
// Ops: produce normal=T fifo=T delay=T tx=T run=R [delay_s=3] [tx_wait_s=60]
//
//	simple topic=T group=G dlq_topic=T2 dlq_group=G2 run=R   (as python_sdk.py's op_simple)
//
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
	"sync"
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

// checker answers the server's check-back of a half message by its "decision" property (as
// python_sdk.py's Checker): the one left to the check is committed, and closes asked.
func checker(asked chan struct{}) *rmq.TransactionChecker {
	var once sync.Once
	return &rmq.TransactionChecker{Check: func(view *rmq.MessageView) rmq.TransactionResolution {
		decision := view.GetProperties()["decision"]
		result("tx-check", "decision", decision, "msg_id", view.GetMessageId())
		if decision == "check" {
			once.Do(func() { close(asked) })
		}
		// A check-back of a transaction the client already ended gets the same answer.
		if decision == "rollback" {
			return rmq.ROLLBACK
		}
		return rmq.COMMIT
	}}
}

// transactions sends three half messages: the client commits one, rolls one back and leaves
// the third to the server's check-back.
func transactions(producer rmq.Producer, topic, run string) error {
	for _, decision := range []string{"commit", "rollback", "check"} {
		transaction := producer.BeginTransaction()
		msg := message(topic, fmt.Sprintf("%s-tx-%s", run, decision), "TagTx")
		msg.SetKeys(fmt.Sprintf("%s-tx-%s", run, decision))
		msg.AddProperty("decision", decision)
		receipts, err := producer.SendWithTransaction(context.TODO(), msg, transaction)
		if err != nil {
			return err
		}
		result("tx-send", "status", "ok", "decision", decision, "msg_id", receipts[0].MessageID)
		switch decision {
		case "commit":
			err = transaction.Commit()
		case "rollback":
			err = transaction.RollBack()
		}
		if err != nil {
			return err
		}
		result("tx-end", "decision", decision)
	}
	return nil
}

func produce(config *rmq.Config, args map[string]string) error {
	run := args["run"]
	topics := []string{args["normal"], args["fifo"], args["delay"]}
	options := []rmq.ProducerOption{}
	asked := make(chan struct{})
	if args["tx"] != "" {
		topics = append(topics, args["tx"])
		options = append(options, rmq.WithTransactionChecker(checker(asked)))
	}
	producer, err := rmq.NewProducer(config, append(options, rmq.WithTopics(topics...))...)
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
	if args["tx"] != "" {
		if err = transactions(producer, args["tx"], run); err != nil {
			return err
		}
	}
	send(producer, "mismatch", message(args["fifo"], run+"-mismatch", "TagM"))
	if args["tx"] != "" {
		wait, _ := strconv.Atoi(valueOr(args, "tx_wait_s", "60"))
		select {
		case <-asked:
			// The SDK ends a checked transaction in a goroutine after Check returns, and its
			// GracefulStop does not wait for it: give that EndTransaction time to be sent.
			time.Sleep(3 * time.Second)
			result("tx-checked", "asked", "true")
		case <-time.After(time.Duration(wait) * time.Second):
			result("tx-checked", "asked", "false")
		}
	}
	return nil
}

func producePlain(config *rmq.Config, topic string, bodies ...string) error {
	producer, err := rmq.NewProducer(config, rmq.WithTopics(topic))
	if err != nil {
		return err
	}
	if err = producer.Start(); err != nil {
		return err
	}
	defer producer.GracefulStop()
	for _, body := range bodies {
		if _, err = producer.Send(context.TODO(), message(topic, body, "TagC")); err != nil {
			return err
		}
	}
	return nil
}

func receivedFields(mv *rmq.MessageView) []string {
	return []string{"body", string(mv.GetBody()), "attempt",
		strconv.Itoa(int(mv.GetDeliveryAttempt())), "msg_id", mv.GetMessageId()}
}

// receiveUntil receives (invisible 10 s, the proxy's minimum) until done() or the deadline;
// a receive refused before the proxy has the consumer's settings is tried again.
func receiveUntil(consumer rmq.SimpleConsumer, done func() bool, deadline time.Time,
	handle func(*rmq.MessageView) error) error {
	for !done() && time.Now().Before(deadline) {
		views, err := consumer.Receive(context.TODO(), 16, 10*time.Second)
		if err != nil {
			if strings.Contains(err.Error(), "MESSAGE_NOT_FOUND") {
				continue
			}
			if strings.Contains(err.Error(), "settings") {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			return err
		}
		for _, view := range views {
			if err = handle(view); err != nil {
				return err
			}
		}
	}
	return nil
}

func newSimple(config *rmq.Config, group, topic string) (rmq.SimpleConsumer, error) {
	groupConfig := *config
	groupConfig.ConsumerGroup = group
	consumer, err := rmq.NewSimpleConsumer(&groupConfig, rmq.WithAwaitDuration(3*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		return nil, err
	}
	return consumer, consumer.Start()
}

// simple: as tools/proxy_sdk/python_sdk.py's op_simple.
func simple(config *rmq.Config, args map[string]string) error {
	run, topic := args["run"], args["topic"]
	wait, _ := strconv.Atoi(valueOr(args, "wait_s", "60"))
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	if err := producePlain(config, topic, run+"-simple-0", run+"-simple-1",
		run+"-simple-2"); err != nil {
		return err
	}
	if err := producePlain(config, args["dlq_topic"], run+"-dlq"); err != nil {
		return err
	}
	consumer, err := newSimple(config, args["group"], topic)
	if err != nil {
		return err
	}
	seen := map[string]int{}
	second := run + "-simple-1"
	err = receiveUntil(consumer, func() bool {
		return seen[run+"-simple-0"] > 0 && seen[run+"-simple-2"] > 0 && seen[second] == 2
	}, deadline, func(view *rmq.MessageView) error {
		body := string(view.GetBody())
		seen[body]++
		result("simple-received", receivedFields(view)...)
		if body == second && seen[body] == 1 {
			result("simple-invisible", "body", body, "seconds", "1")
			return consumer.ChangeInvisibleDuration(view, time.Second)
		}
		result("simple-ack", "body", body)
		return consumer.Ack(context.TODO(), view)
	})
	consumer.GracefulStop()
	if err != nil {
		return err
	}
	dlq, err := newSimple(config, args["dlq_group"], args["dlq_topic"])
	if err != nil {
		return err
	}
	defer dlq.GracefulStop()
	attempts := 0
	refuse := func(view *rmq.MessageView) error {
		attempts++
		result("dlq-received", receivedFields(view)...)
		return dlq.ChangeInvisibleDuration(view, time.Second)
	}
	if err = receiveUntil(dlq, func() bool { return attempts >= 2 }, deadline, refuse); err != nil {
		return err
	}
	quiet, _ := strconv.Atoi(valueOr(args, "quiet_s", "8"))
	quietUntil := time.Now().Add(time.Duration(quiet) * time.Second)
	return receiveUntil(dlq, func() bool { return time.Now().After(quietUntil) }, deadline, refuse)
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
	ops := map[string]func(*rmq.Config, map[string]string) error{"produce": produce, "simple": simple}
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
