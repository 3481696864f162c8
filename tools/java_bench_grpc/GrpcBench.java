// Load program of tools/bench_grpc.py: RocketMQ 5's Java SDK (rocketmq-client-java) against a gRPC
// endpoint (pybroker's own, or rocketmq-proxy's in front of a broker).
//
// Usage: java -cp "sdk/*:classes" GrpcBench ENDPOINT MODE TOPIC GROUP THREADS SIZE DURATION_S WARMUP_S
//   MODE send:    THREADS producer threads, each sending SIZE-byte messages synchronously.
//   MODE consume: THREADS SimpleConsumer threads of GROUP, each receiving up to 32 messages
//                 (invisible 30 s) and acking every one.
// Prints "BENCH_MARK warmup_done <ms>" when the measured window opens (after WARMUP_S),
// "BENCH_MARK measure_end <ms>" when it closes (DURATION_S later), and one line
// "BENCH_RESULT {json}": operations in the window, failures, TPS, and p50/p99/max latency (ms)
// of the sends (send) or of a receive call and an ack call (consume).
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class GrpcBench {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    private static final AtomicBoolean MEASURING = new AtomicBoolean(false);
    private static final AtomicBoolean STOPPING = new AtomicBoolean(false);
    private static final AtomicLong OPERATIONS = new AtomicLong();
    private static final AtomicLong FAILURES = new AtomicLong();

    private GrpcBench() {
    }

    /** Latencies (µs) of one thread's measured operations. */
    static final class Samples {
        final List<long[]> chunks = new ArrayList<>();
        long[] current = new long[65536];
        int used;

        void add(long micros) {
            if (used == current.length) {
                chunks.add(current);
                current = new long[65536];
                used = 0;
            }
            current[used++] = micros;
        }

        void drainInto(List<Long> all) {
            for (long[] chunk : chunks) {
                for (long value : chunk) {
                    all.add(value);
                }
            }
            for (int i = 0; i < used; i++) {
                all.add(current[i]);
            }
        }
    }

    static void sendLoop(Producer producer, String topic, byte[] body, Samples samples) {
        while (!STOPPING.get()) {
            Message message = PROVIDER.newMessageBuilder().setTopic(topic).setBody(body).build();
            long started = System.nanoTime();
            try {
                producer.send(message);
                if (MEASURING.get()) {
                    samples.add((System.nanoTime() - started) / 1000);
                    OPERATIONS.incrementAndGet();
                }
            } catch (Exception error) {
                FAILURES.incrementAndGet();
            }
        }
    }

    static void consumeLoop(SimpleConsumer consumer, Samples receives, Samples acks) {
        while (!STOPPING.get()) {
            List<MessageView> views;
            long started = System.nanoTime();
            try {
                views = consumer.receive(32, Duration.ofSeconds(30));
            } catch (Exception error) {
                FAILURES.incrementAndGet();
                continue;
            }
            boolean measured = MEASURING.get();
            if (measured) {
                receives.add((System.nanoTime() - started) / 1000);
            }
            for (MessageView view : views) {
                long ackStarted = System.nanoTime();
                try {
                    consumer.ack(view);
                    if (measured) {
                        acks.add((System.nanoTime() - ackStarted) / 1000);
                        OPERATIONS.incrementAndGet();
                    }
                } catch (Exception error) {
                    FAILURES.incrementAndGet();
                }
            }
        }
    }

    static String percentiles(String name, List<Long> values) {
        if (values.isEmpty()) {
            return "\"" + name + "_p50_ms\":null,\"" + name + "_p99_ms\":null";
        }
        Collections.sort(values);
        double p50 = values.get(values.size() / 2) / 1000.0;
        double p99 = values.get(Math.min(values.size() - 1, (int) (values.size() * 0.99))) / 1000.0;
        double max = values.get(values.size() - 1) / 1000.0;
        return String.format("\"%s_p50_ms\":%.3f,\"%s_p99_ms\":%.3f,\"%s_max_ms\":%.3f",
            name, p50, name, p99, name, max);
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String mode = args[1];
        String topic = args[2];
        String group = args[3];
        int threads = Integer.parseInt(args[4]);
        int size = Integer.parseInt(args[5]);
        long durationMs = Long.parseLong(args[6]) * 1000;
        long warmupMs = Long.parseLong(args[7]) * 1000;
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .enableSsl(false).setRequestTimeout(Duration.ofSeconds(10)).build();
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        List<Thread> workers = new ArrayList<>();
        List<Samples> first = new ArrayList<>();
        List<Samples> second = new ArrayList<>();
        List<AutoCloseable> clients = new ArrayList<>();
        if ("send".equals(mode)) {
            Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config)
                .setTopics(topic).build();
            clients.add(producer);
            for (int i = 0; i < threads; i++) {
                Samples samples = new Samples();
                first.add(samples);
                workers.add(new Thread(() -> sendLoop(producer, topic, body, samples)));
            }
        } else {
            FilterExpression all = new FilterExpression("*", FilterExpressionType.TAG);
            for (int i = 0; i < threads; i++) {
                SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder()
                    .setClientConfiguration(config).setConsumerGroup(group)
                    .setAwaitDuration(Duration.ofSeconds(5))
                    .setSubscriptionExpressions(Collections.singletonMap(topic, all)).build();
                clients.add(consumer);
                Samples receives = new Samples();
                Samples acks = new Samples();
                first.add(receives);
                second.add(acks);
                workers.add(new Thread(() -> consumeLoop(consumer, receives, acks)));
            }
        }
        for (Thread worker : workers) {
            worker.start();
        }
        Thread.sleep(warmupMs);
        long failuresBefore = FAILURES.get();
        MEASURING.set(true);
        long opened = System.currentTimeMillis();
        System.out.println("BENCH_MARK warmup_done " + opened);
        System.out.flush();
        Thread.sleep(durationMs);
        MEASURING.set(false);
        long closed = System.currentTimeMillis();
        System.out.println("BENCH_MARK measure_end " + closed);
        System.out.flush();
        long operations = OPERATIONS.get();
        long failures = FAILURES.get() - failuresBefore;
        STOPPING.set(true);
        for (Thread worker : workers) {
            worker.join(60_000);
        }
        List<Long> firstAll = new ArrayList<>();
        List<Long> secondAll = new ArrayList<>();
        for (Samples samples : first) {
            samples.drainInto(firstAll);
        }
        for (Samples samples : second) {
            samples.drainInto(secondAll);
        }
        double seconds = (closed - opened) / 1000.0;
        String figures = "send".equals(mode) ? percentiles("send", firstAll)
            : percentiles("receive", firstAll) + "," + percentiles("ack", secondAll);
        System.out.println(String.format("BENCH_RESULT {\"mode\":\"%s\",\"operations\":%d,"
            + "\"failures\":%d,\"seconds\":%.3f,\"tps\":%.1f,%s}", mode, operations, failures,
            seconds, operations / seconds, figures));
        System.out.flush();
        for (AutoCloseable client : clients) {
            client.close();
        }
        System.exit(0);
    }
}
