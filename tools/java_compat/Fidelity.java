// Prints what the official Java client sees of messages a broker re-put: delayed delivery,
// retry, dead letter, transaction commit, transaction check-back and the committed-after-check
// message, with their full property maps, so two brokers can be compared field by field.
//
// Usage: java -cp "lib/*:classes" Fidelity NAMESRV topic=T run=R [timeout=S]
// Prints "RESULT op=message case=C k=v ..." lines (values URL-encoded, properties as
// props=k1=v1&k2=v2 sorted by key) and exits 0 when every case was seen, 1 otherwise.
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public final class Fidelity {
    private static final int SEND_TIMEOUT_MS = 10_000;
    static final List<String> CASES = Arrays.asList(
        "delay", "first", "retry", "dlq", "txcommit", "checkback", "txcheck");
    static final Map<String, Boolean> SEEN = new ConcurrentHashMap<>();

    private Fidelity() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (String arg : Arrays.asList(args).subList(1, args.length)) {
            int split = arg.indexOf('=');
            options.put(arg.substring(0, split), arg.substring(split + 1));
        }
        boolean ok;
        try {
            ok = run(args[0], options);
        } catch (Exception error) {
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

    static String properties(MessageExt message) {
        StringBuilder text = new StringBuilder();
        for (Map.Entry<String, String> entry : new TreeMap<>(message.getProperties()).entrySet()) {
            if (text.length() > 0) {
                text.append('&');
            }
            text.append(URLEncoder.encode(entry.getKey(), StandardCharsets.UTF_8)).append('=')
                .append(URLEncoder.encode(entry.getValue(), StandardCharsets.UTF_8));
        }
        return text.toString();
    }

    static synchronized void report(String name, MessageExt message) {
        if (SEEN.putIfAbsent(name, Boolean.TRUE) != null) {
            return;
        }
        result("message", "case", name, "topic", message.getTopic(),
            "body", new String(message.getBody(), StandardCharsets.UTF_8),
            "tags", message.getTags(), "keys", message.getKeys(), "flag", message.getFlag(),
            "sysFlag", message.getSysFlag(), "reconsume", message.getReconsumeTimes(),
            "delayLevel", message.getDelayTimeLevel(), "props", properties(message));
    }

    static Message message(String topic, String tag, String body, int flag) {
        Message message = new Message(topic, tag, body.getBytes(StandardCharsets.UTF_8));
        message.setKeys("key-" + tag);
        message.setFlag(flag);
        message.putUserProperty("user", "u-" + tag);
        return message;
    }

    private static boolean run(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String run = options.get("run");
        long deadline = System.currentTimeMillis()
            + 1000L * Integer.parseInt(options.getOrDefault("timeout", "90"));
        DefaultMQProducer producer = new DefaultMQProducer("fid_p_" + run);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("fid-p");
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.start();
        TransactionMQProducer txProducer = transactionProducer(namesrv, run);
        DefaultMQPushConsumer consumer = consumer(namesrv, topic, run);
        try {
            Message delayed = message(topic, "TagD", "delayed", 7);
            delayed.setDelayTimeLevel(1);
            result("sent", "case", "delay", "status", producer.send(delayed).getSendStatus());
            result("sent", "case", "retry",
                "status", producer.send(message(topic, "TagR", "retried", 5)).getSendStatus());
            SendResult commit = txProducer.sendMessageInTransaction(
                message(topic, "TagC", "committed", 3), null);
            result("sent", "case", "txcommit", "status", commit.getSendStatus());
            SendResult checked = txProducer.sendMessageInTransaction(
                message(topic, "TagK", "checked", 9), null);
            result("sent", "case", "txcheck", "status", checked.getSendStatus());
            consumer.start();
            boolean dlq = pullDeadLetters(namesrv, run, deadline);
            while (SEEN.size() < CASES.size() && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            Set<String> missing = new TreeSet<>(CASES);
            missing.removeAll(SEEN.keySet());
            result("done", "missing", missing, "dlq", dlq);
            return missing.isEmpty();
        } finally {
            consumer.shutdown();
            txProducer.shutdown();
            producer.shutdown();
        }
    }

    static TransactionMQProducer transactionProducer(String namesrv, String run)
        throws Exception {
        TransactionMQProducer producer = new TransactionMQProducer("fid_tx_" + run);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("fid-tx");
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                return "TagC".equals(message.getTags())
                    ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt message) {
                report("checkback", message);
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        return producer;
    }

    static DefaultMQPushConsumer consumer(String namesrv, String topic, String run)
        throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("fid_c_" + run);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("fid-c");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setHeartbeatBrokerInterval(3000);
        consumer.setMaxReconsumeTimes(1);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                String tag = message.getTags();
                if ("TagD".equals(tag)) {
                    report("delay", message);
                } else if ("TagC".equals(tag)) {
                    report("txcommit", message);
                } else if ("TagK".equals(tag)) {
                    report("txcheck", message);
                } else if ("TagR".equals(tag)) {
                    report(message.getReconsumeTimes() == 0 ? "first" : "retry", message);
                    // Retry after level 1 (1 s); the second failure reaches the DLQ.
                    context.setDelayLevelWhenNextConsume(1);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return consumer;
    }

    /** Pulls the group's dead-letter queue (created by the broker on the second failure). */
    static boolean pullDeadLetters(String namesrv, String run, long deadline) throws Exception {
        DefaultMQPullConsumer puller = new DefaultMQPullConsumer("fid_d_" + run);
        puller.setNamesrvAddr(namesrv);
        puller.setInstanceName("fid-d");
        puller.start();
        String dlqTopic = "%DLQ%fid_c_" + run;
        try {
            while (System.currentTimeMillis() < deadline) {
                Set<MessageQueue> queues;
                try {
                    queues = puller.fetchSubscribeMessageQueues(dlqTopic);
                } catch (Exception notYet) {
                    Thread.sleep(300);
                    continue;
                }
                for (MessageQueue queue : queues) {
                    PullResult pulled = puller.pull(queue, "*", 0, 32);
                    if (pulled.getPullStatus() == PullStatus.FOUND) {
                        report("dlq", pulled.getMsgFoundList().get(0));
                        return true;
                    }
                }
                Thread.sleep(300);
            }
            return false;
        } finally {
            puller.shutdown();
        }
    }
}
