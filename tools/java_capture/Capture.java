// Drives the official RocketMQ Java client (4.9.x/5.x remoting API) through each path we capture.
//
// Usage: java -cp "lib/*:classes" Capture MODE NAMESRV TOPIC GROUP [COUNT] [TIMEOUT_S]
//   send        sync send (tags, keys, a user property), async send, oneway send, batch of 3
//   binary-send same as send, with the ROCKETMQ binary header (must be the JVM's first remoting use)
//   pull        DefaultMQPullConsumer: pull every queue from offset 0, then update (sync, with a
//               response) and query the consumer offset of each queue from the broker
//   push        DefaultMQPushConsumer from the first offset until COUNT messages or TIMEOUT_S
// Prints one "RESULT key=value ..." line per operation; exits 0 on success, 1 on any failure.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public final class Capture {
    private static final long SEND_TIMEOUT_MS = 10_000;

    private Capture() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: Capture send|binary-send|pull|push NAMESRV TOPIC GROUP"
                + " [COUNT] [TIMEOUT_S]");
            System.exit(2);
        }
        String mode = args[0];
        if (mode.equals("binary-send")) {
            // Read once by RemotingCommand's static initializer, so it must be set before any
            // client class loads.
            System.setProperty("rocketmq.serialize.type", "ROCKETMQ");
        }
        int count = args.length > 4 ? Integer.parseInt(args[4]) : 6;
        int timeoutSeconds = args.length > 5 ? Integer.parseInt(args[5]) : 60;
        boolean ok;
        switch (mode) {
            case "send":
            case "binary-send":
                ok = send(args[1], args[2], args[3]);
                break;
            case "pull":
                ok = pull(args[1], args[2], args[3]);
                break;
            case "push":
                ok = push(args[1], args[2], args[3], count, timeoutSeconds);
                break;
            default:
                System.err.println("unknown mode " + mode);
                ok = false;
        }
        System.out.flush();
        // The client leaves non-daemon threads behind; exit explicitly.
        System.exit(ok ? 0 : 1);
    }

    private static Message message(String topic, String tag, String key, String text) {
        Message message = new Message(topic, tag, key, text.getBytes(StandardCharsets.UTF_8));
        message.putUserProperty("capture", "pybroker");
        return message;
    }

    private static boolean send(String namesrv, String topic, String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("capture-producer");
        producer.setSendMsgTimeout((int) SEND_TIMEOUT_MS);
        producer.start();
        try {
            SendResult sync = producer.send(message(topic, "TagA", "key-sync", "hello sync"));
            report("sync", sync);
            CountDownLatch done = new CountDownLatch(1);
            AtomicInteger asyncOk = new AtomicInteger();
            producer.send(message(topic, "TagB", "key-async", "hello async"), new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    report("async", result);
                    asyncOk.incrementAndGet();
                    done.countDown();
                }

                @Override
                public void onException(Throwable error) {
                    System.out.println("RESULT op=async error=" + error);
                    done.countDown();
                }
            });
            boolean asyncDone = done.await(SEND_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            producer.sendOneway(message(topic, "TagC", "key-oneway", "hello oneway"));
            System.out.println("RESULT op=oneway sent=true");
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                batch.add(new Message(topic, "TagD", ("batch " + i).getBytes(StandardCharsets.UTF_8)));
            }
            report("batch", producer.send(batch));
            return asyncDone && asyncOk.get() == 1;
        } finally {
            producer.shutdown();
        }
    }

    private static void report(String op, SendResult result) {
        System.out.println("RESULT op=" + op + " status=" + result.getSendStatus()
            + " msgId=" + result.getMsgId() + " offsetMsgId=" + result.getOffsetMsgId()
            + " queueId=" + result.getMessageQueue().getQueueId()
            + " queueOffset=" + result.getQueueOffset());
    }

    private static boolean pull(String namesrv, String topic, String group) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("capture-pull");
        consumer.start();
        try {
            Set<MessageQueue> queues = new TreeSet<>(consumer.fetchSubscribeMessageQueues(topic));
            int found = 0;
            for (MessageQueue queue : queues) {
                PullResult result = consumer.pull(queue, "*", 0, 32);
                int size = result.getMsgFoundList() == null ? 0 : result.getMsgFoundList().size();
                found += size;
                System.out.println("RESULT op=pull queueId=" + queue.getQueueId() + " status="
                    + result.getPullStatus() + " messages=" + size
                    + " nextBeginOffset=" + result.getNextBeginOffset());
                consumer.getOffsetStore().updateConsumeOffsetToBroker(queue,
                    result.getNextBeginOffset(), false);
                long stored = consumer.fetchConsumeOffset(queue, true);
                System.out.println("RESULT op=offset queueId=" + queue.getQueueId()
                    + " stored=" + stored);
            }
            System.out.println("RESULT op=pull-total messages=" + found);
            return found > 0;
        } finally {
            consumer.shutdown();
        }
    }

    private static boolean push(String namesrv, String topic, String group, int count,
                                int timeoutSeconds) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("capture-push");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(1);
        consumer.setConsumeThreadMax(1);
        consumer.subscribe(topic, "*");
        CountDownLatch received = new CountDownLatch(count);
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                System.out.println("RESULT op=push queueId=" + message.getQueueId()
                    + " queueOffset=" + message.getQueueOffset() + " tags=" + message.getTags());
                received.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            boolean all = received.await(timeoutSeconds, TimeUnit.SECONDS);
            System.out.println("RESULT op=push-total complete=" + all);
            return all;
        } finally {
            consumer.shutdown();
        }
    }
}
