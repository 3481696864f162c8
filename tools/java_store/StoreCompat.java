// Java client for the store-compatibility tests: send a message plan, dump queues, query keys.
//
// Usage: java -cp "lib/*:classes" StoreCompat MODE NAMESRV GROUP ARGS...
//   send  NAMESRV GROUP PLAN_FILE   PLAN_FILE: JSON lines {index, topic, queueId, tags, keys, body
//                                   (base64)}; each is sent synchronously to exactly that queue
//                                   with user property planIndex=index; prints one RESULT JSON
//                                   line per message (status, queueId, queueOffset, ids)
//   dump  NAMESRV GROUP TOPIC,...   DefaultMQPullConsumer: pull every queue of every topic from
//                                   offset 0 to the end; one RESULT JSON line per message
//   query NAMESRV GROUP TOPIC KEY,... queryMessage per key; one RESULT JSON line per key
// Every output line that matters starts with "RESULT "; exit 0 on success, 1 on any failure.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public final class StoreCompat {
    private static final int TIMEOUT_MS = 10_000;
    private static final int PULL_BATCH = 32;

    private StoreCompat() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: StoreCompat send|dump|query NAMESRV GROUP ARGS...");
            System.exit(2);
        }
        boolean ok;
        switch (args[0]) {
            case "send":
                ok = send(args[1], args[2], args[3]);
                break;
            case "dump":
                ok = dump(args[1], args[2], args[3].split(","));
                break;
            case "query":
                ok = query(args[1], args[2], args[3], args[4].split(","));
                break;
            default:
                System.err.println("unknown mode " + args[0]);
                ok = false;
        }
        System.out.flush();
        // The client leaves non-daemon threads behind; exit explicitly.
        System.exit(ok ? 0 : 1);
    }

    private static void result(Map<String, Object> fields) {
        System.out.println("RESULT " + JSON.toJSONString(fields));
    }

    private static boolean send(String namesrv, String group, String planFile) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("store-compat-producer");
        producer.setSendMsgTimeout(TIMEOUT_MS);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        try {
            for (String line : Files.readAllLines(Paths.get(planFile), StandardCharsets.UTF_8)) {
                if (line.isEmpty()) {
                    continue;
                }
                JSONObject plan = JSON.parseObject(line);
                int index = plan.getIntValue("index");
                String topic = plan.getString("topic");
                byte[] body = Base64.getDecoder().decode(plan.getString("body"));
                Message message = new Message(topic, plan.getString("tags"),
                    plan.getString("keys"), body);
                message.putUserProperty("planIndex", Integer.toString(index));
                // A selector send resolves the route like a plain send (auto-creating the
                // topic from TBW102), then lands on exactly the planned queue.
                SendResult sent = producer.send(message, (queues, sentMessage, queueId) ->
                    pick(queues, (Integer) queueId), plan.getIntValue("queueId"), TIMEOUT_MS);
                Map<String, Object> fields = new LinkedHashMap<>();
                fields.put("op", "send");
                fields.put("index", index);
                fields.put("status", sent.getSendStatus().name());
                fields.put("topic", topic);
                fields.put("queueId", sent.getMessageQueue().getQueueId());
                fields.put("queueOffset", sent.getQueueOffset());
                fields.put("msgId", sent.getMsgId());
                fields.put("offsetMsgId", sent.getOffsetMsgId());
                result(fields);
            }
            return true;
        } finally {
            producer.shutdown();
        }
    }

    private static MessageQueue pick(List<MessageQueue> queues, int queueId) {
        for (MessageQueue queue : queues) {
            if (queue.getQueueId() == queueId) {
                return queue;
            }
        }
        throw new IllegalStateException("no queue " + queueId + " in " + queues);
    }

    private static boolean dump(String namesrv, String group, String[] topics) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("store-compat-dump");
        consumer.start();
        try {
            for (String topic : topics) {
                Set<MessageQueue> queues =
                    new TreeSet<>(consumer.fetchSubscribeMessageQueues(topic));
                for (MessageQueue queue : queues) {
                    dumpQueue(consumer, queue);
                }
            }
            return true;
        } finally {
            consumer.shutdown();
        }
    }

    private static void dumpQueue(DefaultMQPullConsumer consumer, MessageQueue queue)
        throws Exception {
        long offset = 0;
        while (true) {
            PullResult pulled = consumer.pull(queue, "*", offset, PULL_BATCH, TIMEOUT_MS);
            if (pulled.getPullStatus() != PullStatus.FOUND) {
                Map<String, Object> fields = new LinkedHashMap<>();
                fields.put("op", "end");
                fields.put("topic", queue.getTopic());
                fields.put("queueId", queue.getQueueId());
                fields.put("status", pulled.getPullStatus().name());
                fields.put("nextBeginOffset", pulled.getNextBeginOffset());
                fields.put("maxOffset", pulled.getMaxOffset());
                result(fields);
                return;
            }
            for (MessageExt message : pulled.getMsgFoundList()) {
                Map<String, Object> fields = new LinkedHashMap<>();
                fields.put("op", "message");
                fields.put("topic", message.getTopic());
                fields.put("queueId", message.getQueueId());
                fields.put("queueOffset", message.getQueueOffset());
                fields.put("commitLogOffset", message.getCommitLogOffset());
                fields.put("tags", message.getTags());
                fields.put("keys", message.getKeys());
                fields.put("planIndex", message.getUserProperty("planIndex"));
                fields.put("msgId", message.getMsgId());
                fields.put("body", Base64.getEncoder().encodeToString(message.getBody()));
                result(fields);
            }
            offset = pulled.getNextBeginOffset();
        }
    }

    private static boolean query(String namesrv, String group, String topic, String[] keys)
        throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("store-compat-query");
        consumer.start();
        try {
            for (String key : keys) {
                QueryResult found = consumer.queryMessage(topic, key, 32, 0, Long.MAX_VALUE);
                List<Object> offsets = new ArrayList<>();
                for (MessageExt message : found.getMessageList()) {
                    offsets.add(message.getQueueId() + ":" + message.getQueueOffset());
                }
                Map<String, Object> fields = new LinkedHashMap<>();
                fields.put("op", "query");
                fields.put("key", key);
                fields.put("found", offsets);
                result(fields);
            }
            return true;
        } finally {
            consumer.shutdown();
        }
    }
}
