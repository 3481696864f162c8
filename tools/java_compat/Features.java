// Client features of the official Java client that no other compat program covers, run the
// same way against any broker so two brokers can be compared: request-reply (RocketMQ 4.6+
// DefaultMQProducer.request, the broker pushes the reply to the requester) and message trace
// (enableMsgTrace: the client writes Pub/SubBefore/SubAfter records to RMQ_SYS_TRACE_TOPIC).
//
// The offsets op covers the queue-offset API a client uses: minOffset, maxOffset, searchOffset,
// earliestMsgStoreTime, and the lite pull consumer's assign/seek/offsetForTimestamp/commit.
//
// The tx op: transactions committed, rolled back, and left unknown then decided by check-back
// (the broker needs short transactionCheckInterval / transactionTimeOut).
//
// The ordered op: sends with a MessageQueueSelector (per order key) and tags A/B/C, an orderly
// consumer subscribed to "A || B" gets only those, each key's messages in send order.
//
// Usage: java -cp "lib/*:classes" Features NAMESRV op=rpc|trace|offsets|tx|ordered topic=T
//        run=R [count=N]
// Prints "RESULT op=... k=v" lines (values URL-encoded) and exits 0 when the op completed.
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public final class Features {
    private static final String TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC";

    private Features() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (String arg : Arrays.asList(args).subList(1, args.length)) {
            int split = arg.indexOf('=');
            options.put(arg.substring(0, split), arg.substring(split + 1));
        }
        boolean ok;
        try {
            String op = options.get("op");
            if ("rpc".equals(op)) {
                ok = rpc(args[0], options);
            } else if ("offsets".equals(op)) {
                ok = offsets(args[0], options);
            } else if ("tx".equals(op)) {
                ok = transactions(args[0], options);
            } else if ("ordered".equals(op)) {
                ok = ordered(args[0], options);
            } else {
                ok = trace(args[0], options);
            }
        } catch (Exception error) {
            result("error", "type", error.getClass().getSimpleName(), "message",
                   String.valueOf(error.getMessage()));
            error.printStackTrace();
            ok = false;
        }
        System.out.flush();
        System.exit(ok ? 0 : 1);
    }

    static void result(String op, Object... pairs) {
        StringBuilder line = new StringBuilder("RESULT op=").append(op);
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            line.append(' ').append(pairs[i]).append('=')
                .append(URLEncoder.encode(String.valueOf(pairs[i + 1]), StandardCharsets.UTF_8));
        }
        System.out.println(line);
    }

    // --- request-reply ---------------------------------------------------------------------
    static boolean rpc(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String run = options.get("run");
        int count = Integer.parseInt(options.getOrDefault("count", "3"));
        DefaultMQProducer replier = new DefaultMQProducer(run + "_replier");
        replier.setNamesrvAddr(namesrv);
        replier.start();
        DefaultMQPushConsumer responder = new DefaultMQPushConsumer(run + "_responder");
        responder.setNamesrvAddr(namesrv);
        responder.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        responder.subscribe(topic, "*");
        responder.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt request : messages) {
                result("received", "topic", request.getTopic(), "replyTo",
                       request.getProperty("REPLY_TO_CLIENT"), "cluster",
                       request.getProperty("CLUSTER"));
                try {
                    String body = new String(request.getBody(), StandardCharsets.UTF_8);
                    Message reply = MessageUtil.createReplyMessage(
                        request, ("reply-to-" + body).getBytes(StandardCharsets.UTF_8));
                    result("replied", "status", replier.send(reply, 10_000).getSendStatus());
                } catch (Exception error) {
                    result("replyerror", "message", String.valueOf(error.getMessage()));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        responder.start();
        DefaultMQProducer requester = new DefaultMQProducer(run + "_requester");
        requester.setNamesrvAddr(namesrv);
        requester.start();
        boolean ok = true;
        try {
            for (int i = 0; i < count; i++) {
                Message request = new Message(topic, "rpc",
                    ("request-" + i).getBytes(StandardCharsets.UTF_8));
                Message reply = requestWithRetry(requester, request);
                result("reply", "kind", "sync", "index", i, "body",
                       new String(reply.getBody(), StandardCharsets.UTF_8),
                       "topic", reply.getTopic(),
                       "correlated", reply.getProperty("CORRELATION_ID") != null);
            }
            CountDownLatch answered = new CountDownLatch(1);
            Message request = new Message(topic, "rpc", "request-async".getBytes(
                StandardCharsets.UTF_8));
            requester.request(request, new RequestCallback() {
                @Override
                public void onSuccess(Message reply) {
                    result("reply", "kind", "async", "body",
                           new String(reply.getBody(), StandardCharsets.UTF_8));
                    answered.countDown();
                }

                @Override
                public void onException(Throwable error) {
                    result("replyerror", "message", String.valueOf(error.getMessage()));
                    answered.countDown();
                }
            }, 10_000);
            ok = answered.await(30, TimeUnit.SECONDS);
        } finally {
            requester.shutdown();
            responder.shutdown();
            replier.shutdown();
        }
        return ok;
    }

    static Message requestWithRetry(DefaultMQProducer requester, Message request)
            throws Exception {
        // The first request may race the responder's rebalance; a reply times out then.
        Exception last = null;
        for (int attempt = 0; attempt < 5; attempt++) {
            try {
                return requester.request(request, 8_000);
            } catch (Exception error) {
                last = error;
                result("requesterror", "attempt", attempt, "message",
                       String.valueOf(error.getMessage()));
            }
        }
        throw last;
    }

    // --- message trace ---------------------------------------------------------------------
    static boolean trace(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String run = options.get("run");
        int count = Integer.parseInt(options.getOrDefault("count", "5"));
        DefaultMQProducer producer = new DefaultMQProducer(run + "_traced_producer", true);
        producer.setNamesrvAddr(namesrv);
        producer.start();
        Set<String> consumed = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(run + "_traced_consumer", true);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                consumed.add(message.getKeys());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            for (int i = 0; i < count; i++) {
                Message message = new Message(topic, "traced", run + "-key-" + i,
                    ("traced-" + i).getBytes(StandardCharsets.UTF_8));
                producer.send(message, 10_000);
            }
            long deadline = System.currentTimeMillis() + 60_000;
            while (consumed.size() < count && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            result("consumed", "count", consumed.size());
            return countTraces(namesrv, run, topic, count, deadline);
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
    }

    static boolean countTraces(String namesrv, String run, String topic, int count,
                               long deadline) throws Exception {
        DefaultMQPullConsumer reader = new DefaultMQPullConsumer(run + "_trace_reader");
        reader.setNamesrvAddr(namesrv);
        reader.start();
        try {
            Map<String, Integer> types = new HashMap<>();
            while (System.currentTimeMillis() < deadline) {
                types = traceTypes(reader, topic, run);
                if (types.getOrDefault("Pub", 0) >= count
                        && types.getOrDefault("SubAfter", 0) >= count) {
                    break;
                }
                Thread.sleep(500);
            }
            result("trace", "pub", types.getOrDefault("Pub", 0),
                   "subBefore", types.getOrDefault("SubBefore", 0),
                   "subAfter", types.getOrDefault("SubAfter", 0));
            return true;
        } finally {
            reader.shutdown();
        }
    }

    static Map<String, Integer> traceTypes(DefaultMQPullConsumer reader, String topic, String run)
            throws Exception {
        Map<String, Integer> types = new HashMap<>();
        Set<MessageQueue> queues;
        try {
            queues = reader.fetchSubscribeMessageQueues(TRACE_TOPIC);
        } catch (MQClientException notYet) {
            return types;     // the trace producer has not created the topic yet
        }
        for (MessageQueue queue : queues) {
            long offset = 0;
            while (true) {
                PullResult pulled = reader.pull(queue, "*", offset, 32, 5_000);
                if (pulled.getPullStatus() != PullStatus.FOUND) {
                    break;
                }
                for (MessageExt message : pulled.getMsgFoundList()) {
                    String body = new String(message.getBody(), StandardCharsets.UTF_8);
                    // Records end with char 2 (FIELD_SPLITOR); fields are split by char 1.
                    for (String record : body.split("\u0002")) {
                        List<String> fields = Arrays.asList(record.split("\u0001"));
                        // Pub names the topic and group, SubAfter only the keys: each
                        // carries the run's prefix.
                        if (fields.size() > 3 && record.contains(run)) {
                            types.merge(fields.get(0), 1, Integer::sum);
                        }
                    }
                }
                offset = pulled.getNextBeginOffset();
            }
        }
        return types;
    }

    // --- queue offsets ---------------------------------------------------------------------
    static boolean offsets(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String run = options.get("run");
        DefaultMQProducer producer = new DefaultMQProducer(run + "_offsets_producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        DefaultMQPullConsumer reader = new DefaultMQPullConsumer(run + "_offsets_reader");
        reader.setNamesrvAddr(namesrv);
        reader.start();
        DefaultLitePullConsumer lite = new DefaultLitePullConsumer(run + "_offsets_lite");
        lite.setNamesrvAddr(namesrv);
        lite.setAutoCommit(false);
        try {
            MessageQueue queue = null;
            for (MessageQueue candidate : producer.fetchPublishMessageQueues(topic)) {
                if (candidate.getQueueId() == 0) {
                    queue = candidate;
                }
            }
            long before = System.currentTimeMillis();
            long middle = 0;
            for (int i = 0; i < 10; i++) {
                if (i == 5) {
                    // Nearer the fourth message than the fifth: Java's search by time
                    // answers the queue offset whose store time is nearest.
                    Thread.sleep(100);
                    middle = System.currentTimeMillis();
                    Thread.sleep(600);
                }
                producer.send(new Message(topic, "o", run + "-o-" + i,
                    ("offset-" + i).getBytes(StandardCharsets.UTF_8)), queue, 10_000);
            }
            long earliest = reader.earliestMsgStoreTime(queue);
            result("queue", "min", reader.minOffset(queue), "max", reader.maxOffset(queue),
                   "searchMiddle", reader.searchOffset(queue, middle),
                   "searchBefore", reader.searchOffset(queue, before - 60_000),
                   "searchAfter", reader.searchOffset(queue, System.currentTimeMillis() + 60_000),
                   "earliestInRange", earliest >= before - 1000 && earliest <= middle);
            lite.start();
            lite.assign(Arrays.asList(queue));
            lite.seek(queue, 3);
            List<MessageExt> polled = new java.util.ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (polled.isEmpty() && System.currentTimeMillis() < deadline) {
                polled.addAll(lite.poll(1000));
            }
            result("seek", "first", polled.isEmpty() ? -1 : polled.get(0).getQueueOffset(),
                   "body", polled.isEmpty() ? "" : new String(polled.get(0).getBody(),
                                                              StandardCharsets.UTF_8),
                   "offsetForTimestamp", lite.offsetForTimestamp(queue, middle));
            lite.commitSync();
            result("committed", "offset", lite.committed(queue), "polledEnd",
                   polled.isEmpty() ? -1 : polled.get(polled.size() - 1).getQueueOffset() + 1);
            return true;
        } finally {
            lite.shutdown();
            reader.shutdown();
            producer.shutdown();
        }
    }

    // --- transactions ----------------------------------------------------------------------
    static boolean transactions(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String run = options.get("run");
        Set<String> received = ConcurrentHashMap.newKeySet();
        Set<String> checked = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(run + "_tx_consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                received.add(new String(message.getBody(), StandardCharsets.UTF_8));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        TransactionMQProducer producer = new TransactionMQProducer(run + "_tx_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                String body = new String(message.getBody(), StandardCharsets.UTF_8);
                if (body.startsWith("commit")) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
                return body.startsWith("rollback") ? LocalTransactionState.ROLLBACK_MESSAGE
                                                   : LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt message) {
                String body = new String(message.getBody(), StandardCharsets.UTF_8);
                checked.add(body);
                return body.endsWith("commit") ? LocalTransactionState.COMMIT_MESSAGE
                                               : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        producer.start();
        try {
            for (String body : Arrays.asList("commit-0", "rollback-0", "commit-1",
                                             "rollback-1", "unknown-commit",
                                             "unknown-rollback")) {
                TransactionSendResult sent = producer.sendMessageInTransaction(
                    new Message(topic, "tx", body.getBytes(StandardCharsets.UTF_8)), null);
                result("sent", "body", body, "state", sent.getLocalTransactionState());
            }
            long deadline = System.currentTimeMillis() + 90_000;
            while (System.currentTimeMillis() < deadline
                   && !(received.contains("unknown-commit")
                        && checked.contains("unknown-rollback"))) {
                Thread.sleep(200);
            }
            Thread.sleep(5_000);     // room for anything that should not arrive
            result("tx", "received", String.join(",", new java.util.TreeSet<>(received)),
                   "checked", String.join(",", new java.util.TreeSet<>(checked)));
            return true;
        } finally {
            producer.shutdown();
            consumer.shutdown();
        }
    }

    // --- ordered messages with a selector and a tag filter --------------------------------
    static boolean ordered(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String run = options.get("run");
        String[] tags = {"A", "B", "C"};
        Map<String, List<Integer>> seen = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(run + "_ordered_consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "A || B");
        consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
            for (MessageExt message : messages) {
                String[] parts = new String(message.getBody(), StandardCharsets.UTF_8)
                    .split(":");
                seen.computeIfAbsent(parts[0] + "/" + message.getTags(),
                    key -> java.util.Collections.synchronizedList(new java.util.ArrayList<>()))
                    .add(Integer.parseInt(parts[1]));
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = new DefaultMQProducer(run + "_ordered_producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        MessageQueueSelector byKey = (queues, message, key) ->
            queues.get(Math.abs(key.hashCode()) % queues.size());
        try {
            int expected = 0;
            for (int i = 0; i < 60; i++) {
                String key = "key" + (i % 4);
                String tag = tags[i % 3];
                expected += "C".equals(tag) ? 0 : 1;
                producer.send(new Message(topic, tag, (key + ":" + i).getBytes(
                    StandardCharsets.UTF_8)), byKey, key, 10_000);
            }
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline && count(seen) < expected) {
                Thread.sleep(200);
            }
            Thread.sleep(2_000);     // room for a C or a duplicate that should not arrive
            for (Map.Entry<String, List<Integer>> entry : new java.util.TreeMap<>(seen)
                    .entrySet()) {
                List<Integer> numbers = new java.util.ArrayList<>(entry.getValue());
                result("ordered", "keyTag", entry.getKey(), "numbers", numbers.toString());
            }
            return true;
        } finally {
            producer.shutdown();
            consumer.shutdown();
        }
    }

    static int count(Map<String, List<Integer>> seen) {
        int total = 0;
        for (List<Integer> numbers : seen.values()) {
            total += numbers.size();
        }
        return total;
    }
}
