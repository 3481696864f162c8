// The Java 5.x remoting push consumer with broker-side rebalance (POP mode) against a broker.
//
// Usage: java -cp "lib/*:classes" PopPush NAMESRV key=value...
//   topic=T order_topic=O group=G count=N fail_every=K keys=M timeout=S
// Sends COUNT messages to T (body "m<i>") and COUNT to O by MessageQueueSelector on key
// i % KEYS (body "<key>:<i>"), then runs two DefaultMQPushConsumers with clientRebalance=false:
//   group G on T with a concurrently listener that answers RECONSUME_LATER to the first
//   delivery of every message whose index is a multiple of FAIL_EVERY, CONSUME_SUCCESS
//   otherwise; group G_order on O with an orderly listener.
// Waits until every message of T succeeded once (failed ones delivered twice) and every message
// of O arrived, then two quiet seconds for late duplicates, and prints one line per delivery
// and per consumer the rebalance mode its queues took (pop / pull queue counts):
//   RESULT op=mode group=.. pop=.. pull=..
//   RESULT op=concurrently body=.. reconsume=.. topic=..
//   RESULT op=orderly body=.. reconsume=.. queue=..
// Values URL-encoded; exits 0 when everything arrived, 1 on a timeout, 2 on usage errors.
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.consumer.RebalanceImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public final class PopPush {
    private PopPush() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: PopPush NAMESRV key=value...");
            System.exit(2);
        }
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
            result("error", "message", String.valueOf(error));
            ok = false;
        }
        System.out.flush();
        System.exit(ok ? 0 : 1);      // the client leaves non-daemon threads behind
    }

    static void result(String op, Object... pairs) {
        StringBuilder line = new StringBuilder("RESULT op=").append(op);
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            line.append(' ').append(pairs[i]).append('=')
                .append(URLEncoder.encode(String.valueOf(pairs[i + 1]), StandardCharsets.UTF_8));
        }
        synchronized (PopPush.class) {
            System.out.println(line);
        }
    }

    static boolean run(String namesrv, Map<String, String> options) throws Exception {
        String topic = options.get("topic");
        String orderTopic = options.get("order_topic");
        String group = options.get("group");
        int count = Integer.parseInt(options.getOrDefault("count", "40"));
        int failEvery = Integer.parseInt(options.getOrDefault("fail_every", "10"));
        int keys = Integer.parseInt(options.getOrDefault("keys", "4"));
        long deadline = System.currentTimeMillis()
            + 1000L * Integer.parseInt(options.getOrDefault("timeout", "90"));

        DefaultMQProducer producer = new DefaultMQProducer("pop_push_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(10_000);
        producer.start();
        for (int i = 0; i < count; i++) {
            check(producer.send(new Message(topic, "A", ("m" + i).getBytes(StandardCharsets.UTF_8))));
            int key = i % keys;
            Message ordered = new Message(orderTopic, "A",
                (key + ":" + i).getBytes(StandardCharsets.UTF_8));
            check(producer.send(ordered, (queues, message, arg) ->
                queues.get((Integer) arg % queues.size()), key));
        }
        producer.shutdown();

        Set<String> succeeded = ConcurrentHashMap.newKeySet();
        List<String> orderly = Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer concurrently = consumer(namesrv, group, topic);
        concurrently.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                String body = new String(message.getBody(), StandardCharsets.UTF_8);
                result("concurrently", "body", body, "reconsume", message.getReconsumeTimes(),
                    "topic", message.getTopic());
                int index = Integer.parseInt(body.substring(1));
                if (index % failEvery == 0 && message.getReconsumeTimes() == 0) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                succeeded.add(body);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        DefaultMQPushConsumer ordered = consumer(namesrv, group + "_order", orderTopic);
        ordered.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
            for (MessageExt message : messages) {
                String body = new String(message.getBody(), StandardCharsets.UTF_8);
                result("orderly", "body", body, "reconsume", message.getReconsumeTimes(),
                    "queue", message.getQueueId());
                orderly.add(body);
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        concurrently.start();
        ordered.start();
        boolean done = false;
        while (System.currentTimeMillis() < deadline) {
            if (succeeded.size() >= count && orderly.size() >= count) {
                done = true;
                break;
            }
            TimeUnit.MILLISECONDS.sleep(100);
        }
        if (done) {
            TimeUnit.SECONDS.sleep(2);        // late duplicates would show here
        }
        mode(group, concurrently, topic);
        mode(group + "_order", ordered, orderTopic);
        concurrently.shutdown();
        ordered.shutdown();
        return done;
    }

    static DefaultMQPushConsumer consumer(String namesrv, String group, String topic)
        throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setClientRebalance(false);          // ask the broker (QUERY_ASSIGNMENT)
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(4);
        consumer.setConsumeThreadMax(4);
        consumer.subscribe(topic, "*");
        return consumer;
    }

    static void mode(String group, DefaultMQPushConsumer consumer, String topic) {
        RebalanceImpl rebalance = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl();
        long pop = rebalance.getPopProcessQueueTable().keySet().stream()
            .filter(queue -> queue.getTopic().equals(topic)).count();
        long pull = rebalance.getProcessQueueTable().keySet().stream()
            .filter(queue -> queue.getTopic().equals(topic)).count();
        result("mode", "group", group, "pop", pop, "pull", pull);
    }

    static void check(SendResult sent) {
        if (sent.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send failed: " + sent);
        }
    }
}
