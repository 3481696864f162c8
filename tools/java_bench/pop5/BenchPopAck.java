// Load program (5.x client only): POP one message then ACK it, in a loop; the round trip's RT.

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.AckStatus;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.common.constant.ConsumeInitMode;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;

/**
 * The POP-ACK round trip: each of -w threads pops one message (POP_MESSAGE, every queue, no
 * long polling) of the topic's first broker and, once it has it, acknowledges it
 * (ACK_MESSAGE with its receipt handle), back to back until -T seconds; the RT recorded is the
 * pop's start to the ack's answer, client side. Flags: -n namesrv, -t topic, -g group
 * (benchmark_pop_ack), -w threads (1), -T seconds (60), -W warm-up seconds not measured (10),
 * -i invisible time ms (60000). A POP that finds nothing is counted (pops_empty), not timed.
 * Prints the window marks of {@link BenchWindow} and one "BENCH_RESULT {json}" line: "tps" is
 * round trips per second, the RT fields are the round trip's, "pop_p99_ms" / "ack_p99_ms"
 * its two halves.
 */
public final class BenchPopAck {
    private static final String FLAGS = "n t g w T W i";
    private static final long TIMEOUT_MS = 3000;
    private final RtHistogram pops = new RtHistogram();
    private final RtHistogram acks = new RtHistogram();
    private final AtomicLong empty = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();

    public static void main(String[] args) throws Exception {
        new BenchPopAck().run(new BenchFlags(args, FLAGS));
    }

    private void run(BenchFlags flags) throws Exception {
        String topic = flags.text("t", "BenchmarkTest");
        String group = flags.text("g", "benchmark_pop_ack");
        int threads = (int) Math.max(1, flags.number("w", 1));
        long invisibleMs = flags.number("i", 60000);
        ClientConfig config = new ClientConfig();
        config.setNamesrvAddr(flags.text("n", "127.0.0.1:9876"));
        config.setInstanceName("bench_pop_ack_" + System.nanoTime());
        MQClientInstance instance = MQClientManager.getInstance().getOrCreateMQClientInstance(config);
        instance.start();
        MQClientAPIImpl api = instance.getMQClientAPIImpl();
        TopicRouteData route = api.getTopicRouteInfoFromNameServer(topic, TIMEOUT_MS);
        BrokerData broker = route.getBrokerDatas().get(0);
        String brokerName = broker.getBrokerName();
        String address = broker.selectBrokerAddr();
        BenchWindow window = new BenchWindow(flags.number("W", 10), flags.number("T", 60));
        window.start();
        Thread[] workers = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            workers[i] = new Thread(() -> loop(api, brokerName, address, topic, group,
                invisibleMs, window), "pop-ack-" + i);
            workers[i].start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        window.end();
        String json = "{\"threads\":" + threads + ",\"pops_empty\":" + empty.get()
            + ",\"failed\":" + failed.get()
            + ",\"pop_p50_ms\":" + BenchFlags.decimal(pops.quantileMs(0.50))
            + ",\"pop_p99_ms\":" + BenchFlags.decimal(pops.quantileMs(0.99))
            + ",\"ack_p50_ms\":" + BenchFlags.decimal(acks.quantileMs(0.50))
            + ",\"ack_p99_ms\":" + BenchFlags.decimal(acks.quantileMs(0.99))
            + ",\"complete\":true," + window.json() + "}";
        System.out.println("BENCH_RESULT " + json);
        instance.shutdown();
        System.exit(failed.get() == 0 ? 0 : 3);
    }

    private void loop(MQClientAPIImpl api, String brokerName, String address, String topic,
                      String group, long invisibleMs, BenchWindow window) {
        while (!window.expired()) {
            try {
                long start = System.nanoTime();
                PopResult popped = pop(api, brokerName, address, topic, group, invisibleMs);
                long poppedAt = System.nanoTime();
                List<MessageExt> found = popped.getMsgFoundList();
                if (popped.getPopStatus() != PopStatus.FOUND || found == null || found.isEmpty()) {
                    empty.incrementAndGet();
                    continue;
                }
                for (MessageExt message : found) {
                    ack(api, address, group, message);
                }
                long end = System.nanoTime();
                pops.record((poppedAt - start) / 1000);
                acks.record((end - poppedAt) / 1000);
                window.record(found.size(), (end - start) / 1000);
            } catch (Exception error) {
                if (failed.incrementAndGet() == 1) {
                    System.out.println("FIRST_FAILURE " + error);
                }
            }
        }
    }

    private static PopResult pop(MQClientAPIImpl api, String brokerName, String address,
                                 String topic, String group, long invisibleMs) throws Exception {
        PopMessageRequestHeader header = new PopMessageRequestHeader();
        header.setConsumerGroup(group);
        header.setTopic(topic);
        header.setQueueId(-1);
        header.setMaxMsgNums(1);
        header.setInvisibleTime(invisibleMs);
        header.setInitMode(ConsumeInitMode.MIN);
        header.setExpType(ExpressionType.TAG);
        header.setExp("*");
        header.setBornTime(System.currentTimeMillis());
        header.setPollTime(0);
        CompletableFuture<PopResult> answer = new CompletableFuture<>();
        api.popMessageAsync(brokerName, address, header, TIMEOUT_MS, new PopCallback() {
            @Override
            public void onSuccess(PopResult result) {
                answer.complete(result);
            }

            @Override
            public void onException(Throwable error) {
                answer.completeExceptionally(error);
            }
        });
        return answer.get(TIMEOUT_MS * 2, TimeUnit.MILLISECONDS);
    }

    private static void ack(MQClientAPIImpl api, String address, String group,
                            MessageExt message) throws Exception {
        String extraInfo = message.getProperty(MessageConst.PROPERTY_POP_CK);
        String[] info = ExtraInfoUtil.split(extraInfo);
        AckMessageRequestHeader header = new AckMessageRequestHeader();
        header.setConsumerGroup(group);
        header.setTopic(ExtraInfoUtil.getRealTopic(info, message.getTopic(), group));
        header.setQueueId(ExtraInfoUtil.getQueueId(info));
        header.setOffset(ExtraInfoUtil.getQueueOffset(info));
        header.setExtraInfo(extraInfo);
        CompletableFuture<AckResult> answer = new CompletableFuture<>();
        api.ackMessageAsync(address, TIMEOUT_MS, new AckCallback() {
            @Override
            public void onSuccess(AckResult result) {
                answer.complete(result);
            }

            @Override
            public void onException(Throwable error) {
                answer.completeExceptionally(error);
            }
        }, header);
        AckResult result = answer.get(TIMEOUT_MS * 2, TimeUnit.MILLISECONDS);
        if (result.getStatus() != AckStatus.OK) {
            throw new IllegalStateException("ack answered " + result.getStatus() + ": "
                + new String(message.getBody(), StandardCharsets.UTF_8));
        }
    }
}
