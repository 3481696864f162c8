// Scenarios of the official RocketMQ 5 Java SDK (org.apache.rocketmq:rocketmq-client-java)
// through a gRPC proxy (rocketmq-proxy in CLUSTER mode), the same ones as python_sdk.py, so the
// SDKs can be compared and a broker behind the proxy can be compared with another.
//
// Usage: java -cp "lib/*:classes" JavaSdk ENDPOINT OP KEY=VALUE... [then OP KEY=VALUE...]
// Ops: produce normal=T fifo=T delay=T tx=T run=R [delay_s=3] [tx_wait_s=60]
//      recall delay=T run=R [delay_s=3]   (two due the same second, the second recalled)
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
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
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
                default:
                    throw new IllegalArgumentException("unknown op " + words.get(0));
            }
            result("done", "of", words.get(0));
        }
        System.exit(0);
    }
}
