// Load program: push consumer with RocketMQ benchmark-tool flags; stops by itself at -q messages.

import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Our own re-implementation of the behaviour of RocketMQ's benchmark Consumer (not published on
 * Maven Central). Flags: -n namesrv, -t topic (BenchmarkTest), -g group (benchmark_consumer),
 * -w consume threads (20), -q messages after which it stops (0 = until -T), -T time bound in
 * seconds (600), -W warm-up seconds not measured (0), -M warm-up messages not measured instead
 * of -W (0: use -W; the window opens at that many messages), -f start from the first offset (true: a
 * run sees every message of a fresh topic however late its rebalance happens), -P true: leave
 * the rebalance to the broker (5.x clientRebalance=false; a broker whose mode for the group is
 * POP then has it pop; the result's "pop_queues" says how many POP queues it got).
 * Prints "Consume TPS ... AVG(B2C) RT ... AVG(S2C) RT ... MAX(B2C) RT ... MAX(S2C) RT" every 5 s
 * and at the end, the window marks of {@link BenchWindow}, then one "BENCH_RESULT {json}" line
 * whose "window_*"/"tps" figures cover only the measured window. B2C = consume time minus born
 * time, S2C = consume time minus store time, both in milliseconds on this machine's clock.
 */
public final class BenchConsumer {
    private static final String FLAGS = "n t g w q T W M f P";
    private final RtHistogram born2Consumer = new RtHistogram();
    private final AtomicLong store2ConsumerSumMs = new AtomicLong();
    private final AtomicLong store2ConsumerMaxMs = new AtomicLong();
    private final AtomicLong received = new AtomicLong();
    private final AtomicLong firstNanos = new AtomicLong();
    private final AtomicLong lastNanos = new AtomicLong();
    private CountDownLatch done;
    private long wanted;
    private BenchWindow window;

    public static void main(String[] args) throws Exception {
        new BenchConsumer().run(new BenchFlags(args, FLAGS));
    }

    private void run(BenchFlags flags) throws Exception {
        String topic = flags.text("t", "BenchmarkTest");
        String group = flags.text("g", "benchmark_consumer");
        int threads = (int) Math.max(1, flags.number("w", 20));
        wanted = flags.number("q", 0);
        long timeBoundS = flags.number("T", 600);
        done = new CountDownLatch(1);
        System.out.printf("topic: %s, threadCount %d, group: %s, messageQuantity: %d%n",
            topic, threads, group, wanted);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(flags.text("n", "127.0.0.1:9876"));
        consumer.setConsumeThreadMin(threads);
        consumer.setConsumeThreadMax(threads);
        consumer.setInstanceName(Long.toString(System.nanoTime()));
        if (Boolean.parseBoolean(flags.text("f", "true"))) {
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        }
        boolean brokerRebalance = Boolean.parseBoolean(flags.text("P", "false"));
        if (brokerRebalance) {
            // 5.x API, called by name so that the program still compiles with a 4.x client.
            DefaultMQPushConsumer.class.getMethod("setClientRebalance", boolean.class)
                .invoke(consumer, false);
        }
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(new MessageListenerConcurrently() {
            @Override
            public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> messages,
                    ConsumeConcurrentlyContext context) {
                for (MessageExt message : messages) {
                    record(message);
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        });
        window = new BenchWindow(flags.number("W", 0), timeBoundS, flags.number("M", 0));
        window.start();
        consumer.start();
        System.out.printf("Consumer Started.%n");
        Thread reporter = startReporter();
        boolean complete = done.await(timeBoundS, TimeUnit.SECONDS);
        window.end();
        reporter.interrupt();
        printStats("[Complete]");
        printResult(threads, complete, brokerRebalance ? popQueues(consumer) : -1);
        consumer.shutdown();
        System.exit(complete || wanted == 0 ? 0 : 3);
    }

    private void record(MessageExt message) {
        long nowMs = System.currentTimeMillis();
        long nowNanos = System.nanoTime();
        firstNanos.compareAndSet(0, nowNanos);
        born2Consumer.record((nowMs - message.getBornTimestamp()) * 1000);
        window.record(1, (nowMs - message.getStoreTimestamp()) * 1000);
        long store2Consumer = nowMs - message.getStoreTimestamp();
        store2ConsumerSumMs.addAndGet(store2Consumer);
        store2ConsumerMaxMs.accumulateAndGet(store2Consumer, Math::max);
        lastNanos.accumulateAndGet(nowNanos, Math::max);
        if (received.incrementAndGet() == wanted) {
            window.end();
            done.countDown();
        }
    }

    private double consumeTps() {
        double spanS = (lastNanos.get() - firstNanos.get()) / 1e9;
        return spanS <= 0 ? 0.0 : received.get() / spanS;
    }

    private Thread startReporter() {
        Thread reporter = new Thread(() -> {
            try {
                while (true) {
                    Thread.sleep(5000);
                    printStats("[Progress]");
                }
            } catch (InterruptedException stop) {
                Thread.currentThread().interrupt();
            }
        }, "bench-reporter");
        reporter.setDaemon(true);
        reporter.start();
        return reporter;
    }

    private void printStats(String label) {
        long count = Math.max(1, received.get());
        System.out.printf("%s Current Time: %d Consume TPS: %d Received: %d AVG(B2C) RT(ms): "
            + "%.3f AVG(S2C) RT(ms): %.3f MAX(B2C) RT(ms): %.0f MAX(S2C) RT(ms): %d%n", label,
            System.currentTimeMillis(), (long) consumeTps(), received.get(),
            born2Consumer.averageMs(), store2ConsumerSumMs.get() / (double) count,
            born2Consumer.maxMs(), store2ConsumerMaxMs.get());
    }

    /** The POP queues the 5.x client's rebalance holds (by name: 5.x API). */
    private static int popQueues(DefaultMQPushConsumer consumer) throws Exception {
        Object rebalance = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl();
        Object table = rebalance.getClass().getMethod("getPopProcessQueueTable").invoke(rebalance);
        return ((java.util.Map<?, ?>) table).size();
    }

    private void printResult(int threads, boolean complete, int popQueues) {
        long count = Math.max(1, received.get());
        String json = "{\"received\":" + received.get() + ",\"messages_wanted\":" + wanted
            + ",\"complete\":" + complete
            + ",\"consume_span_s\":"
            + BenchFlags.decimal((lastNanos.get() - firstNanos.get()) / 1e9)
            + ",\"consume_tps\":" + BenchFlags.decimal(consumeTps())
            + ",\"avg_b2c_rt_ms\":" + BenchFlags.decimal(born2Consumer.averageMs())
            + ",\"p99_b2c_rt_ms\":" + BenchFlags.decimal(born2Consumer.quantileMs(0.99))
            + ",\"max_b2c_rt_ms\":" + BenchFlags.decimal(born2Consumer.maxMs())
            + ",\"avg_s2c_rt_ms\":"
            + BenchFlags.decimal(store2ConsumerSumMs.get() / (double) count)
            + ",\"max_s2c_rt_ms\":" + store2ConsumerMaxMs.get()
            + ",\"threads\":" + threads + (popQueues >= 0 ? ",\"pop_queues\":" + popQueues : "")
            + "," + window.json() + "}";
        System.out.println("BENCH_RESULT " + json);
    }
}
