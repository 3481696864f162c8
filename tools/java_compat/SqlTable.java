// Drives the official Java client's SQL92 filtering (MessageSelector.bySql) against a broker.
//
// Usage: java -cp "lib/*:classes" SqlTable MODE NAMESRV key=value...
//   pull  topic group exprs=FILE     DefaultMQPullConsumer: for each selector of FILE (one JSON
//                                    string per line) pull every queue from offset 0 up to
//                                    its max offset; RESULT op=sqlmatch index=i bodies=b1,b2
//   push  topic group expr count [timeout=S]
//                                    DefaultMQPushConsumer with bySql(expr); prints each body
//                                    received (RESULT op=received body=...) until COUNT
//                                    arrived and 3 s passed without more, or the timeout
//   start topic group expr           start a push consumer with bySql(expr) and report whether
//                                    it started (RESULT op=start ok=true|false error=...)
// Values are URL-encoded (UTF-8). Exit 0 on success, 1 on a failed wait, 2 on usage errors.
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import com.alibaba.fastjson.JSON;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public final class SqlTable {
    private SqlTable() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: SqlTable MODE NAMESRV key=value...");
            System.exit(2);
        }
        Map<String, String> options = new HashMap<>();
        for (String arg : Arrays.asList(args).subList(2, args.length)) {
            int split = arg.indexOf('=');
            options.put(arg.substring(0, split), arg.substring(split + 1));
        }
        boolean ok;
        try {
            switch (args[0]) {
                case "pull":
                    ok = pull(args[1], options);
                    break;
                case "push":
                    ok = push(args[1], options);
                    break;
                case "start":
                    ok = start(args[1], options);
                    break;
                default:
                    System.err.println("unknown mode " + args[0]);
                    System.exit(2);
                    return;
            }
        } catch (Exception error) {
            error.printStackTrace();
            result("error", "message", String.valueOf(error));
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

    static boolean pull(String namesrv, Map<String, String> options) throws Exception {
        List<String> selectors = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(options.get("exprs")))) {
            selectors.add(JSON.parseObject(line, String.class));
        }
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(options.get("group"));
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("sqltable-pull");
        consumer.start();
        try {
            Set<MessageQueue> queues = new TreeSet<>(
                consumer.fetchSubscribeMessageQueues(options.get("topic")));
            for (int index = 0; index < selectors.size(); index++) {
                List<String> bodies = new ArrayList<>();
                String error = "";
                try {
                    for (MessageQueue queue : queues) {
                        pullQueue(consumer, queue, selectors.get(index), bodies);
                    }
                } catch (Exception failed) {
                    error = String.valueOf(failed);
                }
                result("sqlmatch", "index", index, "bodies", String.join(",", bodies),
                    "error", error);
            }
            return true;
        } finally {
            consumer.shutdown();
        }
    }

    static void pullQueue(DefaultMQPullConsumer consumer, MessageQueue queue, String selector,
                          List<String> bodies) throws Exception {
        long offset = 0;
        long deadline = System.currentTimeMillis() + 20_000;
        while (true) {
            PullResult pulled;
            try {
                pulled = consumer.pull(queue, MessageSelector.bySql(selector), offset, 32);
            } catch (MQClientException notYet) {
                // Until the first heartbeat the client does not know the broker's version
                // and refuses SQL92 pulls; it heartbeats every second at start.
                if (System.currentTimeMillis() > deadline) {
                    throw notYet;
                }
                Thread.sleep(200);
                continue;
            }
            if (pulled.getMsgFoundList() != null) {
                for (MessageExt message : pulled.getMsgFoundList()) {
                    bodies.add(new String(message.getBody(), StandardCharsets.UTF_8));
                }
            }
            if (pulled.getPullStatus() == PullStatus.NO_NEW_MSG
                || pulled.getPullStatus() == PullStatus.OFFSET_ILLEGAL
                || pulled.getNextBeginOffset() <= offset
                || pulled.getNextBeginOffset() >= pulled.getMaxOffset()) {
                return;
            }
            offset = pulled.getNextBeginOffset();
        }
    }

    static DefaultMQPushConsumer pushConsumer(String namesrv, Map<String, String> options,
                                              AtomicInteger received, AtomicLong lastAt)
        throws MQClientException {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(options.get("group"));
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("sqltable-push");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setHeartbeatBrokerInterval(3000);
        consumer.subscribe(options.get("topic"), MessageSelector.bySql(options.get("expr")));
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                result("received", "body", new String(message.getBody(), StandardCharsets.UTF_8),
                    "reconsume", message.getReconsumeTimes());
                received.incrementAndGet();
                lastAt.set(System.currentTimeMillis());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return consumer;
    }

    static boolean push(String namesrv, Map<String, String> options) throws Exception {
        int count = Integer.parseInt(options.get("count"));
        long deadline = System.currentTimeMillis()
            + 1000L * Integer.parseInt(options.getOrDefault("timeout", "60"));
        AtomicInteger received = new AtomicInteger();
        AtomicLong lastAt = new AtomicLong(System.currentTimeMillis());
        DefaultMQPushConsumer consumer = pushConsumer(namesrv, options, received, lastAt);
        consumer.start();
        result("started");
        try {
            while (System.currentTimeMillis() < deadline) {
                boolean quiet = System.currentTimeMillis() - lastAt.get() > 3000;
                if (received.get() >= count && quiet) {
                    return received.get() == count;
                }
                Thread.sleep(100);
            }
            return false;
        } finally {
            consumer.shutdown();
        }
    }

    static boolean start(String namesrv, Map<String, String> options) throws Exception {
        DefaultMQPushConsumer consumer = pushConsumer(namesrv, options, new AtomicInteger(),
            new AtomicLong());
        try {
            consumer.start();
            result("start", "ok", true, "error", "");
        } catch (MQClientException refused) {
            result("start", "ok", false, "error", refused.getMessage());
        } finally {
            consumer.shutdown();
        }
        return true;
    }
}
