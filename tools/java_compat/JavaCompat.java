// Drives the official RocketMQ Java client (4.9.x and 5.x remoting API) through compat scenarios.
//
// Usage: java -cp "lib/*:classes" JavaCompat MODE NAMESRV key=value...
//   send      topic count run   sync, async, oneway sends of COUNT each + one batch of COUNT
//   dump      topic group               DefaultMQPullConsumer: every message of every queue
//   push      topic group count instances model [send=0|1] [kinds=N run=R] [timeout=S]
//             [expect=N]  start INSTANCES push consumers (CLUSTERING|BROADCASTING), wait for
//             the queue assignment, then send N of each kind as `send` does (kinds=N), send
//             COUNT messages (send=1), and print what each instance receives
//   litepull  topic group take [timeout=S]  DefaultLitePullConsumer: poll >= TAKE, commitSync
//   orderly   topic group keys perkey instances [timeout=S]
//             MessageListenerOrderly consumers; messages sent by MessageQueueSelector on the key
//   query     topic key msgid offsetmsgid  queryMessage by key, viewMessage by both ids
// Prints one "RESULT op=... k=v" line per event, values URL-encoded (UTF-8);
// exits 0 on success, 1 on a failed wait, 2 on usage errors.
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public final class JavaCompat {
    private static final int SEND_TIMEOUT_MS = 10_000;
    // Exercises non-ASCII property values (the client encodes properties as UTF-8).
    private static final String UNICODE_VALUE = "π≈3.14";

    private JavaCompat() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: JavaCompat MODE NAMESRV key=value...");
            System.exit(2);
        }
        Map<String, String> options = new HashMap<>();
        for (String arg : Arrays.asList(args).subList(2, args.length)) {
            int split = arg.indexOf('=');
            options.put(arg.substring(0, split), arg.substring(split + 1));
        }
        boolean ok;
        try {
            ok = run(args[0], args[1], options);
        } catch (Exception error) {
            error.printStackTrace();
            result("error", "message", String.valueOf(error));
            ok = false;
        }
        System.out.flush();
        // The client leaves non-daemon threads behind; exit explicitly.
        System.exit(ok ? 0 : 1);
    }

    private static boolean run(String mode, String namesrv, Map<String, String> options)
        throws Exception {
        switch (mode) {
            case "send":
                return send(namesrv, options);
            case "dump":
                return dump(namesrv, options);
            case "push":
                return push(namesrv, options);
            case "litepull":
                return litePull(namesrv, options);
            case "orderly":
                return orderly(namesrv, options);
            case "query":
                return query(namesrv, options);
            default:
                System.err.println("unknown mode " + mode);
                System.exit(2);
                return false;
        }
    }

    static void result(String op, Object... pairs) {
        StringBuilder line = new StringBuilder("RESULT op=").append(op);
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            line.append(' ').append(pairs[i]).append('=')
                .append(URLEncoder.encode(String.valueOf(pairs[i + 1]), StandardCharsets.UTF_8));
        }
        System.out.println(line);
    }

    static int intOption(Map<String, String> options, String key, int fallback) {
        return options.containsKey(key) ? Integer.parseInt(options.get(key)) : fallback;
    }

    static DefaultMQProducer producer(String namesrv, String instance) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("compat_producer_" + instance);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance);
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.setRetryTimesWhenSendFailed(0);
        producer.setRetryTimesWhenSendAsyncFailed(0);
        producer.start();
        return producer;
    }

    /** A message whose body, tag, keys and user properties name its kind and index. */
    static Message message(String topic, String run, String kind, int index) {
        String body = run + "-" + kind + "-" + index;
        Message message = new Message(topic, "Tag" + kind,
            body.getBytes(StandardCharsets.UTF_8));
        message.setKeys(Arrays.asList("key-" + body, "alt-" + body));
        message.putUserProperty("kind", kind);
        message.putUserProperty("seq", String.valueOf(index));
        message.putUserProperty("unicode", UNICODE_VALUE);
        return message;
    }

    static void reportSend(String op, String body, SendResult sent) {
        result(op, "body", body, "status", sent.getSendStatus(), "msgId", sent.getMsgId(),
            "offsetMsgId", sent.getOffsetMsgId(), "queueId", sent.getMessageQueue().getQueueId(),
            "queueOffset", sent.getQueueOffset(),
            "brokerName", sent.getMessageQueue().getBrokerName());
    }

    private static boolean send(String namesrv, Map<String, String> options) throws Exception {
        return sendKinds(namesrv, options.get("topic"), options.getOrDefault("run", "r"),
            intOption(options, "count", 5));
    }

    private static boolean sendKinds(String namesrv, String topic, String run, int count)
        throws Exception {
        DefaultMQProducer producer = producer(namesrv, "compat-send");
        try {
            boolean ok = true;
            for (int i = 0; i < count; i++) {
                SendResult sent = producer.send(message(topic, run, "sync", i));
                reportSend("sync", run + "-sync-" + i, sent);
                ok &= sent.getSendStatus() == SendStatus.SEND_OK;
            }
            ok &= sendAsync(producer, topic, run, count);
            for (int i = 0; i < count; i++) {
                producer.sendOneway(message(topic, run, "oneway", i));
                result("oneway", "body", run + "-oneway-" + i);
            }
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                batch.add(message(topic, run, "batch", i));
            }
            SendResult sent = producer.send(batch);
            // A batch result carries comma-separated ids, one per message, in batch order.
            result("batch", "status", sent.getSendStatus(), "msgId", sent.getMsgId(),
                "offsetMsgId", sent.getOffsetMsgId(),
                "queueId", sent.getMessageQueue().getQueueId(),
                "queueOffset", sent.getQueueOffset());
            return ok && sent.getSendStatus() == SendStatus.SEND_OK;
        } finally {
            producer.shutdown();
        }
    }

    private static boolean sendAsync(DefaultMQProducer producer, String topic, String run,
                                     int count) throws Exception {
        CountDownLatch done = new CountDownLatch(count);
        AtomicInteger succeeded = new AtomicInteger();
        for (int i = 0; i < count; i++) {
            String body = run + "-async-" + i;
            producer.send(message(topic, run, "async", i), new SendCallback() {
                @Override
                public void onSuccess(SendResult sent) {
                    reportSend("async", body, sent);
                    succeeded.incrementAndGet();
                    done.countDown();
                }

                @Override
                public void onException(Throwable error) {
                    result("async-error", "body", body, "error", error);
                    done.countDown();
                }
            });
        }
        boolean finished = done.await(SEND_TIMEOUT_MS * 2L, TimeUnit.MILLISECONDS);
        return finished && succeeded.get() == count;
    }

    static void reportMessage(String op, String instance, MessageExt message) {
        result(op, "instance", instance,
            "body", new String(message.getBody(), StandardCharsets.UTF_8),
            "tags", message.getTags(), "keys", message.getKeys(),
            "kind", message.getUserProperty("kind"), "seq", message.getUserProperty("seq"),
            "unicode", message.getUserProperty("unicode"), "msgId", message.getMsgId(),
            "offsetMsgId", offsetMsgId(message), "queueId", message.getQueueId(),
            "queueOffset", message.getQueueOffset(), "reconsume", message.getReconsumeTimes(),
            "topic", message.getTopic(), "storeHost", message.getStoreHost());
    }

    static String offsetMsgId(MessageExt message) {
        // Consumers hand out MessageClientExt; admin look-ups give plain MessageExt.
        return message instanceof MessageClientExt
            ? ((MessageClientExt) message).getOffsetMsgId() : message.getMsgId();
    }

    private static boolean dump(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(options.get("group"));
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("compat-dump");
        consumer.start();
        try {
            Set<MessageQueue> queues = new TreeSet<>(consumer.fetchSubscribeMessageQueues(topic));
            for (MessageQueue queue : queues) {
                long offset = 0;
                while (true) {
                    PullResult pulled = consumer.pull(queue, "*", offset, 32);
                    if (pulled.getPullStatus() != PullStatus.FOUND) {
                        result("dump-queue", "queueId", queue.getQueueId(),
                            "status", pulled.getPullStatus(),
                            "maxOffset", pulled.getMaxOffset(),
                            "nextBeginOffset", pulled.getNextBeginOffset());
                        break;
                    }
                    for (MessageExt message : pulled.getMsgFoundList()) {
                        reportMessage("dump", "dump", message);
                    }
                    offset = pulled.getNextBeginOffset();
                }
            }
            return true;
        } finally {
            consumer.shutdown();
        }
    }

    static Set<Integer> assignedQueues(DefaultMQPushConsumer consumer, String topic,
                                       boolean lockedOnly) {
        ConcurrentMap<MessageQueue, ProcessQueue> table =
            consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable();
        Set<Integer> queues = new TreeSet<>();
        for (Map.Entry<MessageQueue, ProcessQueue> entry : table.entrySet()) {
            boolean live = !entry.getValue().isDropped()
                && (!lockedOnly || entry.getValue().isLocked());
            if (entry.getKey().getTopic().equals(topic) && live) {
                queues.add(entry.getKey().getQueueId());
            }
        }
        return queues;
    }

    /** Waits until the instances' live queues partition (or, broadcasting, each cover) all. */
    static boolean awaitAssignment(List<DefaultMQPushConsumer> consumers, String topic,
                                   int queueCount, boolean broadcasting, boolean lockedOnly,
                                   long deadlineMs) throws InterruptedException {
        while (System.currentTimeMillis() < deadlineMs) {
            List<Set<Integer>> shares = new ArrayList<>();
            Set<Integer> union = new TreeSet<>();
            int total = 0;
            boolean everyoneHasSome = true;
            for (DefaultMQPushConsumer consumer : consumers) {
                Set<Integer> share = assignedQueues(consumer, topic, lockedOnly);
                shares.add(share);
                union.addAll(share);
                total += share.size();
                everyoneHasSome &= broadcasting ? share.size() == queueCount : !share.isEmpty();
            }
            boolean settled = broadcasting ? everyoneHasSome
                : everyoneHasSome && union.size() == queueCount && total == queueCount;
            if (settled) {
                for (int i = 0; i < consumers.size(); i++) {
                    result("assigned", "instance", "c" + i, "queues", shares.get(i));
                }
                return true;
            }
            Thread.sleep(200);
        }
        for (int i = 0; i < consumers.size(); i++) {
            result("assigned-timeout", "instance", "c" + i,
                "queues", assignedQueues(consumers.get(i), topic, lockedOnly));
        }
        return false;
    }

    static DefaultMQPushConsumer pushConsumer(String namesrv, String group, String topic,
                                              String instance, String modelName)
        throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance);
        // MessageModel moved package in 5.x; resolve it through the consumer so one source
        // compiles against both client lines.
        var defaultModel = consumer.getMessageModel();
        consumer.setMessageModel(Enum.valueOf(defaultModel.getDeclaringClass(), modelName));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // The 5.x client's first rebalance and first periodic heartbeat both fire 1 s after
        // start; when they collide the heartbeat carrying the rebalance's new subVersion is
        // skipped (tryLock) and every pull is refused SUBSCRIPTION_NOT_LATEST until the next
        // heartbeat, 30 s later by default (the Java broker checks the version the same way).
        consumer.setHeartbeatBrokerInterval(3000);
        consumer.setConsumeThreadMin(2);
        consumer.setConsumeThreadMax(2);
        consumer.subscribe(topic, "*");
        return consumer;
    }

    /** Waits until `counter` reaches `expected` and then stays there for `quietMs`. */
    static boolean awaitCount(AtomicInteger counter, int expected, long deadlineMs, long quietMs)
        throws InterruptedException {
        while (counter.get() < expected && System.currentTimeMillis() < deadlineMs) {
            Thread.sleep(100);
        }
        // Extra deliveries (duplicates) would arrive during the quiet period.
        Thread.sleep(quietMs);
        result("count", "received", counter.get(), "expected", expected);
        return counter.get() == expected;
    }

    private static boolean push(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        int count = intOption(options, "count", 20);
        int instances = intOption(options, "instances", 2);
        int queueCount = intOption(options, "queues", 4);
        boolean sendFirst = "1".equals(options.get("send"));
        long deadlineMs = System.currentTimeMillis() + 1000L * intOption(options, "timeout", 60);
        String model = options.getOrDefault("model", "CLUSTERING");
        boolean broadcasting = model.equals("BROADCASTING");
        AtomicInteger received = new AtomicInteger();
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        try {
            for (int i = 0; i < instances; i++) {
                String instance = "c" + i;
                DefaultMQPushConsumer consumer = pushConsumer(namesrv, options.get("group"),
                    topic, "compat-push-" + instance + "-" + model, model);
                consumer.registerMessageListener((MessageListenerConcurrently) (batch, ctx) -> {
                    for (MessageExt message : batch) {
                        reportMessage("push", instance, message);
                        received.incrementAndGet();
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                consumer.start();
                consumers.add(consumer);
            }
            if (!awaitAssignment(consumers, topic, queueCount, broadcasting, false, deadlineMs)) {
                return false;
            }
            // Sent only now: a message already in the topic while a second consumer joins may
            // be delivered twice during the rebalance (at-least-once, the Java broker too).
            if (options.containsKey("kinds")
                && !sendKinds(namesrv, topic, options.getOrDefault("run", "r"),
                    intOption(options, "kinds", 0))) {
                return false;
            }
            if (sendFirst) {
                sendNumbered(namesrv, topic, count);
            }
            // expect=N: messages already in the topic are consumed too (first offset).
            int expected = intOption(options, "expect", broadcasting ? count * instances : count);
            return awaitCount(received, expected, deadlineMs, 3000);
        } finally {
            for (DefaultMQPushConsumer consumer : consumers) {
                consumer.shutdown();
            }
        }
    }

    static void sendNumbered(String namesrv, String topic, int count) throws Exception {
        DefaultMQProducer producer = producer(namesrv, "compat-push-producer");
        try {
            for (int i = 0; i < count; i++) {
                String body = topic + "-push-" + i;
                Message message = message(topic, topic, "push", i);
                reportSend("sent", body, producer.send(message));
            }
        } finally {
            producer.shutdown();
        }
    }

    private static boolean litePull(String namesrv, Map<String, String> options)
        throws Exception {
        String topic = options.get("topic");
        int take = intOption(options, "take", 10);
        long deadlineMs = System.currentTimeMillis() + 1000L * intOption(options, "timeout", 30);
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(options.get("group"));
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("compat-litepull");
        consumer.setAutoCommit(false);
        consumer.setPullBatchSize(intOption(options, "batch", 4));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.start();
        try {
            int polled = 0;
            while (polled < take && System.currentTimeMillis() < deadlineMs) {
                for (MessageExt message : consumer.poll(500)) {
                    reportMessage("poll", "lite", message);
                    polled++;
                }
            }
            consumer.commitSync();
            for (MessageQueue queue : new TreeSet<>(consumer.fetchMessageQueues(topic))) {
                result("committed", "queueId", queue.getQueueId(),
                    "offset", consumer.committed(queue));
            }
            result("polled", "count", polled);
            return polled >= take;
        } finally {
            consumer.shutdown();
        }
    }

    private static boolean orderly(String namesrv, Map<String, String> options)
        throws Exception {
        String topic = options.get("topic");
        int keys = intOption(options, "keys", 4);
        int perKey = intOption(options, "perkey", 10);
        int instances = intOption(options, "instances", 2);
        int queueCount = intOption(options, "queues", 4);
        long deadlineMs = System.currentTimeMillis() + 1000L * intOption(options, "timeout", 90);
        AtomicInteger received = new AtomicInteger();
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        try {
            for (int i = 0; i < instances; i++) {
                String instance = "c" + i;
                DefaultMQPushConsumer consumer = pushConsumer(namesrv, options.get("group"),
                    topic, "compat-orderly-" + instance, "CLUSTERING");
                consumer.registerMessageListener((MessageListenerOrderly) (batch, ctx) -> {
                    for (MessageExt message : batch) {
                        reportMessage("orderly", instance, message);
                        received.incrementAndGet();
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                });
                consumer.start();
                consumers.add(consumer);
            }
            // Orderly consumers only pull queues whose broker lock (LOCK_BATCH_MQ) they hold.
            if (!awaitAssignment(consumers, topic, queueCount, false, true, deadlineMs)) {
                return false;
            }
            sendOrdered(namesrv, topic, keys, perKey);
            return awaitCount(received, keys * perKey, deadlineMs, 3000);
        } finally {
            for (DefaultMQPushConsumer consumer : consumers) {
                consumer.shutdown();
            }
        }
    }

    static void sendOrdered(String namesrv, String topic, int keys, int perKey)
        throws Exception {
        DefaultMQProducer producer = producer(namesrv, "compat-orderly-producer");
        try {
            // Interleave keys so that ordering within a queue is not trivially sequential.
            for (int seq = 0; seq < perKey; seq++) {
                for (int key = 0; key < keys; key++) {
                    Message message = new Message(topic, "TagOrder",
                        ("order-" + key + "-" + seq).getBytes(StandardCharsets.UTF_8));
                    message.setKeys("order-key-" + key);
                    message.putUserProperty("kind", "order" + key);
                    message.putUserProperty("seq", String.valueOf(seq));
                    SendResult sent = producer.send(message,
                        (queues, msg, arg) -> queues.get((Integer) arg % queues.size()), key);
                    reportSend("sent", "order-" + key + "-" + seq, sent);
                }
            }
        } finally {
            producer.shutdown();
        }
    }

    private static boolean query(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        DefaultMQProducer producer = producer(namesrv, "compat-query");
        try {
            long now = System.currentTimeMillis();
            QueryResult found = producer.queryMessage(topic, options.get("key"), 32,
                now - 3_600_000L, now + 3_600_000L);
            for (MessageExt message : found.getMessageList()) {
                reportMessage("query-key", "admin", message);
            }
            result("query-key-total", "count", found.getMessageList().size());
            // viewMessage decodes an offset message id (broker address + physical offset) and
            // asks that broker with VIEW_MESSAGE_BY_ID.
            reportMessage("view-offset-id", "admin",
                producer.viewMessage(topic, options.get("offsetmsgid")));
            // A client-generated (unique key) id is found through the index (QUERY_MESSAGE).
            reportMessage("view-uniq-id", "admin", producer.getDefaultMQProducerImpl()
                .queryMessageByUniqKey(topic, options.get("msgid")));
            return true;
        } finally {
            producer.shutdown();
        }
    }
}
