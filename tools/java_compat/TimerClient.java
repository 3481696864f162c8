// Timer messages (RocketMQ 5.x) through the official Java 5.3.3 client: sends with a delivery
// time or a delay (setDeliverTimeMs / setDelayTimeSec / setDelayTimeMs), delay levels, raw timer
// properties, batches, recalls by handle, and a push consumer that reports when each arrived.
//
// Usage: java -cp "lib/*:classes" TimerClient NAMESRV topic=T run=R [send=SPEC] [batch=SPEC]
//        [recall=KEY,KEY] [consume=N | until=KEY,KEY] [timeout=S] [linger=S] [group=G]
// SPEC: comma-separated KEY/KIND/VALUE items, KIND one of
//   deliver (delivery time = now + VALUE ms), past (now - VALUE ms), sec, ms (delay), level,
//   none, raw (VALUE = NAME=TEXT put as a property as is).
// Prints "RESULT op=... k=v ..." lines (values URL-encoded, properties sorted):
//   op=sent key status msgId queueId queueOffset recallHandle sentMs answeredMs deliverMs
//     (deliverMs: the TIMER_DELIVER_MS sent, null without one)
//   op=sendError key code remark        op=recalled key msgId     op=recallError key code remark
//   op=got key topic queueId storeMs receivedMs reconsume props
// Exits 0 when every send was answered and, with consume=N, N messages (with until=, every
// listed key) arrived before timeout; linger=S keeps consuming S more seconds (to see extras).
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

public final class TimerClient {
    private static final int SEND_TIMEOUT_MS = 10_000;

    private TimerClient() {
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
        synchronized (TimerClient.class) {
            System.out.println(line);
        }
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

    static boolean run(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String runName = options.getOrDefault("run", "timer");
        long timeoutMs = Long.parseLong(options.getOrDefault("timeout", "60")) * 1000;
        Set<String> awaited = ConcurrentHashMap.newKeySet();
        if (options.containsKey("until")) {
            awaited.addAll(Arrays.asList(options.get("until").split(",")));
        }
        int expected = awaited.isEmpty()
            ? Integer.parseInt(options.getOrDefault("consume", "0")) : awaited.size();
        CountDownLatch arrived = new CountDownLatch(expected);
        DefaultMQPushConsumer consumer = null;
        if (expected > 0) {
            consumer = new DefaultMQPushConsumer(options.getOrDefault("group", "timer-" + runName));
            consumer.setNamesrvAddr(namesrv);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                long now = System.currentTimeMillis();
                for (MessageExt message : messages) {
                    result("got", "key", message.getKeys(), "topic", message.getTopic(),
                        "queueId", message.getQueueId(), "storeMs", message.getStoreTimestamp(),
                        "receivedMs", now, "reconsume", message.getReconsumeTimes(),
                        "props", properties(message));
                    if (awaited.isEmpty() || awaited.remove(message.getKeys())) {
                        arrived.countDown();
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
        }
        DefaultMQProducer producer = new DefaultMQProducer("timer-producer-" + runName);
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        boolean ok = true;
        try {
            Map<String, String> handles = new HashMap<>();
            if (options.containsKey("send")) {
                ok &= send(producer, topic, options.get("send"), handles);
            }
            if (options.containsKey("batch")) {
                ok &= sendBatch(producer, topic, options.get("batch"));
            }
            if (options.containsKey("recall")) {
                for (String key : options.get("recall").split(",")) {
                    recall(producer, topic, key, handles.get(key));
                }
            }
        } finally {
            producer.shutdown();
        }
        if (consumer != null) {
            ok &= arrived.await(timeoutMs, TimeUnit.MILLISECONDS);
            // Linger so that a message arriving too many (a duplicate, a recalled one) is seen.
            Thread.sleep(Long.parseLong(options.getOrDefault("linger", "0")) * 1000);
            consumer.shutdown();
        }
        return ok;
    }

    static Message build(String topic, String item) {
        String[] parts = item.split("/", 3);
        String key = parts[0];
        String kind = parts[1];
        String value = parts.length > 2 ? parts[2] : "";
        Message message = new Message(topic, "T", key, key.getBytes(StandardCharsets.UTF_8));
        long now = System.currentTimeMillis();
        switch (kind) {
            case "deliver":
                message.setDeliverTimeMs(now + Long.parseLong(value));
                break;
            case "past":
                message.setDeliverTimeMs(now - Long.parseLong(value));
                break;
            case "sec":
                message.setDelayTimeSec(Long.parseLong(value));
                break;
            case "ms":
                message.setDelayTimeMs(Long.parseLong(value));
                break;
            case "level":
                message.setDelayTimeLevel(Integer.parseInt(value));
                break;
            case "raw":
                int split = value.indexOf('=');
                MessageAccessor.putProperty(message, value.substring(0, split),
                    value.substring(split + 1));
                break;
            default:
                break;
        }
        return message;
    }

    static boolean send(DefaultMQProducer producer, String topic, String spec,
                        Map<String, String> handles) throws Exception {
        for (String item : spec.split(",")) {
            Message message = build(topic, item);
            long sentMs = System.currentTimeMillis();
            try {
                SendResult sent = producer.send(message);
                handles.put(message.getKeys(), sent.getRecallHandle());
                result("sent", "key", message.getKeys(), "status", sent.getSendStatus(),
                    "msgId", sent.getMsgId(), "queueId", sent.getMessageQueue().getQueueId(),
                    "queueOffset", sent.getQueueOffset(), "recallHandle", sent.getRecallHandle(),
                    "sentMs", sentMs, "answeredMs", System.currentTimeMillis(),
                    "deliverMs", message.getProperty(MessageConst.PROPERTY_TIMER_DELIVER_MS));
            } catch (MQBrokerException error) {
                result("sendError", "key", message.getKeys(), "code", error.getResponseCode(),
                    "remark", error.getErrorMessage());
            }
        }
        return true;
    }

    static boolean sendBatch(DefaultMQProducer producer, String topic, String spec)
        throws Exception {
        List<Message> messages = new ArrayList<>();
        for (String item : spec.split(",")) {
            messages.add(build(topic, item));
        }
        try {
            SendResult sent = producer.send(messages);
            result("batchSent", "status", sent.getSendStatus(), "msgId", sent.getMsgId(),
                "queueOffset", sent.getQueueOffset());
        } catch (MQBrokerException error) {
            result("batchError", "code", error.getResponseCode(), "remark", error.getErrorMessage());
        }
        return true;
    }

    static void recall(DefaultMQProducer producer, String topic, String key, String handle) {
        try {
            result("recalled", "key", key, "msgId", producer.recallMessage(topic, handle));
        } catch (MQBrokerException error) {
            result("recallError", "key", key, "code", error.getResponseCode(),
                "remark", error.getErrorMessage());
        } catch (Exception error) {
            result("recallError", "key", key, "code", -1, "remark", String.valueOf(error));
        }
    }
}
