package splitbrain.zookeeper;

import java.io.IOException;
import java.io.PrintStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.Value;

import splitbrain.shared.Frames;

/**
 * splitbrain's client gateway for real ZooKeeper: one JVM on the harness's side, one loopback port
 * per server of the ensemble, each speaking the reference node's kv protocol (a u32 big-endian
 * length, then one msgpack map; replies echo {@code rid}): {@code kv-write}, {@code kv-read},
 * {@code kv-cas}. Nothing here stores anything: every harness connection gets its own ZooKeeper
 * session, opened with a connect string naming that one server only, so a fault on the server
 * reaches exactly the clients of its port.
 *
 * <p>Register {@code key} is the znode {@code /splitbrain/<key>}, its data the msgpack bytes of
 * the value. A write is {@code setData} (created when missing); a cas is {@code getData}, then
 * {@code setData} at the version read, so the server decides it (BadVersion: certainly not
 * applied). A read is {@code sync} then {@code getData} on the same session with
 * {@code --read sync}; with {@code --read plain} it is a bare {@code getData}, which ZooKeeper
 * answers from the server's own state (sequentially consistent, not linearizable).
 *
 * <p>Codes: {@code SUCCESS}; {@code LEADER_NOT_READY} when the session was not connected and no
 * request was handed to ZooKeeper's client (certainly not applied); {@code CONNECTION_LOSS},
 * {@code SESSION_EXPIRED}, {@code OPERATION_TIMEOUT} and any other keeper code by name when a
 * request was handed over and its outcome is unknown. The watch workload's {@code watch-*}
 * requests are {@link Watches}'. Arguments: {@code --endpoint NODE=PORT=HOST:PORT
 * ... --session-ms N --read sync|plain --log FILE}. Exits when its standard input closes.
 */
public final class Gateway {
    private static final String ROOT = "/splitbrain";
    private final Map<String, String> opts = new HashMap<>();
    private final Map<String, Object[]> endpoints = new LinkedHashMap<>();
    private final AtomicInteger sessions = new AtomicInteger();
    private PrintStream log = System.err;

    public static void main(String[] args) throws Exception {
        new Gateway().run(args);
    }

    private void run(String[] args) throws Exception {
        for (String[] p : Frames.parseArgs(args, opts)) {
            endpoints.put(p[0], new Object[] {Integer.parseInt(p[1]), p[2]});
        }
        log = Frames.log(opts, log);
        String host = opts.getOrDefault("listen", "127.0.0.1");
        for (Map.Entry<String, Object[]> e : endpoints.entrySet()) {
            String node = e.getKey();
            String server = (String) e.getValue()[1];
            Frames.listen(host, (Integer) e.getValue()[0], node, s -> serve(s, node, server),
                    this::note);
        }
        note("gateway up: " + endpoints.keySet() + " read=" + readMode());
        Frames.untilStdinCloses();
        note("stdin closed: exiting");
        System.exit(0);
    }

    private String readMode() {
        return opts.getOrDefault("read", "sync");
    }

    private int intOpt(String k, int d) {
        return opts.containsKey(k) ? Integer.parseInt(opts.get(k)) : d;
    }

    private synchronized void note(String s) {
        log.println(Instant.now() + " " + s);
    }

    /** One harness connection: its own session to {@code server}, closed with the connection. */
    private void serve(Socket s, String node, String server) {
        Session session = new Session(node, server);
        try {
            Frames.serveValues(s, req -> handle(req, session, node));
        } finally {
            session.close();
        }
    }

    private static String str(Value v) {
        return v == null || v.isNilValue() ? "" : v.isStringValue() ? v.asStringValue().asString() : v.toJson();
    }

    /** A lazily opened session to one server. */
    private final class Session {
        final String node;
        final String server;
        ZooKeeper zk;
        volatile CountDownLatch connected = new CountDownLatch(1);

        Session(String node, String server) {
            this.node = node;
            this.server = server;
        }

        /** The session, connected now; null when it did not connect within the wait. */
        ZooKeeper connected(long waitMs) throws IOException, InterruptedException {
            if (zk == null) {
                CountDownLatch latch = new CountDownLatch(1);
                connected = latch;
                zk = new ZooKeeper(server, intOpt("session-ms", 6000), ev -> {
                    if (ev.getState() == org.apache.zookeeper.Watcher.Event.KeeperState.SyncConnected) {
                        latch.countDown();
                    }
                });
                sessions.incrementAndGet();
            }
            if (zk.getState() == ZooKeeper.States.CONNECTED) {
                return zk;
            }
            if (!zk.getState().isAlive()) {
                // expired or closed: a fresh session next time (nothing was sent on this one)
                close();
                return null;
            }
            connected.await(waitMs, TimeUnit.MILLISECONDS);
            return zk.getState() == ZooKeeper.States.CONNECTED ? zk : null;
        }

        void close() {
            if (zk != null) {
                try {
                    zk.close(1000);
                } catch (Exception e) {
                    // closing a session to a dead server
                }
                zk = null;
            }
        }
    }

    private Map<String, Object> handle(Map<String, Value> req, Session session, String node)
            throws Exception {
        String type = str(req.get("type"));
        Map<String, Object> r = new LinkedHashMap<>();
        if (type.equals("ping")) {
            r.put("code", "SUCCESS");
            r.put("sessions", sessions.get());
            return r;
        }
        if (type.startsWith("watch-")) {
            return watch(type, req, session);
        }
        if (!type.equals("kv-write") && !type.equals("kv-read") && !type.equals("kv-cas")) {
            r.put("code", "UNSUPPORTED");
            return r;
        }
        String key = str(req.get("key"));
        if (key.isEmpty() || key.contains("/")) {
            r.put("code", "UNSUPPORTED");
            r.put("error", "bad key " + key);
            return r;
        }
        String path = ROOT + "/" + key;
        ZooKeeper zk = session.connected(intOpt("connect-wait-ms", 2000));
        if (zk == null) {
            // no request reached ZooKeeper's client: certainly not applied
            r.put("code", "LEADER_NOT_READY");
            r.put("error", "no connected session to " + session.server);
            return r;
        }
        try {
            switch (type) {
                case "kv-write":
                    write(zk, path, pack(req.get("value")));
                    r.put("code", "SUCCESS");
                    return r;
                case "kv-read":
                    if (readMode().equals("sync")) {
                        sync(zk, path);
                    }
                    try {
                        byte[] data = zk.getData(path, false, null);
                        r.put("code", "SUCCESS");
                        r.put("found", true);
                        r.put("value", unpack(data));
                    } catch (KeeperException.NoNodeException e) {
                        r.put("code", "SUCCESS");
                        r.put("found", false);
                    }
                    return r;
                default: // kv-cas
                    Value old = req.get("old");
                    Stat stat = new Stat();
                    byte[] data;
                    try {
                        data = zk.getData(path, false, stat);
                    } catch (KeeperException.NoNodeException e) {
                        data = null;
                    }
                    Value cur = data == null ? null : unpack(data);
                    boolean match = cur == null ? old == null || old.isNilValue() : cur.equals(old);
                    if (!match || data == null) {
                        r.put("code", "SUCCESS");
                        r.put("ok", false);
                        r.put("value", cur);
                        return r;
                    }
                    try {
                        zk.setData(path, pack(req.get("new")), stat.getVersion());
                        r.put("code", "SUCCESS");
                        r.put("ok", true);
                    } catch (KeeperException.BadVersionException e) {
                        r.put("code", "SUCCESS");
                        r.put("ok", false);
                    }
                    return r;
            }
        } catch (KeeperException e) {
            // handed to the client, outcome unknown (a lost connection may hide a commit)
            r.put("code", e.code().name());
            r.put("error", String.valueOf(e.getMessage()));
            return r;
        }
    }

    /**
     * The watch workload's requests ({@link Watches}): a subscription opens a session of its
     * own to the connection's server (its watch dies with it); the others use the connection's.
     */
    private Map<String, Object> watch(String type, Map<String, Value> req, Session session)
            throws Exception {
        Watches w = new Watches(intOpt("session-ms", 6000));
        Map<String, Object> r = new LinkedHashMap<>();
        try {
            if (type.equals("watch-subscribe")) {
                return w.subscribe(session.server, req);
            }
            if (!type.equals("watch-setup") && !type.equals("watch-publish")
                    && !type.equals("watch-snapshot")) {
                r.put("code", "UNSUPPORTED");
                return r;
            }
            ZooKeeper zk = session.connected(intOpt("connect-wait-ms", 2000));
            if (zk == null) {
                // no request reached ZooKeeper's client: certainly not applied
                r.put("code", "LEADER_NOT_READY");
                r.put("error", "no connected session to " + session.server);
                return r;
            }
            switch (type) {
                case "watch-setup":
                    return w.setup(zk, req);
                case "watch-publish":
                    return w.publish(zk, req);
                default:
                    return w.snapshot(zk, req);
            }
        } catch (KeeperException e) {
            // handed to the client: a publish's outcome is unknown (a lost connection may
            // hide a commit), but NONODE and BADARGUMENTS are ZooKeeper's refusal
            r.put("code", e.code().name());
            r.put("error", String.valueOf(e.getMessage()));
            return r;
        } catch (IllegalArgumentException e) {
            r.put("code", "UNSUPPORTED");
            r.put("error", String.valueOf(e.getMessage()));
            return r;
        }
    }

    private void write(ZooKeeper zk, String path, byte[] data) throws Exception {
        try {
            zk.setData(path, data, -1);
        } catch (KeeperException.NoNodeException e) {
            try {
                zk.create(path, data, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
            } catch (KeeperException.NoNodeException parent) {
                try {
                    zk.create(ROOT, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
                } catch (KeeperException.NodeExistsException raced) {
                    // another session made it
                }
                write(zk, path, data);
            } catch (KeeperException.NodeExistsException raced) {
                zk.setData(path, data, -1);
            }
        }
    }

    /** ZooKeeper's sync, waited for: the server catches up with the leader before the read. */
    private void sync(ZooKeeper zk, String path) throws Exception {
        CountDownLatch done = new CountDownLatch(1);
        int[] rc = {Integer.MIN_VALUE};
        zk.sync(ROOT, (code, p, ctx) -> {
            rc[0] = code;
            done.countDown();
        }, null);
        if (!done.await(intOpt("sync-ms", 10000), TimeUnit.MILLISECONDS)) {
            throw KeeperException.create(KeeperException.Code.OPERATIONTIMEOUT, path);
        }
        KeeperException.Code code = KeeperException.Code.get(rc[0]);
        if (code != KeeperException.Code.OK && code != KeeperException.Code.NONODE) {
            throw KeeperException.create(code, path);
        }
    }

    // msgpack -------------------------------------------------------------------------------

    private static byte[] pack(Value v) throws IOException {
        MessageBufferPacker p = MessagePack.newDefaultBufferPacker();
        if (v == null) {
            p.packNil();
        } else {
            p.packValue(v);
        }
        p.close();
        return p.toByteArray();
    }

    private static Value unpack(byte[] data) throws IOException {
        if (data == null || data.length == 0) {
            return null;
        }
        try (MessageUnpacker u = MessagePack.newDefaultUnpacker(data)) {
            return u.unpackValue();
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
