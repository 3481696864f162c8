// Load program: sync/async/batch producer with RocketMQ benchmark-tool flags and statistics.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
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
 * -q total messages (0 = until -T), -T time bound in seconds (600), -W warm-up seconds not
 * measured (0), -y async (false), -i async in-flight requests (64), -b messages per batch
 * request (1 = single sends), -k key per message (false), -g producer group, -z header encoding
 * ROCKETMQ|JSON (ROCKETMQ, as the official Producer sets).
 * Prints "Send TPS ... Max RT ... Average RT ... Send Failed ... Response Failed" every 10 s
 * (TPS of the last 10 s, as the official tool) and at the end, the window marks of
 * {@link BenchWindow}, then one "BENCH_RESULT {json}" line whose TPS and RT figures cover only
 * the measured window (after -W, up to -T or the last of -q messages). RT is per request, ms.
 * The first failed send prints one "BENCH_FIRST_FAILURE <what>" line (the exception or status).
 */
public final class BenchProducer {
    private static final String FLAGS = "n t w s q T W y i b k g z";
    private final AtomicLong messagesOk = new AtomicLong();
    private final AtomicLong sendFailed = new AtomicLong();
    private final AtomicLong responseFailed = new AtomicLong();
    private final AtomicBoolean failureShown = new AtomicBoolean();
    private DefaultMQProducer producer;
    private String topic;
    private byte[] body;
    private int batchSize;
    private boolean keyEnable;
    private BenchWindow window;

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
        System.out.printf("topic: %s threadCount: %d messageSize: %d batchSize: %d "
            + "messageQuantity: %d asyncEnable: %s%n", topic, threads, body.length, batchSize,
            total, async);
        producer = new DefaultMQProducer(flags.text("g", "benchmark_producer"));
        producer.setNamesrvAddr(flags.text("n", "127.0.0.1:9876"));
        producer.setInstanceName(Long.toString(System.nanoTime()));
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.start();
        window = new BenchWindow(flags.number("W", 0), flags.number("T", 600));
        window.start();
        Thread reporter = startReporter();
        if (async) {
            sendAsync(total, (int) Math.max(1, flags.number("i", 64)));
        } else {
            sendFromThreads(threads, total);
        }
        window.end();
        reporter.interrupt();
        printStats("[Complete]", window.tps());
        printResult(threads, total, async);
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
        while (sent < share && !window.expired()) {
            List<Message> messages = nextRequest(share - sent);
            sent += messages.size();
            long began = System.nanoTime();
            try {
                SendResult result = messages.size() == 1 && batchSize == 1
                    ? producer.send(messages.get(0)) : producer.send(messages);
                completed(result, messages.size(), began);
            } catch (MQBrokerException error) {
                failed(responseFailed, error);
            } catch (InterruptedException error) {
                Thread.currentThread().interrupt();
                return;
            } catch (Exception error) {
                failed(sendFailed, error);
            }
        }
    }

    private void completed(SendResult result, int count, long beganNanos) {
        long now = System.nanoTime();
        if (result != null && result.getSendStatus() == SendStatus.SEND_OK) {
            window.record(count, (now - beganNanos) / 1000);
            messagesOk.addAndGet(count);
        } else {
            failed(responseFailed, result == null ? "no send result" : result.getSendStatus());
        }
    }

    /** Counts a failure; the first one is printed, on one line, for the driver's report. */
    private void failed(AtomicLong counter, Object what) {
        counter.incrementAndGet();
        if (failureShown.compareAndSet(false, true)) {
            System.out.println("BENCH_FIRST_FAILURE " + String.valueOf(what).split("\\R", 2)[0]);
        }
    }

    /** One thread, at most `inflight` requests awaiting their callback (flow control). */
    private void sendAsync(long total, int inflight) throws InterruptedException {
        Semaphore permits = new Semaphore(inflight);
        long limit = total == 0 ? Long.MAX_VALUE : total;
        long sent = 0;
        while (sent < limit && !window.expired()) {
            long remainingNanos = window.deadlineNanos() - System.nanoTime();
            if (!permits.tryAcquire(remainingNanos, TimeUnit.NANOSECONDS)) {
                break;
            }
            List<Message> messages = nextRequest(limit - sent);
            sent += messages.size();
            sendOneAsync(messages, permits);
        }
        long remainingNanos = Math.max(0, window.deadlineNanos() - System.nanoTime());
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
                failed(responseFailed, error);
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
            failed(sendFailed, error);
            permits.release();
        }
    }

    private Thread startReporter() {
        Thread reporter = new Thread(() -> {
            long lastCount = 0;
            try {
                while (true) {
                    Thread.sleep(10000);
                    long count = messagesOk.get();
                    printStats("[Progress]", (count - lastCount) / 10.0);
                    lastCount = count;
                }
            } catch (InterruptedException done) {
                Thread.currentThread().interrupt();
            }
        }, "bench-reporter");
        reporter.setDaemon(true);
        reporter.start();
        return reporter;
    }

    private void printStats(String label, double tps) {
        System.out.printf("%s Current Time: %d Send TPS: %d Max RT(ms): %.3f Average RT(ms): "
            + "%.3f Send Failed: %d Response Failed: %d%n", label, System.currentTimeMillis(),
            (long) tps, window.histogram.maxMs(), window.histogram.averageMs(),
            sendFailed.get(), responseFailed.get());
    }

    private void printResult(int threads, long total, boolean async) {
        String json = "{\"messages_ok\":" + messagesOk.get()
            + ",\"messages_wanted\":" + total
            + ",\"send_tps\":" + BenchFlags.decimal(window.tps())
            + ",\"send_failed\":" + sendFailed.get()
            + ",\"response_failed\":" + responseFailed.get()
            + ",\"threads\":" + threads + ",\"batch\":" + batchSize
            + ",\"body_bytes\":" + body.length + ",\"async\":" + async + ","
            + window.json() + "}";
        System.out.println("BENCH_RESULT " + json);
    }
}
