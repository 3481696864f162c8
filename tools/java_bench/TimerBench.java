// Runs Apache's timer benchmark (org.apache.rocketmq.example.benchmark.timer, compiled from the
// 5.3.3 source in a scratch folder, never committed) against a chosen NameServer, and measures
// delivery lateness of every message exactly.
//
// Usage: java -cp "lib/*:apache-classes:this" TimerBench producer NAMESRV TOTAL -- ARGS...
//        java -cp ... TimerBench consumer NAMESRV TOPIC TOTAL TIMEOUT_S WARMUP [apache]
//        java -cp ... TimerBench warmup NAMESRV TOPIC COUNT SIZE
//
// producer: Apache's TimerProducer with ARGS (-t, -tc, -ms, -p, -st, -mt, -sd). Its -n flag
//   reads the -t value (a bug of 5.3.3's TimerProducer and TimerConsumer), so the launcher
//   builds it without -n and sets the NameServer on its producer field before start(); it
//   prints "BENCH_MARK first_send", waits until TOTAL sends were answered (ok or failed) and
//   prints "BENCH_RESULT {json}" (sent, failed, seconds, sendTps) then exits.
// consumer: a push consumer (group timer_bench_lateness, from the first offset) that takes
//   every message Apache's producer sent (its MY_RECORD_TIMER_DELIVER_MS property) and records
//   stored - deliver time (the broker's lateness: its store time of the delivered message)
//   and received - deliver time (with the consumer's own delay), in ms; with "apache",
//   Apache's TimerConsumer runs beside it (its own group, its own printed figures). Prints
//   "BENCH_RESULT {json}" when TOTAL distinct messages arrived or TIMEOUT_S passed: count,
//   duplicates, early (stored before its time), percentiles, max, within 1 precision (1000
//   ms) and within 10 s, of both. Warm-up messages (the TIMER_BENCH_WARMUP property) take the
//   same steps into a set of their own and are not counted; it prints "BENCH_MARK
//   warmup_consumed MS" once WARMUP of them arrived.
// warmup: sends COUNT plain (not timer) messages of SIZE bytes to TOPIC from 8 threads, each
//   with TIMER_BENCH_WARMUP = its send time, so that the consumer's JIT has compiled its path
//   before the burst (a consumer started cold spends the burst's first seconds compiling on
//   the broker's cores); prints "BENCH_RESULT {json}" (sent, failed, seconds).
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public final class TimerBench {
    private static final String PRODUCER = "org.apache.rocketmq.example.benchmark.timer.TimerProducer";
    private static final String CONSUMER = "org.apache.rocketmq.example.benchmark.timer.TimerConsumer";
    private static final String WARMUP = "TIMER_BENCH_WARMUP";

    private TimerBench() {
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("producer")) {
            producer(args[1], Long.parseLong(args[2]),
                Arrays.copyOfRange(args, 4, args.length));
        } else if (args[0].equals("warmup")) {
            warmup(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        } else {
            consumer(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                Integer.parseInt(args[5]), args.length > 6 && args[6].equals("apache"));
        }
    }

    static Object field(Object target, String name) throws Exception {
        Field field = target.getClass().getDeclaredField(name);
        field.setAccessible(true);
        return field.get(target);
    }

    static void producer(String namesrv, long total, String[] apacheArgs) throws Exception {
        Object apache = Class.forName(PRODUCER).getConstructor(String[].class)
            .newInstance((Object) apacheArgs);
        ((DefaultMQProducer) field(apache, "producer")).setNamesrvAddr(namesrv);
        Object stats = field(apache, "statsBenchmark");
        AtomicLong ok = (AtomicLong) field(stats, "sendRequestSuccessCount");
        AtomicLong failed = (AtomicLong) field(stats, "sendRequestFailedCount");
        AtomicLong refused = (AtomicLong) field(stats, "receiveResponseFailedCount");
        apache.getClass().getMethod("startScheduleTask").invoke(apache);
        long started = System.currentTimeMillis();
        System.out.println("BENCH_MARK first_send " + started);
        apache.getClass().getMethod("start").invoke(apache);
        while (ok.get() + failed.get() + refused.get() < total) {
            Thread.sleep(50);
        }
        double seconds = (System.currentTimeMillis() - started) / 1000.0;
        System.out.printf("BENCH_RESULT {\"sent\":%d,\"failed\":%d,\"seconds\":%.3f,"
            + "\"sendTps\":%.1f}%n", ok.get(), failed.get() + refused.get(), seconds,
            ok.get() / seconds);
        System.out.flush();
        System.exit(0);
    }

    static void warmup(String namesrv, String topic, int count, int size) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("timer_bench_warmup");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        byte[] body = new byte[size];
        AtomicInteger next = new AtomicInteger();
        AtomicLong ok = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        long started = System.currentTimeMillis();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            Thread thread = new Thread(() -> {
                while (next.getAndIncrement() < count) {
                    Message message = new Message(topic, body);
                    message.putUserProperty(WARMUP, Long.toString(System.currentTimeMillis()));
                    try {
                        SendResult result = producer.send(message);
                        (result.getSendStatus() == SendStatus.SEND_OK ? ok : failed)
                            .incrementAndGet();
                    } catch (Exception e) {
                        failed.incrementAndGet();
                    }
                }
            });
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        double seconds = (System.currentTimeMillis() - started) / 1000.0;
        producer.shutdown();
        System.out.printf("BENCH_RESULT {\"sent\":%d,\"failed\":%d,\"seconds\":%.3f}%n",
            ok.get(), failed.get(), seconds);
        System.out.flush();
        System.exit(0);
    }

    static void consumer(String namesrv, String topic, int total, long timeoutS, int warmups,
        boolean apache) throws Exception {
        long[] lateness = new long[total];
        long[] stored = new long[total];
        AtomicInteger count = new AtomicInteger();
        AtomicLong duplicates = new AtomicLong();
        Set<String> seen = ConcurrentHashMap.newKeySet();
        Set<String> seenWarm = ConcurrentHashMap.newKeySet();
        AtomicInteger warmed = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("timer_bench_lateness");
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(16);
        consumer.setConsumeThreadMax(16);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            long now = System.currentTimeMillis();
            for (MessageExt message : messages) {
                String wanted = message.getUserProperty("MY_RECORD_TIMER_DELIVER_MS");
                if (wanted == null) {
                    String sent = message.getUserProperty(WARMUP);
                    if (sent != null && seenWarm.add(message.getMsgId())
                        && Long.parseLong(sent) > 0
                        && warmed.incrementAndGet() == warmups) {
                        System.out.println("BENCH_MARK warmup_consumed " + now);
                        System.out.flush();
                    }
                    continue;
                }
                if (!seen.add(message.getMsgId())) {
                    duplicates.incrementAndGet();
                    continue;
                }
                int index = count.getAndIncrement();
                if (index < lateness.length) {
                    lateness[index] = now - Long.parseLong(wanted);
                    stored[index] = message.getStoreTimestamp() - Long.parseLong(wanted);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        if (apache) {
            Object apacheConsumer = Class.forName(CONSUMER).getConstructor(String[].class)
                .newInstance((Object) new String[] {"-t", topic});
            ((DefaultMQPushConsumer) field(apacheConsumer, "consumer")).setNamesrvAddr(namesrv);
            Method schedule = apacheConsumer.getClass().getMethod("startScheduleTask");
            schedule.invoke(apacheConsumer);
            apacheConsumer.getClass().getMethod("start").invoke(apacheConsumer);
        }
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        while (count.get() < total && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        int n = Math.min(count.get(), total);
        System.out.printf("BENCH_RESULT {\"count\":%d,\"expected\":%d,\"duplicates\":%d,"
            + "\"stored\":%s,\"received\":%s}%n", n, total, duplicates.get(),
            figures(stored, n), figures(lateness, n));
        System.out.flush();
        System.exit(0);
    }

    static String figures(long[] values, int n) {
        long[] sorted = Arrays.copyOf(values, n);
        Arrays.sort(sorted);
        long early = 0;
        long withinPrecision = 0;
        long within10s = 0;
        for (long value : sorted) {
            early += value < 0 ? 1 : 0;
            withinPrecision += value <= 1000 ? 1 : 0;
            within10s += value <= 10_000 ? 1 : 0;
        }
        return String.format("{\"early\":%d,\"p50\":%d,\"p90\":%d,\"p99\":%d,\"p999\":%d,"
            + "\"max\":%d,\"withinPrecision\":%d,\"within10s\":%d}", early, at(sorted, 0.5),
            at(sorted, 0.9), at(sorted, 0.99), at(sorted, 0.999), n > 0 ? sorted[n - 1] : -1,
            withinPrecision, within10s);
    }

    static long at(long[] sorted, double quantile) {
        if (sorted.length == 0) {
            return -1;
        }
        return sorted[Math.min((int) (sorted.length * quantile), sorted.length - 1)];
    }
}
