// Minimal "-x value" flag parsing and the RT histogram shared by the benchmark load programs.

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
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
