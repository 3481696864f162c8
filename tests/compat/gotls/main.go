// rmqgotls: the Go client (a rocketmq-client-go build with WithTls, newer than v2.1.2) sending
// and push-consuming over TLS, with optional ACL credentials, for pybroker's compat tests.
//
// Usage: rmqgotls send|consume --namesrv ADDR --topic T --group G --count N
//
//	[--access-key AK --secret-key SK] [--timeout 60s]
//
// Prints one JSON object per line ({"type":"send"|"message"|"summary",...}); exit 0 when all
// N were sent / received, 1 on a failure, 3 on a timeout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

var outMu sync.Mutex

func emit(record map[string]interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	data, _ := json.Marshal(record)
	fmt.Println(string(data))
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rmqgotls send|consume flags")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	namesrv := fs.String("namesrv", "127.0.0.1:9876", "name server host:port")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "rmqgotls", "producer or consumer group")
	count := fs.Int("count", 1, "messages")
	accessKey := fs.String("access-key", "", "ACL access key")
	secretKey := fs.String("secret-key", "", "ACL secret key")
	timeout := fs.Duration("timeout", 60*time.Second, "bound on the run")
	useTLS := fs.Bool("tls", true, "connect with TLS")
	_ = fs.Parse(os.Args[2:])
	rlog.SetLogLevel("warn")
	go func() {
		time.Sleep(*timeout + 10*time.Second)
		fmt.Fprintln(os.Stderr, "rmqgotls: watchdog")
		os.Exit(3)
	}()
	credentials := primitive.Credentials{AccessKey: *accessKey, SecretKey: *secretKey}
	nameServers := strings.Split(*namesrv, ";")
	var status int
	if os.Args[1] == "send" {
		status = send(nameServers, *topic, *group, *count, credentials, *useTLS)
	} else {
		status = consume(nameServers, *topic, *group, *count, credentials, *useTLS, *timeout)
	}
	os.Exit(status)
}

func send(ns []string, topic, group string, count int, c primitive.Credentials, useTLS bool) int {
	options := []producer.Option{producer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		producer.WithGroupName(group), producer.WithRetry(0), producer.WithTls(useTLS),
		producer.WithSendMsgTimeout(10 * time.Second)}
	if !c.IsEmpty() {
		options = append(options, producer.WithCredentials(c))
	}
	p, err := rocketmq.NewProducer(options...)
	if err == nil {
		err = p.Start()
	}
	if err != nil {
		emit(map[string]interface{}{"type": "summary", "sent": 0, "error": err.Error()})
		return 1
	}
	defer p.Shutdown()
	sent := 0
	for i := 0; i < count; i++ {
		body := fmt.Sprintf("gotls-%d", i)
		result, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body)))
		if err != nil {
			emit(map[string]interface{}{"type": "send", "index": i, "error": err.Error()})
			continue
		}
		emit(map[string]interface{}{"type": "send", "index": i, "status": result.Status,
			"queueOffset": result.QueueOffset})
		if result.Status == primitive.SendOK {
			sent++
		}
	}
	emit(map[string]interface{}{"type": "summary", "sent": sent, "error": ""})
	if sent != count {
		return 1
	}
	return 0
}

func consume(ns []string, topic, group string, count int, c primitive.Credentials,
	useTLS bool, timeout time.Duration) int {
	options := []consumer.Option{consumer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		consumer.WithGroupName(group), consumer.WithTls(useTLS),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset)}
	if !c.IsEmpty() {
		options = append(options, consumer.WithCredentials(c))
	}
	pc, err := rocketmq.NewPushConsumer(options...)
	if err != nil {
		emit(map[string]interface{}{"type": "summary", "received": 0, "error": err.Error()})
		return 1
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	done := make(chan struct{})
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context,
		msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			body := string(m.Body)
			if !seen[body] {
				seen[body] = true
				emit(map[string]interface{}{"type": "message", "body": body})
			}
		}
		if len(seen) >= count {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err == nil {
		err = pc.Start()
	}
	if err != nil {
		emit(map[string]interface{}{"type": "summary", "received": 0, "error": err.Error()})
		return 1
	}
	status := 0
	select {
	case <-done:
	case <-time.After(timeout):
		status = 3
	}
	_ = pc.Shutdown()
	mu.Lock()
	emit(map[string]interface{}{"type": "summary", "received": len(seen), "error": ""})
	mu.Unlock()
	return status
}
