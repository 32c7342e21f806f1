// Reference implementation for tests/telemetry/test_subscription_id_java.py: Kafka's
// ClientMetricsManager subscription resolution (createClientInstance + computeSubscriptionId) on the
// JVM's own HashSet, ConcurrentHashMap and CRC32C, every subscription matching.
// Input lines (tab-separated):  PUT name interval metric...  |  DEL name  |  CLIENT msb lsb  |  RESET
//                               ID interval msb lsb metric...   (computeSubscriptionId on new HashSet<>() + add)
// Output: one line per CLIENT / ID: subscriptionId TAB metrics.toString() TAB pushIntervalMs
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32C;

public class SubscriptionIds {
    record Info(Set<String> metrics, int intervalMs) { }

    static int uuidHashCode(long msb, long lsb) {
        long xor = msb ^ lsb;
        return (int) (xor >> 32) ^ (int) xor;
    }

    static int computeSubscriptionId(Set<String> metrics, int pushIntervalMs, long msb, long lsb) {
        byte[] bytes = (metrics.toString() + pushIntervalMs).getBytes(StandardCharsets.UTF_8);
        CRC32C crc = new CRC32C();
        crc.update(bytes, 0, bytes.length);
        return (int) crc.getValue() ^ uuidHashCode(msb, lsb);
    }

    public static void main(String[] args) throws Exception {
        Map<String, Info> subscriptions = new ConcurrentHashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            switch (f[0]) {
                case "PUT" -> {
                    List<String> metrics = Arrays.asList(f).subList(3, f.length);
                    subscriptions.put(f[1], new Info(new HashSet<>(metrics), Integer.parseInt(f[2])));
                }
                case "DEL" -> subscriptions.remove(f[1]);
                case "RESET" -> subscriptions = new ConcurrentHashMap<>();
                case "CLIENT" -> {
                    int pushIntervalMs = 5 * 60 * 1000;
                    Set<String> subscribed = new HashSet<>();
                    boolean all = false;
                    for (Info info : subscriptions.values()) {
                        all = all || info.metrics().contains("*");
                        subscribed.addAll(info.metrics());
                        pushIntervalMs = Math.min(pushIntervalMs, info.intervalMs());
                    }
                    if (all) {
                        subscribed.clear();
                        subscribed.add("*");
                    }
                    long msb = Long.parseLong(f[1]);
                    long lsb = Long.parseLong(f[2]);
                    out.append(computeSubscriptionId(subscribed, pushIntervalMs, msb, lsb)).append('\t')
                        .append(subscribed).append('\t').append(pushIntervalMs).append('\n');
                }
                case "ID" -> {
                    Set<String> metrics = new HashSet<>();
                    for (int i = 4; i < f.length; i++) metrics.add(f[i]);
                    int interval = Integer.parseInt(f[1]);
                    out.append(computeSubscriptionId(metrics, interval, Long.parseLong(f[2]), Long.parseLong(f[3])))
                        .append('\t').append(metrics).append('\t').append(interval).append('\n');
                }
                default -> throw new IllegalArgumentException("bad line: " + line);
            }
        }
        System.out.print(out);
    }
}
