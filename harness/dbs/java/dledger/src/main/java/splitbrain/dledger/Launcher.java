package splitbrain.dledger;

import io.openmessaging.storage.dledger.DLedgerConfig;
import io.openmessaging.storage.dledger.DLedgerServer;
import io.openmessaging.storage.dledger.MemberState;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.protocol.AppendEntryRequest;
import io.openmessaging.storage.dledger.protocol.AppendEntryResponse;
import io.openmessaging.storage.dledger.protocol.DLedgerResponseCode;
import io.openmessaging.storage.dledger.protocol.GetEntriesRequest;
import io.openmessaging.storage.dledger.protocol.GetEntriesResponse;
import io.openmessaging.storage.dledger.store.DLedgerStore;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Starts DLedger's own {@link DLedgerServer} as DLedger's main class does (a
 * {@link DLedgerConfig} filled from the command line, {@code new DLedgerServer(config)},
 * {@code startup()}), and in the same JVM the splitbrain client endpoint
 * ({@link Endpoint}) and the role watcher that writes {@code node.log}.
 *
 * <p>Options ({@code --name value}): {@code --group --id --peers --store-base-dir} as
 * DLedger's own main class takes them; {@code --client-host --client-port} for the endpoint;
 * {@code --event-log} for node.log; timing: {@code --heartbeat-ms --max-heartbeat-leak
 * --min-vote-ms --max-vote-ms --max-wait-ack-ms}.
 *
 * <p>Only API present in every DLedger release from 0.1 on is called directly; what moved
 * between releases (the committed index, the log's first index, leadership transfer) is
 * reached by reflection in {@link Compat}.
 */
public final class Launcher {
    private Launcher() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        DLedgerConfig config = new DLedgerConfig();
        config.setGroup(need(args, "group"));
        config.setSelfId(need(args, "id"));
        config.setPeers(need(args, "peers"));
        config.setStoreBaseDir(need(args, "store-base-dir"));
        config.setStoreType("file");
        // Small segments: five nodes share one disk (and a lazy fs may sit under it).
        config.setMappedFileSizeForEntryData(intArg(args, "data-file-bytes", 64 << 20));
        config.setMappedFileSizeForEntryIndex(32 * intArg(args, "index-file-entries", 1 << 20));
        config.setHeartBeatTimeIntervalMs(intArg(args, "heartbeat-ms", 2000));
        config.setMaxHeartBeatLeak(intArg(args, "max-heartbeat-leak", 3));
        config.setMinVoteIntervalMs(intArg(args, "min-vote-ms", 300));
        config.setMaxVoteIntervalMs(intArg(args, "max-vote-ms", 1000));
        config.setMaxWaitAckTimeMs(intArg(args, "max-wait-ack-ms", 2500));

        String incarnation = ProcessHandle.current().pid() + "-" + System.nanoTime();
        EventLog events = new EventLog(args.get("event-log"));

        DLedgerServer server = new DLedgerServer(config);
        server.startup();
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdown, "dledger-shutdown"));

        Compat compat = new Compat(server);
        events.line("INFO event=start id=" + config.getSelfId() + " incarnation=" + incarnation
            + " term=" + server.getMemberState().currTerm() + " version=" + Compat.version()
            + " boot=" + bootId());
        Thread watcher = new Thread(new RoleWatcher(server.getMemberState(), events), "role-watcher");
        watcher.setDaemon(true);
        watcher.start();

        Endpoint endpoint = new Endpoint(server, compat, config, incarnation,
            args.getOrDefault("client-host", "0.0.0.0"), intArg(args, "client-port", 9101));
        System.err.println("splitbrain endpoint on " + endpoint.describe() + " for DLedger "
            + Compat.version() + " member " + config.getSelfId());
        endpoint.serve();
    }

    static String bootId() {
        try {
            return new String(Files.readAllBytes(Paths.get("/proc/sys/kernel/random/boot_id")),
                StandardCharsets.US_ASCII).trim();
        } catch (IOException e) {
            return "-";
        }
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + a);
            }
            int eq = a.indexOf('=');
            if (eq > 0) {
                out.put(a.substring(2, eq), a.substring(eq + 1));
            } else if (i + 1 < argv.length) {
                out.put(a.substring(2), argv[++i]);
            } else {
                throw new IllegalArgumentException(a + " needs a value");
            }
        }
        return out;
    }

    private static String need(Map<String, String> args, String name) {
        String v = args.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    private static int intArg(Map<String, String> args, String name, int dflt) {
        String v = args.get(name);
        return v == null ? dflt : Integer.parseInt(v);
    }

    /** node.log in the reference node's line format (harness/dbs/nodelog_events.py). */
    static final class EventLog {
        private final PrintStream out;

        EventLog(String path) throws IOException {
            out = path == null ? null : new PrintStream(new FileOutputStream(path, true), true, "UTF-8");
        }

        synchronized void line(String text) {
            if (out == null) {
                return;
            }
            double wall = System.currentTimeMillis() / 1000.0;
            double mono = System.nanoTime() / 1e9;
            out.printf("%s time=%.6f mono=%.6f%n", text, wall, mono);
        }
    }

    /**
     * Polls DLedger's {@link MemberState} (under its own monitor, which its role changes
     * hold) and writes a ROLE line on every change of (term, role, leader).
     */
    static final class RoleWatcher implements Runnable {
        private final MemberState state;
        private final EventLog log;

        RoleWatcher(MemberState state, EventLog log) {
            this.state = state;
            this.log = log;
        }

        @Override
        public void run() {
            String last = null;
            while (true) {
                Snapshot s = Snapshot.of(state);
                String now = "term=" + s.term + " role=" + s.role + " leader=" + (s.leader == null ? "-" : s.leader);
                if (!now.equals(last)) {
                    log.line("ROLE " + now);
                    last = now;
                }
                try {
                    Thread.sleep(5);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }

    /** Role, term and leader read together: DLedger changes them under the MemberState monitor. */
    static final class Snapshot {
        final String role;
        final long term;
        final String leader;

        private Snapshot(String role, long term, String leader) {
            this.role = role;
            this.term = term;
            this.leader = leader;
        }

        static Snapshot of(MemberState st) {
            synchronized (st) {
                return new Snapshot(st.getRole().name().toLowerCase(), st.currTerm(), st.getLeaderId());
            }
        }
    }

    /** What moved between DLedger releases, found by reflection once. */
    static final class Compat {
        final DLedgerServer server;
        final DLedgerStore store;
        private final Method committedOnState;
        private final Method committedOnStore;
        private final Method beginIndex;
        private final Method beforeBeginIndex;
        final Class<?> transferRequest;
        private final Method transfer;

        Compat(DLedgerServer server) {
            this.server = server;
            this.store = server.getdLedgerStore();
            committedOnState = method(MemberState.class, "getCommittedIndex");
            committedOnStore = method(DLedgerStore.class, "getCommittedIndex");
            beginIndex = method(DLedgerStore.class, "getLedgerBeginIndex");
            beforeBeginIndex = method(DLedgerStore.class, "getLedgerBeforeBeginIndex");
            Class<?> req;
            try {
                req = Class.forName("io.openmessaging.storage.dledger.protocol.LeadershipTransferRequest");
            } catch (ClassNotFoundException e) {
                req = null;
            }
            transferRequest = req;
            transfer = req == null ? null : method(server.getClass(), "handleLeadershipTransfer", req);
        }

        static String version() {
            Package p = DLedgerServer.class.getPackage();
            String v = p == null ? null : p.getImplementationVersion();
            return v == null ? System.getProperty("splitbrain.dledger.version", "unknown") : v;
        }

        private static Method method(Class<?> c, String name, Class<?>... params) {
            try {
                return c.getMethod(name, params);
            } catch (NoSuchMethodException e) {
                return null;
            }
        }

        long committedIndex() {
            try {
                if (committedOnState != null) {
                    return (Long) committedOnState.invoke(server.getMemberState());
                }
                return (Long) committedOnStore.invoke(store);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }

        long beginIndex() {
            try {
                if (beginIndex != null) {
                    return (Long) beginIndex.invoke(store);
                }
                return (Long) beforeBeginIndex.invoke(store) + 1;
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }

        boolean canTransfer() {
            return transfer != null;
        }

        /** DLedger's own leadership transfer, asked of this (leader) member. */
        CompletableFuture<?> transfer(String self, String group, String target, long term)
            throws Exception {
            Object req = transferRequest.getConstructor().newInstance();
            transferRequest.getMethod("setGroup", String.class).invoke(req, group);
            transferRequest.getMethod("setRemoteId", String.class).invoke(req, self);
            transferRequest.getMethod("setLocalId", String.class).invoke(req, self);
            transferRequest.getMethod("setTransferId", String.class).invoke(req, self);
            transferRequest.getMethod("setTransfereeId", String.class).invoke(req, target);
            transferRequest.getMethod("setTerm", long.class).invoke(req, term);
            return (CompletableFuture<?>) transfer.invoke(server, req);
        }

        static int code(Object response) throws ReflectiveOperationException {
            return (Integer) response.getClass().getMethod("getCode").invoke(response);
        }
    }

    static String codeName(int code) {
        DLedgerResponseCode c = DLedgerResponseCode.valueOf(code);
        return c == null ? "CODE_" + code : c.name();
    }

    static AppendEntryResponse append(DLedgerServer server, String group, String self, byte[] body,
                                      long waitMs) throws Exception {
        AppendEntryRequest req = new AppendEntryRequest();
        req.setGroup(group);
        req.setRemoteId(self);
        req.setBody(body);
        CompletableFuture<AppendEntryResponse> f = server.handleAppend(req);
        return f.get(waitMs, TimeUnit.MILLISECONDS);
    }

    static GetEntriesResponse get(DLedgerServer server, String group, String self, long index)
        throws Exception {
        GetEntriesRequest req = new GetEntriesRequest();
        req.setGroup(group);
        req.setRemoteId(self);
        req.setBeginIndex(index);
        return server.handleGet(req).get(5, TimeUnit.SECONDS);
    }

    static List<DLedgerEntry> entries(GetEntriesResponse r) {
        List<DLedgerEntry> e = r.getEntries();
        return e == null ? new ArrayList<>() : e;
    }
}
