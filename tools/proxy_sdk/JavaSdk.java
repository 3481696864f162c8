// Scenarios of the official RocketMQ 5 Java SDK (org.apache.rocketmq:rocketmq-client-java)
// through a gRPC proxy (rocketmq-proxy in CLUSTER mode), the same ones as python_sdk.py, so the
// SDKs can be compared and a broker behind the proxy can be compared with another.
//
// Usage: java -cp "lib/*:classes" JavaSdk ENDPOINT OP KEY=VALUE... [then OP KEY=VALUE...]
// Ops: produce normal=T fifo=T delay=T tx=T run=R [delay_s=3] [tx_wait_s=60]
//      recall delay=T run=R [delay_s=3]   (two due the same second, the second recalled)
//      simple|push topic=T group=G dlq_topic=T2 dlq_group=G2 run=R   (as python_sdk.py)
//      bench-send topic=T seconds=S threads=N size=B, bench-receive topic=T group=G seconds=S
// Prints "RESULT op=... k=v" lines (values URL-encoded), "RESULT op=done of=OP" after each op,
// and exits 0 when every op completed.
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.RecallReceipt;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionChecker;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

public final class JavaSdk {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    private JavaSdk() {
    }

    static synchronized void result(String op, String... pairs) {
        StringBuilder line = new StringBuilder("RESULT op=").append(op);
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            line.append(' ').append(pairs[i]).append('=')
                .append(URLEncoder.encode(pairs[i + 1], StandardCharsets.UTF_8));
        }
        System.out.println(line);
        System.out.flush();
    }

    static String errorText(Throwable error) {
        return error.getClass().getSimpleName() + ": " + error.getMessage();
    }

    static MessageBuilder message(String topic, String body, String tag) {
        return PROVIDER.newMessageBuilder().setTopic(topic).setTag(tag)
            .setBody(body.getBytes(StandardCharsets.UTF_8));
    }

    static SendReceipt send(Producer producer, String op, Message message, String... fields) {
        try {
            SendReceipt receipt = producer.send(message);
            String[] all = concat(new String[] {"status", "ok", "msg_id",
                receipt.getMessageId().toString()}, fields);
            result(op, all);
            return receipt;
        } catch (Exception error) {
            result(op, concat(new String[] {"status", "error", "error", errorText(error)}, fields));
            return null;
        }
    }

    static String[] concat(String[] first, String[] second) {
        String[] all = Arrays.copyOf(first, first.length + second.length);
        System.arraycopy(second, 0, all, first.length, second.length);
        return all;
    }

    static void produce(ClientConfiguration config, Map<String, String> args) throws Exception {
        String run = args.get("run");
        CountDownLatch asked = new CountDownLatch(1);
        TransactionChecker checker = view -> {
            String decision = view.getProperties().getOrDefault("decision", "");
            result("tx-check", "decision", decision, "msg_id", view.getMessageId().toString());
            if ("check".equals(decision)) {
                asked.countDown();
                return TransactionResolution.COMMIT;
            }
            return "commit".equals(decision) ? TransactionResolution.COMMIT
                : TransactionResolution.ROLLBACK;
        };
        try (Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config)
                .setTopics(args.get("normal"), args.get("fifo"), args.get("delay"), args.get("tx"))
                .setTransactionChecker(checker).build()) {
            for (int i = 0; i < 3; i++) {
                send(producer, "normal", message(args.get("normal"), run + "-normal-" + i, "TagA")
                    .setKeys(run + "-key-" + i).addProperty("color", "blue")
                    .addProperty("index", String.valueOf(i)).build(), "index", String.valueOf(i));
            }
            for (int i = 0; i < 4; i++) {
                String group = "group-" + (i % 2);
                send(producer, "fifo", message(args.get("fifo"), run + "-fifo-" + i, "TagF")
                    .setMessageGroup(group).build(), "index", String.valueOf(i), "group", group);
            }
            long deliverS = System.currentTimeMillis() / 1000
                + Long.parseLong(args.getOrDefault("delay_s", "3"));
            send(producer, "delay", message(args.get("delay"), run + "-delay", "TagD")
                .setDeliveryTimestamp(deliverS * 1000).build(),
                "deliver_s", String.valueOf(deliverS));
            for (String decision : new String[] {"commit", "rollback", "check"}) {
                Transaction transaction = producer.beginTransaction();
                SendReceipt receipt = producer.send(message(args.get("tx"), run + "-tx-" + decision,
                    "TagTx").setKeys(run + "-tx-" + decision).addProperty("decision", decision)
                    .build(), transaction);
                result("tx-send", "status", "ok", "decision", decision, "msg_id",
                    receipt.getMessageId().toString());
                if ("commit".equals(decision)) {
                    transaction.commit();
                } else if ("rollback".equals(decision)) {
                    transaction.rollback();
                }
                result("tx-end", "decision", decision);
            }
            send(producer, "mismatch", message(args.get("fifo"), run + "-mismatch", "TagM").build());
            boolean waited = asked.await(Long.parseLong(args.getOrDefault("tx_wait_s", "60")),
                TimeUnit.SECONDS);
            result("tx-checked", "asked", String.valueOf(waited));
        }
    }

    static void recall(ClientConfiguration config, Map<String, String> args) throws Exception {
        // Two delay messages due the same second; the second is recalled by its handle.
        String topic = args.get("delay");
        try (Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config)
                .setTopics(topic).build()) {
            long deliverS = System.currentTimeMillis() / 1000
                + Long.parseLong(args.getOrDefault("delay_s", "3"));
            send(producer, "recall-kept", message(topic, args.get("run") + "-kept", "TagR")
                .setDeliveryTimestamp(deliverS * 1000).build(), "deliver_s", String.valueOf(deliverS));
            SendReceipt receipt = send(producer, "recall-send", message(topic,
                args.get("run") + "-recalled", "TagR").setDeliveryTimestamp(deliverS * 1000)
                .build(), "deliver_s", String.valueOf(deliverS));
            if (receipt == null) {
                return;
            }
            try {
                RecallReceipt recalled = producer.recallMessage(topic, receipt.getRecallHandle());
                result("recall", "status", "ok", "msg_id", String.valueOf(recalled.getMessageId()));
            } catch (Exception error) {
                result("recall", "status", "error", "error", errorText(error));
            }
        }
    }

    static void producePlain(ClientConfiguration config, String topic, String... bodies)
            throws Exception {
        try (Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config)
                .setTopics(topic).build()) {
            for (String body : bodies) {
                producer.send(message(topic, body, "TagC").build());
            }
        }
    }

    static String[] received(MessageView view) {
        return new String[] {"body", StandardCharsets.UTF_8.decode(view.getBody()).toString(),
            "attempt", String.valueOf(view.getDeliveryAttempt()), "msg_id",
            view.getMessageId().toString()};
    }

    static String bodyOf(MessageView view) {
        return StandardCharsets.UTF_8.decode(view.getBody().duplicate()).toString();
    }

    interface Handler {
        void handle(MessageView view) throws Exception;
    }

    // Receive (invisible 10 s, the proxy's minimum) until done or the deadline.
    static void receiveUntil(SimpleConsumer consumer, java.util.function.BooleanSupplier done,
            long deadline, Handler handler) throws Exception {
        while (!done.getAsBoolean() && System.currentTimeMillis() < deadline) {
            for (MessageView view : consumer.receive(16, Duration.ofSeconds(10))) {
                handler.handle(view);
            }
        }
    }

    // SimpleConsumer: as python_sdk.py's op_simple.
    static void simple(ClientConfiguration config, Map<String, String> args) throws Exception {
        String run = args.get("run");
        String topic = args.get("topic");
        long deadline = System.currentTimeMillis()
            + 1000 * Long.parseLong(args.getOrDefault("wait_s", "60"));
        producePlain(config, topic, run + "-simple-0", run + "-simple-1", run + "-simple-2");
        producePlain(config, args.get("dlq_topic"), run + "-dlq");
        Map<String, List<Integer>> seen = new HashMap<>();
        String second = run + "-simple-1";
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(config).setConsumerGroup(args.get("group"))
                .setAwaitDuration(Duration.ofSeconds(3))
                .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL)).build()) {
            receiveUntil(consumer, () -> seen.containsKey(run + "-simple-0")
                && seen.containsKey(run + "-simple-2")
                && seen.getOrDefault(second, List.of()).size() == 2, deadline, view -> {
                    String body = bodyOf(view);
                    seen.computeIfAbsent(body, key -> new ArrayList<>()).add(view.getDeliveryAttempt());
                    result("simple-received", received(view));
                    if (body.equals(second) && seen.get(body).size() == 1) {
                        consumer.changeInvisibleDuration(view, Duration.ofSeconds(1));
                        result("simple-invisible", "body", body, "seconds", "1");
                    } else {
                        consumer.ack(view);
                        result("simple-ack", "body", body);
                    }
                });
        }
        List<Integer> attempts = new ArrayList<>();
        try (SimpleConsumer dlq = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(config).setConsumerGroup(args.get("dlq_group"))
                .setAwaitDuration(Duration.ofSeconds(3))
                .setSubscriptionExpressions(Map.of(args.get("dlq_topic"), FilterExpression.SUB_ALL))
                .build()) {
            Handler refuse = view -> {
                attempts.add(view.getDeliveryAttempt());
                result("dlq-received", received(view));
                dlq.changeInvisibleDuration(view, Duration.ofSeconds(1));
            };
            receiveUntil(dlq, () -> attempts.size() >= 2, deadline, refuse);
            long quietUntil = System.currentTimeMillis()
                + 1000 * Long.parseLong(args.getOrDefault("quiet_s", "8"));
            receiveUntil(dlq, () -> System.currentTimeMillis() > quietUntil, deadline, refuse);
        }
    }

    // PushConsumer: as python_sdk.py's op_push.
    static void push(ClientConfiguration config, Map<String, String> args) throws Exception {
        String run = args.get("run");
        String topic = args.get("topic");
        long deadline = System.currentTimeMillis()
            + 1000 * Long.parseLong(args.getOrDefault("wait_s", "60"));
        producePlain(config, topic, run + "-push-0", run + "-push-1", run + "-push-2");
        producePlain(config, args.get("dlq_topic"), run + "-push-dlq");
        Map<String, List<Integer>> seen = new java.util.concurrent.ConcurrentHashMap<>();
        String second = run + "-push-1";
        java.util.function.Function<Boolean, MessageListener> listener = failAlways -> view -> {
            String body = bodyOf(view);
            List<Integer> attempts = seen.computeIfAbsent(body,
                key -> java.util.Collections.synchronizedList(new ArrayList<>()));
            attempts.add(view.getDeliveryAttempt());
            boolean fail = failAlways || (body.equals(second) && attempts.size() == 1);
            result("push-received", concat(new String[] {"outcome", fail ? "failure" : "success"},
                received(view)));
            return fail ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        };
        // Not closed: a PushConsumer's close waits out its long-polling receives (30 s); the
        // program exits once its results are printed.
        PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(config).setConsumerGroup(args.get("group"))
            .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
            .setMessageListener(listener.apply(false)).build();
        PushConsumer failing = PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(config).setConsumerGroup(args.get("dlq_group"))
            .setSubscriptionExpressions(Map.of(args.get("dlq_topic"), FilterExpression.SUB_ALL))
            .setMessageListener(listener.apply(true)).build();
        while (System.currentTimeMillis() < deadline && !(seen.containsKey(run + "-push-0")
                && seen.containsKey(run + "-push-2")
                && seen.getOrDefault(second, List.of()).size() >= 2
                && seen.getOrDefault(run + "-push-dlq", List.of()).size() >= 2)) {
            Thread.sleep(200);
        }
        // The third delivery (after the group's back-off) goes to the DLQ.
        Thread.sleep(1000 * Long.parseLong(args.getOrDefault("quiet_s", "8")));
        result("push-consumers", "open", consumer.getConsumerGroup() + "," + failing.getConsumerGroup());
    }

    // Load for tools/bench_proxy.py: threads send size-byte messages for seconds.
    static void benchSend(ClientConfiguration config, Map<String, String> args) throws Exception {
        String topic = args.get("topic");
        long seconds = Long.parseLong(args.getOrDefault("seconds", "20"));
        byte[] body = new byte[Integer.parseInt(args.getOrDefault("size", "128"))];
        Arrays.fill(body, (byte) 'x');
        java.util.concurrent.atomic.AtomicLong sent = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong errors =
            new java.util.concurrent.atomic.AtomicLong();
        try (Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config)
                .setTopics(topic).build()) {
            long started = System.nanoTime();
            long stopAt = started + seconds * 1_000_000_000L;
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < Integer.parseInt(args.getOrDefault("threads", "8")); i++) {
                Thread thread = new Thread(() -> {
                    while (System.nanoTime() < stopAt) {
                        try {
                            producer.send(PROVIDER.newMessageBuilder().setTopic(topic)
                                .setBody(body).build());
                            sent.incrementAndGet();
                        } catch (Exception error) {
                            errors.incrementAndGet();
                        }
                    }
                });
                thread.start();
                threads.add(thread);
            }
            for (Thread thread : threads) {
                thread.join();
            }
            result("bench-send", "seconds", String.valueOf((System.nanoTime() - started) / 1e9),
                "sent", String.valueOf(sent.get()), "errors", String.valueOf(errors.get()));
        }
    }

    // Load for tools/bench_proxy.py: a SimpleConsumer receives and acks for seconds.
    static void benchReceive(ClientConfiguration config, Map<String, String> args)
            throws Exception {
        String topic = args.get("topic");
        long seconds = Long.parseLong(args.getOrDefault("seconds", "20"));
        long acked = 0;
        long errors = 0;
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(config).setConsumerGroup(args.get("group"))
                .setAwaitDuration(Duration.ofSeconds(2))
                .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL)).build()) {
            long started = System.nanoTime();
            long stopAt = started + seconds * 1_000_000_000L;
            while (System.nanoTime() < stopAt) {
                for (MessageView view : consumer.receive(32, Duration.ofSeconds(10))) {
                    try {
                        consumer.ack(view);
                        acked++;
                    } catch (Exception error) {
                        errors++;
                    }
                }
            }
            result("bench-receive", "seconds", String.valueOf((System.nanoTime() - started) / 1e9),
                "acked", String.valueOf(acked), "errors", String.valueOf(errors));
        }
    }

    public static void main(String[] args) throws Exception {
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(args[0])
            .enableSsl(false).setRequestTimeout(Duration.ofSeconds(10)).build();
        List<List<String>> runs = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (String word : Arrays.asList(args).subList(1, args.length)) {
            if ("then".equals(word)) {
                runs.add(current);
                current = new ArrayList<>();
            } else {
                current.add(word);
            }
        }
        runs.add(current);
        for (List<String> words : runs) {
            Map<String, String> options = new HashMap<>();
            for (String pair : words.subList(1, words.size())) {
                String[] parts = pair.split("=", 2);
                options.put(parts[0], parts[1]);
            }
            switch (words.get(0)) {
                case "produce":
                    produce(config, options);
                    break;
                case "recall":
                    recall(config, options);
                    break;
                case "simple":
                    simple(config, options);
                    break;
                case "push":
                    push(config, options);
                    break;
                case "bench-send":
                    benchSend(config, options);
                    break;
                case "bench-receive":
                    benchReceive(config, options);
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + words.get(0));
            }
            result("done", "of", words.get(0));
        }
        System.exit(0);
    }
}
