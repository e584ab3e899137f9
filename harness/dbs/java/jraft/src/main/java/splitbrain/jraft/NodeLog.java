package splitbrain.jraft;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * node.log in the reference node's line format (harness/dbs/nodelog_events.py reads it):
 * {@code KIND key=value ... time=<epoch s> mono=<s>}. Written outside the data directory, so a
 * disk fault that rolls the data back never rolls back the evidence.
 */
final class NodeLog {
    private final OutputStream out;

    NodeLog(String path) throws IOException {
        this.out = new FileOutputStream(path, true);
    }

    /** A value with no spaces or '=' (the format splits on both). */
    static String word(String s) {
        if (s == null || s.isEmpty()) {
            return "-";
        }
        return s.replaceAll("[\\s=]+", "_");
    }

    static String bootId() {
        try {
            return new String(Files.readAllBytes(Paths.get("/proc/sys/kernel/random/boot_id")),
                    StandardCharsets.US_ASCII).trim();
        } catch (IOException e) {
            return "-";
        }
    }

    synchronized void line(String text) {
        // mono: System.nanoTime is CLOCK_MONOTONIC on Linux, the clock the harness aligns
        // a node's lines to (harness/core/events.py).
        String s = String.format("%s time=%.6f mono=%.6f%n", text,
                System.currentTimeMillis() / 1000.0, System.nanoTime() / 1e9);
        try {
            out.write(s.getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            System.err.println("node.log: " + e);
        }
    }
}
