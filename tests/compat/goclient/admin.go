// rmqgo admin: what the v2.1.2 Go admin API offers (topics and routes; no message query).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

type adminFlags struct {
	common      commonFlags
	topic       string
	brokerAddr  string
	cluster     string
	readQueues  int
	writeQueues int
	perm        int
	order       bool
}

const adminUsage = "usage: rmqgo admin create-topic|delete-topic|topic-list|queues [flags]\n" +
	"  create-topic --topic T --broker-addr H:P [--read-queues 8 --write-queues 8 --perm 6]\n" +
	"  delete-topic --topic T --broker-addr H:P [--cluster DefaultCluster]\n" +
	"  topic-list\n  queues --topic T\n" +
	"Note: v2.1.2 create/delete ignore the broker's response code (only transport errors " +
	"fail).\n"

func parseAdminFlags(action string, args []string) (*adminFlags, error) {
	f := &adminFlags{}
	fs := newFlagSet("admin " + action)
	f.common.register(fs, 30*time.Second)
	fs.StringVar(&f.topic, "topic", "", "topic")
	fs.StringVar(&f.brokerAddr, "broker-addr", "", "broker host:port (create/delete)")
	fs.StringVar(&f.cluster, "cluster", "", "cluster name (delete)")
	fs.IntVar(&f.readQueues, "read-queues", 8, "read queue count (create)")
	fs.IntVar(&f.writeQueues, "write-queues", 8, "write queue count (create)")
	fs.IntVar(&f.perm, "perm", 6, "permission bits: 2 write, 4 read (create)")
	fs.BoolVar(&f.order, "order", false, "ordered topic flag (create)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	needTopic := action != "topic-list"
	needBroker := action == "create-topic" || action == "delete-topic"
	switch {
	case needTopic && f.topic == "":
		return nil, usageError{"--topic is required"}
	case needBroker && f.brokerAddr == "":
		return nil, usageError{"--broker-addr is required"}
	}
	return f, nil
}

func runAdmin(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, adminUsage)
		if len(args) == 0 {
			return usageError{"admin needs an action"}
		}
		return nil
	}
	action := args[0]
	actions := map[string]func(context.Context, adminAPI, *adminFlags) error{
		"create-topic": createTopic, "delete-topic": deleteTopic,
		"topic-list": topicList, "queues": listQueues,
	}
	do, ok := actions[action]
	if !ok {
		fmt.Fprint(os.Stderr, adminUsage)
		return usageError{fmt.Sprintf("unknown admin action %q", action)}
	}
	f, err := parseAdminFlags(action, args[1:])
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
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))
	if err != nil {
		return err
	}
	defer boundedShutdown("admin", adm.Close)
	return do(ctx, adm, f)
}

// adminAPI is the part of the v2.1.2 admin interface rmqgo uses.
type adminAPI interface {
	CreateTopic(ctx context.Context, opts ...admin.OptionCreate) error
	DeleteTopic(ctx context.Context, opts ...admin.OptionDelete) error
	FetchAllTopicList(ctx context.Context) (*admin.TopicList, error)
	FetchPublishMessageQueues(ctx context.Context, topic string) ([]*primitive.MessageQueue, error)
}

func createTopic(ctx context.Context, adm adminAPI, f *adminFlags) error {
	err := adm.CreateTopic(ctx, admin.WithTopicCreate(f.topic),
		admin.WithBrokerAddrCreate(f.brokerAddr), admin.WithReadQueueNums(f.readQueues),
		admin.WithWriteQueueNums(f.writeQueues), admin.WithPerm(f.perm),
		admin.WithOrder(f.order))
	out.emit(map[string]interface{}{"type": "summary", "command": "admin create-topic",
		"topic": f.topic, "brokerAddr": f.brokerAddr, "error": errorText(err)})
	return err
}

func deleteTopic(ctx context.Context, adm adminAPI, f *adminFlags) error {
	options := []admin.OptionDelete{admin.WithTopicDelete(f.topic),
		admin.WithBrokerAddrDelete(f.brokerAddr)}
	if f.cluster != "" {
		options = append(options, admin.WithClusterName(f.cluster))
	}
	err := adm.DeleteTopic(ctx, options...)
	out.emit(map[string]interface{}{"type": "summary", "command": "admin delete-topic",
		"topic": f.topic, "error": errorText(err)})
	return err
}

func topicList(ctx context.Context, adm adminAPI, _ *adminFlags) error {
	list, err := adm.FetchAllTopicList(ctx)
	if err != nil {
		return err
	}
	out.emit(map[string]interface{}{"type": "summary", "command": "admin topic-list",
		"topics": list.TopicList, "brokerAddr": list.BrokerAddr})
	return nil
}

func listQueues(ctx context.Context, adm adminAPI, f *adminFlags) error {
	queues, err := adm.FetchPublishMessageQueues(ctx, f.topic)
	if err != nil {
		return err
	}
	for _, q := range queues {
		out.emit(map[string]interface{}{"type": "queue", "topic": q.Topic,
			"brokerName": q.BrokerName, "queueId": q.QueueId})
	}
	out.emit(map[string]interface{}{"type": "summary", "command": "admin queues",
		"topic": f.topic, "queues": len(queues)})
	return nil
}
