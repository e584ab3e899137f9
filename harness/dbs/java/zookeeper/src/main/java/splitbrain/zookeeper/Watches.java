package splitbrain.zookeeper;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Op;
import org.apache.zookeeper.OpResult;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;
import org.msgpack.value.Value;

/**
 * The watch workload's requests (workloads/zk_watch.py, docs/subscriptions.md): streams are the
 * znodes {@code /splitbrain-watch/<stream>}, a value their UTF-8 data, a position a zxid.
 *
 * <ul>
 * <li>{@code watch-setup {streams}}: the root and one empty znode per stream (an empty znode is
 * no event).
 * <li>{@code watch-publish {events: [{stream, value}]}}: one event is a {@code setData}, several
 * are one {@code multi} of setData (one transaction, one zxid); answers each event's
 * {@code mzxid} from the returned stats.
 * <li>{@code watch-subscribe {streams | nil, watch_ms, connect_ms, final, quiet_ms, sync}}: a
 * session of its own to this one server, a persistent watch (one stream: {@code PERSISTENT} on
 * its znode; several or all: {@code PERSISTENT_RECURSIVE} on the root, ZooKeeper 3.6+), then a
 * read of each watched znode, then, for every notification, a read of its znode, until
 * {@code watch_ms} passed, the session lost its connection, or (final) nothing came for
 * {@code quiet_ms}. ZooKeeper's watch events carry no data, so what is answered is each read as
 * it happened ({@code reads}: [stream, value or nil, mzxid, why]); which reads are events is the
 * harness's translation (zk_watch.py), not decided here.
 * <li>{@code watch-snapshot}: {@code sync}, then each stream's data and mzxid.
 * </ul>
 *
 * <p>The subscription ends at the first disconnection: on reconnect ZooKeeper re-registers a
 * persistent watch without replaying what changed meanwhile, so a subscription is one connected
 * stretch of one session, and its reads are that session's (never older than one another).
 */
final class Watches {
    static final String ROOT = "/splitbrain-watch";
    private final int sessionMs;

    Watches(int sessionMs) {
        this.sessionMs = sessionMs;
    }

    static String path(String stream) {
        if (stream == null || stream.isEmpty() || stream.contains("/")) {
            throw new IllegalArgumentException("bad stream " + stream);
        }
        return ROOT + "/" + stream;
    }

    /** The stream of a watched path, null for the root or anything deeper. */
    static String streamOf(String path) {
        if (path == null || !path.startsWith(ROOT + "/")) {
            return null;
        }
        String rest = path.substring(ROOT.length() + 1);
        return rest.isEmpty() || rest.contains("/") ? null : rest;
    }

    private static String str(Value v) {
        return v == null || v.isNilValue() ? null
                : v.isStringValue() ? v.asStringValue().asString()
                : v.isBinaryValue() ? new String(v.asBinaryValue().asByteArray(), StandardCharsets.UTF_8)
                : v.toJson();
    }

    private static long num(Value v, long d) {
        return v == null || !v.isIntegerValue() ? d : v.asIntegerValue().toLong();
    }

    /** A list of stream names; null for nil (every stream). */
    static List<String> streams(Value v) {
        if (v == null || v.isNilValue()) {
            return null;
        }
        List<String> out = new ArrayList<>();
        for (Value x : v.asArrayValue().list()) {
            out.add(str(x));
        }
        return out;
    }

    private static Map<String, Object> ok() {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("code", "SUCCESS");
        return r;
    }

    private static void ensure(ZooKeeper zk, String p) throws KeeperException, InterruptedException {
        try {
            zk.create(p, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        } catch (KeeperException.NodeExistsException e) {
            // made before, or by another session
        }
    }

    Map<String, Object> setup(ZooKeeper zk, Map<String, Value> req) throws Exception {
        ensure(zk, ROOT);
        List<String> names = streams(req.get("streams"));
        if (names != null) {
            for (String s : names) {
                ensure(zk, path(s));
            }
        }
        return ok();
    }

    Map<String, Object> publish(ZooKeeper zk, Map<String, Value> req) throws Exception {
        List<String> paths = new ArrayList<>();
        List<byte[]> data = new ArrayList<>();
        for (Value e : req.get("events").asArrayValue().list()) {
            Map<Value, Value> m = e.asMapValue().map();
            Value stream = null;
            Value value = null;
            for (Map.Entry<Value, Value> kv : m.entrySet()) {
                String k = str(kv.getKey());
                if ("stream".equals(k)) {
                    stream = kv.getValue();
                } else if ("value".equals(k)) {
                    value = kv.getValue();
                }
            }
            paths.add(path(str(stream)));
            data.add(str(value).getBytes(StandardCharsets.UTF_8));
        }
        List<Long> zxids = new ArrayList<>();
        if (paths.size() == 1) {
            zxids.add(setOne(zk, paths.get(0), data.get(0)).getMzxid());
        } else {
            List<Op> ops = new ArrayList<>();
            for (int i = 0; i < paths.size(); i++) {
                ops.add(Op.setData(paths.get(i), data.get(i), -1));
            }
            List<OpResult> res;
            try {
                res = zk.multi(ops);
            } catch (KeeperException.NoNodeException missing) {
                // a multi with a missing znode is refused whole: make them, then the same multi
                ensure(zk, ROOT);
                for (String p : paths) {
                    ensure(zk, p);
                }
                res = zk.multi(ops);
            }
            for (OpResult r : res) {
                zxids.add(((OpResult.SetDataResult) r).getStat().getMzxid());
            }
        }
        Map<String, Object> r = ok();
        r.put("zxids", zxids);
        return r;
    }

    private static Stat setOne(ZooKeeper zk, String p, byte[] data) throws Exception {
        try {
            return zk.setData(p, data, -1);
        } catch (KeeperException.NoNodeException e) {
            ensure(zk, ROOT);
            Stat st = new Stat();
            try {
                zk.create(p, data, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT, st);
                return st;
            } catch (KeeperException.NodeExistsException raced) {
                return zk.setData(p, data, -1);
            }
        }
    }

    /** ZooKeeper's sync of the root, waited for at most {@code ms}. */
    static void sync(ZooKeeper zk, long ms) throws Exception {
        CountDownLatch done = new CountDownLatch(1);
        int[] rc = {Integer.MIN_VALUE};
        zk.sync(ROOT, (code, p, ctx) -> {
            rc[0] = code;
            done.countDown();
        }, null);
        if (!done.await(ms, TimeUnit.MILLISECONDS)) {
            throw KeeperException.create(KeeperException.Code.OPERATIONTIMEOUT, ROOT);
        }
        KeeperException.Code code = KeeperException.Code.get(rc[0]);
        if (code != KeeperException.Code.OK && code != KeeperException.Code.NONODE) {
            throw KeeperException.create(code, ROOT);
        }
    }

    private static List<String> children(ZooKeeper zk) throws Exception {
        try {
            List<String> c = new ArrayList<>(zk.getChildren(ROOT, false));
            c.sort(null);
            return c;
        } catch (KeeperException.NoNodeException e) {
            return new ArrayList<>();
        }
    }

    Map<String, Object> snapshot(ZooKeeper zk, Map<String, Value> req) throws Exception {
        sync(zk, num(req.get("sync_ms"), 10000));
        Map<String, Object> streams = new LinkedHashMap<>();
        for (String s : children(zk)) {
            Stat st = new Stat();
            byte[] data;
            try {
                data = zk.getData(path(s), false, st);
            } catch (KeeperException.NoNodeException e) {
                continue;
            }
            if (data == null || data.length == 0) {
                continue; // made by setup, never published
            }
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("value", new String(data, StandardCharsets.UTF_8));
            one.put("pos", st.getMzxid());
            streams.put(s, one);
        }
        Map<String, Object> r = ok();
        r.put("streams", streams);
        return r;
    }

    /** One read of a stream's znode as [stream, value or nil, mzxid, why]. */
    private static List<Object> read(ZooKeeper zk, String stream, String why) throws Exception {
        List<Object> row = new ArrayList<>();
        row.add(stream);
        Stat st = new Stat();
        try {
            byte[] data = zk.getData(path(stream), false, st);
            row.add(data == null || data.length == 0 ? null : new String(data, StandardCharsets.UTF_8));
            row.add(st.getMzxid());
        } catch (KeeperException.NoNodeException e) {
            row.add(null);
            row.add(0L);
        }
        row.add(why);
        return row;
    }

    Map<String, Object> subscribe(String server, Map<String, Value> req) throws Exception {
        List<String> names = streams(req.get("streams"));
        long watchMs = num(req.get("watch_ms"), 1000);
        long connectMs = num(req.get("connect_ms"), 2000);
        long quietMs = num(req.get("quiet_ms"), 0);
        boolean fin = req.get("final") != null && req.get("final").isBooleanValue()
                && req.get("final").asBooleanValue().getBoolean();
        boolean doSync = req.get("sync") != null && req.get("sync").isBooleanValue()
                && req.get("sync").asBooleanValue().getBoolean();
        Set<String> watched = names == null ? null : new LinkedHashSet<>(names);
        BlockingQueue<WatchedEvent> events = new LinkedBlockingQueue<>();
        CountDownLatch connected = new CountDownLatch(1);
        Watcher w = ev -> {
            if (ev.getType() == Watcher.Event.EventType.None
                    && ev.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
            events.add(ev);
        };
        ZooKeeper zk = new ZooKeeper(server, sessionMs, w);
        Map<String, Object> r = new LinkedHashMap<>();
        List<Object> reads = new ArrayList<>();
        int notifications = 0;
        String ended = null;
        try {
            if (!connected.await(connectMs, TimeUnit.MILLISECONDS)) {
                r.put("code", "LEADER_NOT_READY");
                r.put("error", "no session to " + server + " within " + connectMs + " ms");
                return r;
            }
            boolean one = names != null && names.size() == 1;
            try {
                zk.addWatch(one ? path(names.get(0)) : ROOT,
                        one ? AddWatchMode.PERSISTENT : AddWatchMode.PERSISTENT_RECURSIVE);
            } catch (KeeperException e) {
                r.put("code", e.code().name());
                r.put("error", "addWatch: " + e.getMessage());
                return r;
            }
            long deadline = System.currentTimeMillis() + watchMs;
            try {
                if (doSync) {
                    sync(zk, Math.max(1, deadline - System.currentTimeMillis()));
                }
                for (String s : names == null ? children(zk) : names) {
                    reads.add(read(zk, s, "initial"));
                }
                long lastNews = System.currentTimeMillis();
                while (true) {
                    long now = System.currentTimeMillis();
                    if (now >= deadline) {
                        break;
                    }
                    if (fin && quietMs > 0 && now - lastNews >= quietMs) {
                        break;
                    }
                    WatchedEvent ev = events.poll(Math.min(100, deadline - now), TimeUnit.MILLISECONDS);
                    if (ev == null) {
                        continue;
                    }
                    if (ev.getType() == Watcher.Event.EventType.None) {
                        Watcher.Event.KeeperState st = ev.getState();
                        if (st != Watcher.Event.KeeperState.SyncConnected) {
                            ended = "session " + st;
                            break;
                        }
                        continue;
                    }
                    String s = streamOf(ev.getPath());
                    if (s == null || (watched != null && !watched.contains(s))) {
                        continue;
                    }
                    if (ev.getType() != Watcher.Event.EventType.NodeDataChanged
                            && ev.getType() != Watcher.Event.EventType.NodeCreated) {
                        continue; // deleted, or a type a persistent watch does not send
                    }
                    notifications++;
                    lastNews = System.currentTimeMillis();
                    reads.add(read(zk, s, ev.getType().name()));
                }
            } catch (KeeperException e) {
                // the reads so far were made; the subscription ends here
                ended = e.code().name() + ": " + e.getMessage();
            }
        } finally {
            try {
                zk.close(500);
            } catch (Exception e) {
                // a session to a server that is gone
            }
        }
        r.put("code", "SUCCESS");
        r.put("reads", reads);
        r.put("notifications", notifications);
        r.put("ended", ended);
        return r;
    }
}
