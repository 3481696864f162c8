// Load program: transactional producer (half message + commit/rollback) with benchmark flags.

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Our own re-implementation of the behaviour of RocketMQ's benchmark TransactionProducer (not
 * published on Maven Central): each send is a half message whose local transaction commits,
 * or rolls back for the share -r of messages (percent, 0..100). Flags: -n namesrv, -t topic,
 * -w threads (32), -s body bytes (128), -q total messages, -T time bound in seconds (600),
 * -W warm-up seconds not measured (0), -r rollback percent (0), -g producer group.
 * Prints "Send TPS ... Max RT ... Average RT ... Send Failed ... Response Failed" at the end,
 * the window marks of {@link BenchWindow} and one "BENCH_RESULT {json}" line whose TPS and RT
 * figures cover the measured window; RT is per transactional send (half message + end), in ms.
 * The first failed send prints one "BENCH_FIRST_FAILURE <what>" line.
 */
public final class BenchTransactionProducer {
    private static final String FLAGS = "n t w s q T W r g";
    private final AtomicLong committed = new AtomicLong();
    private final AtomicLong rolledBack = new AtomicLong();
    private final AtomicLong checkBacks = new AtomicLong();
    private final AtomicLong sendFailed = new AtomicLong();
    private final AtomicLong responseFailed = new AtomicLong();
    private final AtomicLong sequence = new AtomicLong();
    private final AtomicBoolean failureShown = new AtomicBoolean();
    private TransactionMQProducer producer;
    private String topic;
    private byte[] body;
    private long rollbackPercent;
    private BenchWindow window;

    public static void main(String[] args) throws Exception {
        new BenchTransactionProducer().run(new BenchFlags(args, FLAGS));
    }

    private void run(BenchFlags flags) throws Exception {
        topic = flags.text("t", "BenchmarkTest");
        body = new byte[(int) flags.number("s", 128)];
        java.util.Arrays.fill(body, (byte) 'x');
        rollbackPercent = flags.number("r", 0);
        int threads = (int) Math.max(1, flags.number("w", 32));
        long total = flags.number("q", 0);
        System.out.printf("topic: %s threadCount: %d messageSize: %d messageQuantity: %d "
            + "rollbackPercent: %d%n", topic, threads, body.length, total, rollbackPercent);
        producer = new TransactionMQProducer(flags.text("g", "benchmark_transaction_producer"));
        producer.setNamesrvAddr(flags.text("n", "127.0.0.1:9876"));
        producer.setInstanceName(Long.toString(System.nanoTime()));
        producer.setTransactionListener(new Listener());
        producer.start();
        long startNanos = System.nanoTime();
        window = new BenchWindow(flags.number("W", 0), flags.number("T", 600));
        window.start();
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            long share = total == 0 ? Long.MAX_VALUE
                : total / threads + (t == 0 ? total % threads : 0);
            Thread worker = new Thread(() -> sendLoop(share), "bench-tx-sender-" + t);
            workers.add(worker);
            worker.start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        window.end();
        double elapsedS = Math.max(1e-9, (System.nanoTime() - startNanos) / 1e9);
        long ok = committed.get() + rolledBack.get();
        System.out.printf("[Complete] Send TPS: %d Max RT(ms): %.3f Average RT(ms): %.3f "
            + "Send Failed: %d Response Failed: %d Committed: %d Rolled back: %d%n",
            (long) window.tps(), window.histogram.maxMs(), window.histogram.averageMs(),
            sendFailed.get(), responseFailed.get(), committed.get(), rolledBack.get());
        System.out.println("BENCH_RESULT {\"messages_ok\":" + ok
            + ",\"committed\":" + committed.get() + ",\"rolled_back\":" + rolledBack.get()
            + ",\"check_backs\":" + checkBacks.get() + ",\"messages_wanted\":" + total
            + ",\"elapsed_s\":" + BenchFlags.decimal(elapsedS)
            + ",\"send_tps\":" + BenchFlags.decimal(ok / elapsedS)
            + ",\"send_failed\":" + sendFailed.get()
            + ",\"response_failed\":" + responseFailed.get()
            + ",\"threads\":" + threads + ",\"body_bytes\":" + body.length + ","
            + window.json() + "}");
        producer.shutdown();
        System.exit(0);
    }

    private void sendLoop(long share) {
        for (long sent = 0; sent < share && !window.expired(); sent++) {
            long began = System.nanoTime();
            try {
                TransactionSendResult result =
                    producer.sendMessageInTransaction(new Message(topic, body), null);
                if (result.getSendStatus() != SendStatus.SEND_OK) {
                    failed(responseFailed, result.getSendStatus());
                    continue;
                }
                window.record(1, (System.nanoTime() - began) / 1000);
                if (result.getLocalTransactionState() == LocalTransactionState.COMMIT_MESSAGE) {
                    committed.incrementAndGet();
                } else {
                    rolledBack.incrementAndGet();
                }
            } catch (Exception error) {
                failed(sendFailed, error);
            }
        }
    }

    /** Counts a failure; the first one is printed, on one line, for the driver's report. */
    private void failed(AtomicLong counter, Object what) {
        counter.incrementAndGet();
        if (failureShown.compareAndSet(false, true)) {
            System.out.println("BENCH_FIRST_FAILURE " + String.valueOf(what).split("\\R", 2)[0]);
        }
    }

    /** Commits, or rolls back every message whose sequence falls in the rollback share. */
    private final class Listener implements TransactionListener {
        @Override
        public LocalTransactionState executeLocalTransaction(Message message, Object argument) {
            long number = sequence.incrementAndGet();
            return number % 100 < rollbackPercent ? LocalTransactionState.ROLLBACK_MESSAGE
                : LocalTransactionState.COMMIT_MESSAGE;
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt message) {
            checkBacks.incrementAndGet();
            return LocalTransactionState.COMMIT_MESSAGE;
        }
    }
}
