import java.io.File;
import java.io.PrintStream;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

import org.HdrHistogram.EncodableHistogram;
import org.HdrHistogram.Histogram;
import org.HdrHistogram.HistogramLogReader;
import org.HdrHistogram.HistogramLogScanner;
import org.HdrHistogram.HistogramLogWriter;

/**
 * Reads a probetop .hlog with the Java HdrHistogram library and prints, per tag in order of
 * first appearance: the interval count, total count and max of the summed intervals, then
 * the summed histogram's outputPercentileDistribution(out, 5, 1.0) -- what Java writes as
 * .hgrm. probetop's tests compare this with their own numbers and .hgrm text.
 *
 * With a second argument, it also writes the log again through Java's HistogramLogWriter
 * (version, StartTime, BaseTime, legend, then every interval with its tag, timestamps and
 * the default max-value ratio 1e6), so the header and interval columns can be compared
 * with ours. Run with -Duser.timezone=UTC so StartTime's date text is comparable.
 *
 * Usage: java -cp 'target/lib/*' HlogCheck.java FILE.hlog [REWRITTEN.hlog]
 */
public class HlogCheck {
    public static void main(String[] args) throws Exception {
        if (args.length != 1 && args.length != 2) {
            System.err.println("usage: java -cp 'target/lib/*' HlogCheck.java FILE.hlog [REWRITTEN.hlog]");
            System.exit(2);
        }
        if (args.length == 2) {
            rewrite(args[0], args[1]);
        }
        HistogramLogReader reader = new HistogramLogReader(args[0]);
        Map<String, Histogram> sums = new LinkedHashMap<>();
        Map<String, Integer> intervals = new LinkedHashMap<>();
        EncodableHistogram encoded;
        while ((encoded = reader.nextIntervalHistogram()) != null) {
            // V2 integer histograms decode to Histogram; anything else is a bug in the log.
            Histogram h = (Histogram) encoded;
            String tag = h.getTag();
            if (tag == null) {
                throw new IllegalStateException("untagged interval in " + args[0]);
            }
            sums.computeIfAbsent(tag, t -> new Histogram(h.getLowestDiscernibleValue(),
                    h.getHighestTrackableValue(), h.getNumberOfSignificantValueDigits())).add(h);
            intervals.merge(tag, 1, Integer::sum);
        }
        System.out.printf(Locale.US, "START %.3f%n", reader.getStartTimeSec());
        for (Map.Entry<String, Histogram> e : sums.entrySet()) {
            Histogram sum = e.getValue();
            System.out.printf(Locale.US, "TAG %s intervals=%d count=%d max=%d%n",
                    e.getKey(), intervals.get(e.getKey()), sum.getTotalCount(), sum.getMaxValue());
            sum.outputPercentileDistribution(System.out, 5, 1.0);
        }
        System.out.flush();
    }

    /** Reads `in` with HistogramLogScanner (raw timestamps) and writes it with HistogramLogWriter. */
    static void rewrite(String in, String out) throws Exception {
        try (PrintStream ps = new PrintStream(out, "UTF-8");
             HistogramLogScanner scanner = new HistogramLogScanner(new File(in))) {
            HistogramLogWriter writer = new HistogramLogWriter(ps);
            scanner.process(new HistogramLogScanner.EventHandler() {
                double startTime = Double.NaN;
                double baseTime = Double.NaN;
                boolean headerWritten = false;

                public boolean onComment(String comment) { return false; }
                public boolean onBaseTime(double s) { baseTime = s; return false; }
                public boolean onStartTime(double s) { startTime = s; return false; }

                public boolean onHistogram(String tag, double timestamp, double length,
                        HistogramLogScanner.EncodableHistogramSupplier lazyReader) {
                    if (!headerWritten) {
                        writer.outputLogFormatVersion();
                        writer.outputStartTime(Math.round(startTime * 1000.0));
                        writer.outputBaseTime(Math.round(baseTime * 1000.0));
                        writer.outputLegend();
                        headerWritten = true;
                    }
                    try {
                        EncodableHistogram h = lazyReader.read();
                        h.setTag(tag);
                        writer.outputIntervalHistogram(timestamp, timestamp + length, h, 1000000.0);
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                    return false;
                }

                public boolean onException(Throwable t) {
                    throw new RuntimeException("cannot read " + in, t);
                }
            });
        }
    }
}
