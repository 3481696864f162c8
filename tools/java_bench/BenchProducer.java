// Load program: sync/async/batch producer with RocketMQ benchmark-tool flags and statistics.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * Our own re-implementation of the behaviour of RocketMQ's benchmark Producer and BatchProducer
 * (the official classes are not published on Maven Central). Flags:
 * -n namesrv, -t topic (BenchmarkTest), -w sender threads (64), -s body bytes (128),
 * -q total messages (0 = until -T), -T time bound in seconds (600), -y async (false),
 * -i async in-flight requests (64), -b messages per batch request (1 = single sends),
 * -k key per message (false), -g producer group, -z header encoding ROCKETMQ|JSON (ROCKETMQ, as
 * the official Producer sets).
 * Prints "Send TPS ... Max RT ... Average RT ... Send Failed ... Response Failed" every 5 s and
 * at the end, then one "BENCH_RESULT {json}" line. RT is per request, in milliseconds.
 */
public final class BenchProducer {
    private static final String FLAGS = "n t w s q T y i b k g z";
    private final RtHistogram histogram = new RtHistogram();
    private final AtomicLong messagesOk = new AtomicLong();
    private final AtomicLong sendFailed = new AtomicLong();
    private final AtomicLong responseFailed = new AtomicLong();
    private final AtomicLong lastDoneNanos = new AtomicLong();
    private DefaultMQProducer producer;
    private String topic;
    private byte[] body;
    private int batchSize;
    private boolean keyEnable;
    private long deadlineNanos;

    public static void main(String[] args) throws Exception {
        BenchFlags flags = new BenchFlags(args, FLAGS);
        System.setProperty("rocketmq.serialize.type", flags.text("z", "ROCKETMQ"));
        new BenchProducer().run(flags);
    }

    private static byte[] randomBody(int size) {
        String alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        StringBuilder text = new StringBuilder(size);
        for (int i = 0; i < size; i++) {
            text.append(alphabet.charAt(ThreadLocalRandom.current().nextInt(alphabet.length())));
        }
        return text.toString().getBytes(StandardCharsets.UTF_8);
    }

    private void run(BenchFlags flags) throws Exception {
        topic = flags.text("t", "BenchmarkTest");
        body = randomBody((int) flags.number("s", 128));
        batchSize = (int) Math.max(1, flags.number("b", 1));
        keyEnable = flags.flag("k");
        boolean async = flags.flag("y");
        int threads = async ? 1 : (int) Math.max(1, flags.number("w", 64));
        long total = flags.number("q", 0);
        long timeBoundS = flags.number("T", 600);
        System.out.printf("topic: %s threadCount: %d messageSize: %d batchSize: %d "
            + "messageQuantity: %d asyncEnable: %s%n", topic, threads, body.length, batchSize,
            total, async);
        producer = new DefaultMQProducer(flags.text("g", "benchmark_producer"));
        producer.setNamesrvAddr(flags.text("n", "127.0.0.1:9876"));
        producer.setInstanceName(Long.toString(System.nanoTime()));
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.start();
        long startNanos = System.nanoTime();
        deadlineNanos = startNanos + TimeUnit.SECONDS.toNanos(timeBoundS);
        Thread reporter = startReporter(startNanos);
        if (async) {
            sendAsync(total, (int) Math.max(1, flags.number("i", 64)));
        } else {
            sendFromThreads(threads, total);
        }
        reporter.interrupt();
        long endNanos = Math.max(lastDoneNanos.get(), startNanos + 1);
        printStats("[Complete]", (endNanos - startNanos) / 1e9);
        printResult(threads, total, async, (endNanos - startNanos) / 1e9);
        producer.shutdown();
        System.exit(0);
    }

    /** Per-thread share of total (the remainder goes to thread 0); 0 = until the deadline. */
    private void sendFromThreads(int threads, long total) throws InterruptedException {
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            long share = total == 0 ? Long.MAX_VALUE
                : total / threads + (t == 0 ? total % threads : 0);
            Thread worker = new Thread(() -> sendLoop(share), "bench-sender-" + t);
            workers.add(worker);
            worker.start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
    }

    private List<Message> nextRequest(long remaining) {
        int size = (int) Math.min(batchSize, remaining);
        List<Message> messages = new ArrayList<>(size);
        for (int i = 0; i < size; i++) {
            Message message = new Message(topic, body);
            if (keyEnable) {
                message.setKeys(Long.toString(System.currentTimeMillis() / 1000));
            }
            messages.add(message);
        }
        return messages;
    }

    private void sendLoop(long share) {
        long sent = 0;
        while (sent < share && System.nanoTime() < deadlineNanos) {
            List<Message> messages = nextRequest(share - sent);
            sent += messages.size();
            long began = System.nanoTime();
            try {
                SendResult result = messages.size() == 1 && batchSize == 1
                    ? producer.send(messages.get(0)) : producer.send(messages);
                completed(result, messages.size(), began);
            } catch (MQBrokerException error) {
                responseFailed.incrementAndGet();
            } catch (InterruptedException error) {
                Thread.currentThread().interrupt();
                return;
            } catch (Exception error) {
                sendFailed.incrementAndGet();
            }
        }
    }

    private void completed(SendResult result, int count, long beganNanos) {
        long now = System.nanoTime();
        if (result != null && result.getSendStatus() == SendStatus.SEND_OK) {
            histogram.record((now - beganNanos) / 1000);
            messagesOk.addAndGet(count);
        } else {
            responseFailed.incrementAndGet();
        }
        lastDoneNanos.accumulateAndGet(now, Math::max);
    }

    /** One thread, at most `inflight` requests awaiting their callback (flow control). */
    private void sendAsync(long total, int inflight) throws InterruptedException {
        Semaphore permits = new Semaphore(inflight);
        long limit = total == 0 ? Long.MAX_VALUE : total;
        long sent = 0;
        while (sent < limit && System.nanoTime() < deadlineNanos) {
            long remainingNanos = deadlineNanos - System.nanoTime();
            if (!permits.tryAcquire(remainingNanos, TimeUnit.NANOSECONDS)) {
                break;
            }
            List<Message> messages = nextRequest(limit - sent);
            sent += messages.size();
            sendOneAsync(messages, permits);
        }
        long remainingNanos = Math.max(0, deadlineNanos - System.nanoTime());
        permits.tryAcquire(inflight, remainingNanos, TimeUnit.NANOSECONDS);
    }

    private void sendOneAsync(List<Message> messages, Semaphore permits) {
        long began = System.nanoTime();
        SendCallback callback = new SendCallback() {
            @Override
            public void onSuccess(SendResult result) {
                completed(result, messages.size(), began);
                permits.release();
            }

            @Override
            public void onException(Throwable error) {
                responseFailed.incrementAndGet();
                permits.release();
            }
        };
        try {
            if (batchSize == 1) {
                producer.send(messages.get(0), callback);
            } else {
                producer.send(messages, callback);
            }
        } catch (Exception error) {
            sendFailed.incrementAndGet();
            permits.release();
        }
    }

    private Thread startReporter(long startNanos) {
        Thread reporter = new Thread(() -> {
            try {
                while (true) {
                    Thread.sleep(5000);
                    printStats("[Progress]", (System.nanoTime() - startNanos) / 1e9);
                }
            } catch (InterruptedException done) {
                Thread.currentThread().interrupt();
            }
        }, "bench-reporter");
        reporter.setDaemon(true);
        reporter.start();
        return reporter;
    }

    private void printStats(String label, double elapsedS) {
        System.out.printf("%s Current Time: %d Send TPS: %d Max RT(ms): %.3f Average RT(ms): "
            + "%.3f Send Failed: %d Response Failed: %d%n", label, System.currentTimeMillis(),
            (long) (messagesOk.get() / elapsedS), histogram.maxMs(), histogram.averageMs(),
            sendFailed.get(), responseFailed.get());
    }

    private void printResult(int threads, long total, boolean async, double elapsedS) {
        String json = "{\"messages_ok\":" + messagesOk.get()
            + ",\"requests_ok\":" + histogram.count()
            + ",\"messages_wanted\":" + total
            + ",\"elapsed_s\":" + BenchFlags.decimal(elapsedS)
            + ",\"send_tps\":" + BenchFlags.decimal(messagesOk.get() / elapsedS)
            + ",\"avg_rt_ms\":" + BenchFlags.decimal(histogram.averageMs())
            + ",\"p50_rt_ms\":" + BenchFlags.decimal(histogram.quantileMs(0.50))
            + ",\"p99_rt_ms\":" + BenchFlags.decimal(histogram.quantileMs(0.99))
            + ",\"max_rt_ms\":" + BenchFlags.decimal(histogram.maxMs())
            + ",\"send_failed\":" + sendFailed.get()
            + ",\"response_failed\":" + responseFailed.get()
            + ",\"threads\":" + threads + ",\"batch\":" + batchSize
            + ",\"body_bytes\":" + body.length + ",\"async\":" + async + "}";
        System.out.println("BENCH_RESULT " + json);
    }
}
