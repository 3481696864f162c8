// Flag parsing, the RT histogram and the measured window shared by the benchmark load programs.

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Flags in the style of RocketMQ's benchmark tools ("-w 8 -s 128"), plus a latency histogram.
 * Every flag takes one value; unknown flags are a usage error (exit code 2).
 */
final class BenchFlags {
    private final Map<String, String> values = new HashMap<>();

    BenchFlags(String[] args, String known) {
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (!arg.startsWith("-") || arg.length() < 2 || i + 1 >= args.length) {
                usage("bad argument " + arg + " (every flag takes a value)");
            }
            String name = arg.substring(1);
            if (!(" " + known + " ").contains(" " + name + " ")) {
                usage("unknown flag -" + name + "; known: " + known);
            }
            values.put(name, args[++i]);
        }
    }

    static void usage(String message) {
        System.err.println("usage error: " + message);
        System.exit(2);
    }

    String text(String name, String fallback) {
        String value = values.get(name);
        return value == null ? fallback : value.trim();
    }

    long number(String name, long fallback) {
        String value = values.get(name);
        try {
            return value == null ? fallback : Long.parseLong(value.trim());
        } catch (NumberFormatException error) {
            usage("-" + name + " wants an integer, got " + value);
            return fallback;
        }
    }

    boolean flag(String name) {
        return Boolean.parseBoolean(text(name, "false"));
    }

    /** Log-free JSON number formatting (fixed locale so "1.5" never becomes "1,5"). */
    static String decimal(double value) {
        return String.format(Locale.ROOT, "%.3f", value);
    }
}

/**
 * Latencies in microseconds: 10 us buckets up to 10 s (the last bucket collects the rest), so
 * p50/p99 come out without keeping every sample; count, sum and max are exact.
 */
final class RtHistogram {
    private static final int BUCKET_US = 10;
    private static final int BUCKETS = 1_000_000;
    private final AtomicLongArray buckets = new AtomicLongArray(BUCKETS);
    private final AtomicLong count = new AtomicLong();
    private final AtomicLong sumUs = new AtomicLong();
    private final AtomicLong maxUs = new AtomicLong();

    void record(long rtUs) {
        long clamped = Math.max(0, rtUs);
        buckets.incrementAndGet((int) Math.min(BUCKETS - 1, clamped / BUCKET_US));
        count.incrementAndGet();
        sumUs.addAndGet(clamped);
        long previous = maxUs.get();
        while (clamped > previous && !maxUs.compareAndSet(previous, clamped)) {
            previous = maxUs.get();
        }
    }

    long count() {
        return count.get();
    }

    double averageMs() {
        long n = count.get();
        return n == 0 ? 0.0 : sumUs.get() / 1000.0 / n;
    }

    double maxMs() {
        return maxUs.get() / 1000.0;
    }

    /** The upper edge of the bucket holding the given quantile (0..1), in milliseconds. */
    double quantileMs(double quantile) {
        long n = count.get();
        if (n == 0) {
            return 0.0;
        }
        long rank = (long) Math.ceil(quantile * n);
        long seen = 0;
        for (int i = 0; i < BUCKETS; i++) {
            seen += buckets.get(i);
            if (seen >= rank) {
                return Math.min((i + 1) * (double) BUCKET_US, maxUs.get()) / 1000.0;
            }
        }
        return maxMs();
    }
}

/**
 * The measured window of a load program: the first -W seconds (JIT, page faults, connection
 * set-up) are discarded - or, given a message count instead, the first that many messages (a
 * consumer draining a backlog: a fast broker may drain it within any fixed number of seconds)
 * - and the window ends at the -T time bound (or earlier via {@link #end}).
 * It prints "BENCH_MARK warmup_done <epoch ms>" when the window opens and "BENCH_MARK
 * measure_end <epoch ms>" when it closes, so the driver samples the broker's processes at the
 * same instants. Counts and latencies are recorded only inside the window.
 */
final class BenchWindow {
    private final long startNanos;
    private final long warmupEndNanos;
    private final long deadlineNanos;
    private final long warmupMessages;
    private final AtomicLong warmupSeen = new AtomicLong();
    private final CountDownLatch opened = new CountDownLatch(1);
    private final Object markLock = new Object();
    private volatile boolean measuring;
    private volatile boolean ended;
    private volatile long windowStartNanos;
    private volatile long windowEndNanos;
    private final AtomicLong messages = new AtomicLong();
    private final AtomicLong requests = new AtomicLong();
    private final List<Long> perSecond = new ArrayList<>();
    final RtHistogram histogram = new RtHistogram();

    BenchWindow(long warmupS, long durationS) {
        this(warmupS, durationS, 0);
    }

    /** warmupMessages > 0: the window opens at that many messages recorded, not after warmupS. */
    BenchWindow(long warmupS, long durationS, long warmupMessages) {
        startNanos = System.nanoTime();
        this.warmupMessages = Math.max(0, warmupMessages);
        warmupEndNanos = startNanos + TimeUnit.SECONDS.toNanos(
            this.warmupMessages > 0 ? 0 : Math.max(0, warmupS));
        deadlineNanos = startNanos + TimeUnit.SECONDS.toNanos(Math.max(warmupS + 1, durationS));
    }

    /** Start the timer thread that opens the window, samples per-second counts and closes it. */
    void start() {
        Thread timer = new Thread(this::runTimer, "bench-window");
        timer.setDaemon(true);
        timer.start();
    }

    private void runTimer() {
        try {
            if (warmupMessages > 0) {
                opened.await(Math.max(0, deadlineNanos - System.nanoTime()), TimeUnit.NANOSECONDS);
            } else {
                sleepUntil(warmupEndNanos);
            }
            open();
            long next = windowStartNanos;
            long last = 0;
            while (!ended && System.nanoTime() < deadlineNanos) {
                next += TimeUnit.SECONDS.toNanos(1);
                sleepUntil(Math.min(next, deadlineNanos));
                long now = messages.get();
                synchronized (perSecond) {
                    perSecond.add(now - last);
                }
                last = now;
            }
            end();
        } catch (InterruptedException stop) {
            Thread.currentThread().interrupt();
        }
    }

    private static void sleepUntil(long nanos) throws InterruptedException {
        long left = nanos - System.nanoTime();
        if (left > 0) {
            TimeUnit.NANOSECONDS.sleep(left);
        }
    }

    private void open() {
        synchronized (markLock) {
            if (measuring || ended) {
                return;
            }
            windowStartNanos = System.nanoTime();
            measuring = true;
            opened.countDown();
            mark("warmup_done");
        }
    }

    /** Close the window now (idempotent): the deadline passed or the wanted count arrived. */
    void end() {
        synchronized (markLock) {
            if (ended) {
                return;
            }
            if (!measuring) {
                open();
            }
            measuring = false;
            ended = true;
            windowEndNanos = System.nanoTime();
            mark("measure_end");
        }
    }

    private static void mark(String name) {
        System.out.println("BENCH_MARK " + name + " " + System.currentTimeMillis());
        System.out.flush();
    }

    boolean expired() {
        return ended || System.nanoTime() >= deadlineNanos;
    }

    long deadlineNanos() {
        return deadlineNanos;
    }

    /** Count a completed request of count messages with latency rtUs, if inside the window. */
    void record(int count, long rtUs) {
        if (!measuring && warmupMessages > 0 && !ended
                && warmupSeen.addAndGet(count) >= warmupMessages) {
            open();
            return;           // the message that completes the warm-up is not measured
        }
        if (measuring) {
            messages.addAndGet(count);
            requests.incrementAndGet();
            histogram.record(rtUs);
        }
    }

    long messages() {
        return messages.get();
    }

    double seconds() {
        long end = ended ? windowEndNanos : System.nanoTime();
        long begin = windowStartNanos == 0 ? startNanos : windowStartNanos;
        return Math.max(1e-9, (end - begin) / 1e9);
    }

    double tps() {
        return messages.get() / seconds();
    }

    /** JSON fields of the window: messages, seconds, TPS, RT quantiles, per-second TPS. */
    String json() {
        StringBuilder series = new StringBuilder();
        synchronized (perSecond) {
            for (Long count : perSecond) {
                series.append(series.length() == 0 ? "" : ",").append(count);
            }
        }
        return "\"window_messages\":" + messages.get() + ",\"window_requests\":" + requests.get()
            + ",\"window_s\":" + BenchFlags.decimal(seconds())
            + ",\"warmup_s\":" + BenchFlags.decimal(((warmupMessages > 0 && windowStartNanos
                != 0 ? windowStartNanos : warmupEndNanos) - startNanos) / 1e9)
            + ",\"warmup_messages\":" + warmupSeen.get()
            + ",\"tps\":" + BenchFlags.decimal(tps())
            + ",\"avg_rt_ms\":" + BenchFlags.decimal(histogram.averageMs())
            + ",\"p50_rt_ms\":" + BenchFlags.decimal(histogram.quantileMs(0.50))
            + ",\"p99_rt_ms\":" + BenchFlags.decimal(histogram.quantileMs(0.99))
            + ",\"max_rt_ms\":" + BenchFlags.decimal(histogram.maxMs())
            + ",\"tps_per_second\":[" + series + "]";
    }
}
