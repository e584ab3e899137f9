package splitbrain.jraft;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import org.msgpack.value.Value;

import com.alipay.sofa.jraft.Closure;
import com.alipay.sofa.jraft.Node;
import com.alipay.sofa.jraft.RaftGroupService;
import com.alipay.sofa.jraft.Status;
import com.alipay.sofa.jraft.closure.ReadIndexClosure;
import com.alipay.sofa.jraft.conf.Configuration;
import com.alipay.sofa.jraft.entity.PeerId;
import com.alipay.sofa.jraft.entity.Task;
import com.alipay.sofa.jraft.error.RaftError;
import com.alipay.sofa.jraft.option.NodeOptions;
import com.alipay.sofa.jraft.option.RaftOptions;
import com.alipay.sofa.jraft.option.ReadOnlyOption;

/**
 * A linearizable kv server on one SOFAJRaft node, answering the reference node's client
 * protocol (node_impl/server.py) so every workload, sampler and checker of splitbrain drives
 * it unchanged.
 *
 * <p>What is JRaft's: elections, replication, the log (RocksDB) and raft meta files, ReadIndex
 * and lease reads, membership changes and leadership transfer. What is ours: the map
 * ({@link KvFsm}), the client port, the naming of members ({@code n3} is {@code ip:port:0},
 * a host re-added wiped runs {@code n3.1} = {@code ip:port:1}, a new JRaft identity), and
 * node.log ({@link NodeLog}), the role/term/vote lines coverage reads, from JRaft's state
 * polled every few milliseconds (JRaft calls back leader and follower changes, not votes).
 *
 * <p>Arguments: {@code --id IDENT --nodes n1=IP:RAFTPORT:CLIENTPORT,... --conf IDENT,...|-
 * --data DIR --log FILE [--read index|lease] [--election-ms N] [--sync-meta true|false]}.
 */
public final class Server {
    private final Map<String, String[]> nodes = new LinkedHashMap<>(); // name -> ip, raft, client
    private final String ident;
    private final String incarnation;
    private final NodeLog log;
    private final ExecutorService slow = Executors.newCachedThreadPool();
    private KvFsm fsm;
    private Node node;
    private Introspect look;

    private Server(Map<String, String> args) throws IOException {
        this.ident = args.get("id");
        for (String item : args.get("nodes").split(",")) {
            String[] kv = item.split("=", 2);
            nodes.put(kv[0], kv[1].split(":"));
        }
        this.incarnation = ProcessHandle.current().pid() + "-" + System.currentTimeMillis();
        this.log = new NodeLog(args.get("log"));
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        for (String need : new String[] {"id", "nodes", "conf", "data", "log"}) {
            if (!args.containsKey(need)) {
                System.err.println("missing --" + need);
                System.exit(2);
            }
        }
        new Server(args).run(args);
    }

    // identities ------------------------------------------------------------------------

    PeerId peerOf(String id) {
        String name = id;
        int gen = 0;
        int dot = id.lastIndexOf('.');
        if (dot > 0 && id.substring(dot + 1).matches("\\d+")) {
            name = id.substring(0, dot);
            gen = Integer.parseInt(id.substring(dot + 1));
        }
        String[] n = nodes.get(name);
        if (n == null) {
            return null;
        }
        return new PeerId(n[0], Integer.parseInt(n[1]), gen);
    }

    /** The member id of a JRaft peer (null for none; ip:port:idx when no node is there). */
    String identOf(PeerId p) {
        if (p == null || p.isEmpty()) {
            return null;
        }
        for (Map.Entry<String, String[]> e : nodes.entrySet()) {
            String[] n = e.getValue();
            if (n[0].equals(p.getIp()) && Integer.parseInt(n[1]) == p.getPort()) {
                return p.getIdx() == 0 ? e.getKey() : e.getKey() + "." + p.getIdx();
            }
        }
        return p.toString();
    }

    private String clientAddr(PeerId p) {
        for (String[] n : nodes.values()) {
            if (n[0].equals(p.getIp()) && Integer.parseInt(n[1]) == p.getPort()) {
                return n[0] + ":" + n[2];
            }
        }
        return null;
    }

    // start -----------------------------------------------------------------------------

    private void run(Map<String, String> args) throws Exception {
        PeerId self = peerOf(ident);
        if (self == null) {
            System.err.println("--id " + ident + " names no node of --nodes");
            System.exit(2);
        }
        String[] me = nodes.get(identOf(new PeerId(self.getIp(), self.getPort(), 0)));
        String data = args.get("data");
        Files.createDirectories(Paths.get(data));
        Configuration conf = new Configuration();
        if (!"-".equals(args.get("conf"))) {
            for (String id : args.get("conf").split(",")) {
                conf.addPeer(peerOf(id));
            }
        }
        NodeOptions opts = new NodeOptions();
        opts.setElectionTimeoutMs(Integer.parseInt(args.getOrDefault("election-ms", "1000")));
        opts.setInitialConf(conf);
        opts.setLogUri(data + "/log");
        opts.setRaftMetaUri(data + "/meta");
        fsm = new KvFsm(log, this);
        opts.setFsm(fsm);
        RaftOptions raft = new RaftOptions();
        raft.setReadOnlyOptions("lease".equals(args.get("read"))
                ? ReadOnlyOption.ReadOnlyLeaseBased : ReadOnlyOption.ReadOnlySafe);
        if (args.containsKey("sync-meta")) {
            raft.setSyncMeta(Boolean.parseBoolean(args.get("sync-meta")));
        }
        opts.setRaftOptions(raft);
        RaftGroupService group = new RaftGroupService("splitbrain", self, opts);
        node = group.start();
        if (node == null) {
            System.err.println("JRaft node did not start");
            System.exit(1);
        }
        look = new Introspect(node);
        log.line("INFO event=start id=" + ident + " incarnation=" + incarnation + " term="
                + look.term() + " boot=" + NodeLog.bootId() + " read=" + args.getOrDefault("read", "index"));
        Thread poller = new Thread(this::pollLoop, "splitbrain-nodelog");
        poller.setDaemon(true);
        poller.start();
        ServerSocket ss = new ServerSocket();
        ss.setReuseAddress(true);
        ss.bind(new InetSocketAddress(me[0], Integer.parseInt(me[2])));
        System.out.println("splitbrain jraft kv " + ident + " serving " + me[0] + ":" + me[2]);
        System.out.flush();
        while (true) {
            Socket s = ss.accept();
            Thread t = new Thread(() -> serve(s), "client-" + s.getRemoteSocketAddress());
            t.setDaemon(true);
            t.start();
        }
    }

    // node.log --------------------------------------------------------------------------

    private String lastRole = "";
    private long lastVoteTerm = -1;
    private String lastVote = null;
    private long lastCandidacy = -1;

    private volatile Thread poller;

    /**
     * Called from the state machine's leader/follower callbacks (JRaft's FSM thread): wakes
     * the poller, which logs the change at once. Never reads the node here: the poller
     * takes NodeImpl's read lock, which this thread must not wait for.
     */
    void observe(String what) {
        Thread t = poller;
        if (t != null) {
            java.util.concurrent.locks.LockSupport.unpark(t);
        }
    }

    private void pollLoop() {
        poller = Thread.currentThread();
        while (true) {
            poll();
            java.util.concurrent.locks.LockSupport.parkNanos(10_000_000L);
        }
    }

    private synchronized void poll() {
        if (look == null) {
            return;
        }
        Introspect.Snap snap = look.snap(node);
        long term = snap.term;
        String role = snap.role;
        String leader = identOf(snap.leader);
        String key = term + " " + role + " " + leader;
        if (!key.equals(lastRole)) {
            lastRole = key;
            log.line("ROLE term=" + term + " role=" + role + " leader=" + NodeLog.word(leader));
        }
        if ("candidate".equals(role) && term != lastCandidacy) {
            lastCandidacy = term;
            log.line("INFO event=candidacy term=" + term);
        }
        String voted = identOf(snap.voted);
        if (voted != null && (term != lastVoteTerm || !voted.equals(lastVote))) {
            lastVoteTerm = term;
            lastVote = voted;
            log.line("INFO event=vote term=" + term + " candidate=" + NodeLog.word(voted));
        }
    }

    // the client port -------------------------------------------------------------------

    private void serve(Socket s) {
        try {
            s.setTcpNoDelay(true);
            DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            OutputStream out = s.getOutputStream();
            while (true) {
                Map<String, Value> msg = Wire.readFrame(in);
                if (msg == null) {
                    break;
                }
                Reply r = new Reply(out, msg);
                try {
                    handle(msg, r);
                } catch (RuntimeException e) {
                    r.code("UNSUPPORTED", e.toString());
                }
            }
        } catch (IOException e) {
            // the client went away; its pending replies are dropped by Reply
        } finally {
            try {
                s.close();
            } catch (IOException e) {
                // closed already
            }
        }
    }

    /** One request's answer: written once, with the request's rid and type. */
    static final class Reply {
        private final OutputStream out;
        private final Value rid;
        final String type;
        private boolean sent;

        Reply(OutputStream out, Map<String, Value> msg) {
            this.out = out;
            this.rid = msg.get("rid");
            Value t = msg.get("type");
            this.type = t != null && t.isStringValue() ? t.asStringValue().asString() : "?";
        }

        void send(Map<String, Object> body) {
            body.putIfAbsent("type", type + "-resp");
            body.put("rid", rid);
            synchronized (out) {
                if (sent) {
                    return;
                }
                sent = true;
                try {
                    out.write(Wire.frame(body));
                    out.flush();
                } catch (IOException e) {
                    // the client is gone
                }
            }
        }

        void code(String code, String error) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("code", code);
            if (error != null) {
                m.put("error", error);
            }
            send(m);
        }
    }

    private static String str(Map<String, Value> msg, String k) {
        Value v = msg.get(k);
        return v != null && v.isStringValue() ? v.asStringValue().asString() : null;
    }

    private void handle(Map<String, Value> msg, Reply r) throws RuntimeException {
        switch (r.type) {
            case "status":
                Map<String, Object> st = status();
                st.put("code", "SUCCESS");
                r.send(st);
                return;
            case "members":
                Map<String, Object> m = members();
                m.put("code", "SUCCESS");
                r.send(m);
                return;
            case "kv-write":
            case "kv-cas":
                write(msg, r);
                return;
            case "kv-read":
                read(msg, r);
                return;
            case "add-member":
            case "remove-member":
                change(msg, r);
                return;
            case "transfer-leader":
                slow.execute(() -> transfer(msg, r));
                return;
            default:
                r.code("UNSUPPORTED", "unknown request type " + r.type);
        }
    }

    private void redirect(Reply r) {
        Map<String, Object> m = new LinkedHashMap<>();
        PeerId lead = node.getLeaderId();
        m.put("type", "redirect");
        m.put("code", "NOT_LEADER");
        m.put("leader", identOf(lead));
        m.put("leader_addr", lead == null || lead.isEmpty() ? null : clientAddr(lead));
        r.send(m);
    }

    private void write(Map<String, Value> msg, Reply r) {
        String key = str(msg, "key");
        if (key == null) {
            r.code("UNSUPPORTED", "'key' must be a string");
            return;
        }
        byte[] entry;
        try {
            entry = "kv-write".equals(r.type)
                    ? Wire.entry(KvFsm.PUT, key, Wire.encode(msg.get("value")))
                    : Wire.entry(KvFsm.CAS, key, Wire.encode(msg.get("old")), Wire.encode(msg.get("new")));
        } catch (IOException e) {
            r.code("UNSUPPORTED", e.toString());
            return;
        }
        if (!node.isLeader()) {
            redirect(r); // nothing was proposed: a certain failure
            return;
        }
        KvFsm.Op done = new KvFsm.Op() {
            @Override
            public void run(Status status) {
                if (!status.isOk()) {
                    // EBUSY: the apply queue refused it (never appended). Anything else may
                    // have been appended before this node stopped leading: unknown outcome.
                    r.code(status.getRaftError() == RaftError.EBUSY ? "LEADER_PENDING_FULL" : "TERM_CHANGED",
                            status.toString());
                    return;
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("code", "SUCCESS");
                m.put("index", result.index);
                m.put("term", result.term);
                if ("kv-cas".equals(r.type)) {
                    m.put("ok", result.ok);
                    m.put("value", result.value == null ? null : Wire.raw(result.value));
                }
                r.send(m);
            }
        };
        node.apply(new Task(ByteBuffer.wrap(entry), done));
    }

    private void read(Map<String, Value> msg, Reply r) {
        String key = str(msg, "key");
        if (key == null) {
            r.code("UNSUPPORTED", "'key' must be a string");
            return;
        }
        if (!node.isLeader()) {
            redirect(r);
            return;
        }
        node.readIndex(new byte[0], new ReadIndexClosure() {
            @Override
            public void run(Status status, long index, byte[] ctx) {
                if (!status.isOk()) {
                    log.line("INFO event=read-refused why=read-index code=" + status.getRaftError()
                            + " term=" + look.term() + " role=" + look.role());
                    r.code("LEADER_NOT_READY", status.toString());
                    return;
                }
                // JRaft runs this once the state machine has applied up to index.
                byte[] v = fsm.data.get(key);
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("code", "SUCCESS");
                m.put("found", v != null);
                m.put("value", v == null ? null : Wire.raw(v));
                m.put("readIndex", index);
                r.send(m);
            }
        });
    }

    private void change(Map<String, Value> msg, Reply r) {
        String id = str(msg, "id");
        PeerId peer = id == null ? null : peerOf(id);
        if (peer == null) {
            r.code("UNSUPPORTED", "'id' names no node of this cluster: " + id);
            return;
        }
        if (!node.isLeader()) {
            redirect(r);
            return;
        }
        Closure done = status -> {
            if (status.isOk()) {
                Map<String, Object> m = members();
                m.put("code", "SUCCESS");
                r.send(m);
            } else if (status.getRaftError() == RaftError.EBUSY) {
                r.code("CONFIG_CHANGE_PENDING", status.toString());
            } else if (status.getRaftError() == RaftError.EPERM) {
                r.code("TERM_CHANGED", status.toString());
            } else {
                r.code("CHANGE_FAILED:" + status.getRaftError(), status.toString());
            }
        };
        if ("add-member".equals(r.type)) {
            node.addPeer(peer, done);
        } else {
            node.removePeer(peer, done);
        }
    }

    private void transfer(Map<String, Value> msg, Reply r) {
        String id = str(msg, "id");
        PeerId peer = id == null ? null : peerOf(id);
        Value ms = msg.get("timeout_ms");
        long timeout = ms != null && ms.isIntegerValue() ? ms.asIntegerValue().toLong() : 3000;
        if (peer == null) {
            r.code("UNSUPPORTED", "'id' names no node of this cluster: " + id);
            return;
        }
        if (!node.isLeader()) {
            redirect(r);
            return;
        }
        long term = look.term();
        Status st = node.transferLeadershipTo(peer);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("term", term);
        if (!st.isOk()) {
            m.put("code", "TRANSFER_REFUSED");
            m.put("error", st.toString());
            m.put("leader", identOf(node.getLeaderId()));
            r.send(m);
            return;
        }
        PeerId self = peerOf(ident);
        long deadline = System.nanoTime() + timeout * 1_000_000L;
        String code = null;
        while (System.nanoTime() < deadline) {
            PeerId lead = node.getLeaderId();
            if (peer.equals(lead)) {
                code = "SUCCESS";
                break;
            }
            if (lead != null && !lead.isEmpty() && !lead.equals(self)) {
                code = "TRANSFER_FAILED"; // a third member leads now
                break;
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                break;
            }
        }
        if (code == null) {
            // JRaft gives the transfer an election timeout, then resumes leading if the
            // target never took over: kept when we lead again in the same term, else lost.
            code = "leader".equals(look.role()) && look.term() == term ? "TRANSFER_TIMEOUT"
                    : "TRANSFER_FAILED";
        }
        m.put("code", code);
        m.put("leader", identOf(node.getLeaderId()));
        m.put("newTerm", look.term());
        r.send(m);
    }

    // views -----------------------------------------------------------------------------

    private Map<String, Object> peers(Collection<PeerId> ps) {
        Map<String, Object> out = new LinkedHashMap<>();
        if (ps != null) {
            for (PeerId p : ps) {
                out.put(identOf(p), p.getIp() + ":" + p.getPort());
            }
        }
        return out;
    }

    private Map<String, Object> config() {
        Map<String, Object> m = new LinkedHashMap<>();
        Object[] c = look.conf();
        m.put("voters", peers(c == null ? null : cast(c[0])));
        m.put("learners", peers(c == null ? null : cast(c[1])));
        m.put("configIndex", c == null ? null : c[2]);
        m.put("pending", c != null && Boolean.TRUE.equals(c[3]));
        return m;
    }

    @SuppressWarnings("unchecked")
    private static Collection<PeerId> cast(Object o) {
        return (Collection<PeerId>) o;
    }

    private Map<String, Object> status() {
        Map<String, Object> m = new LinkedHashMap<>();
        Introspect.Snap snap = look.snap(node);
        m.put("id", ident);
        m.put("role", snap.role);
        m.put("term", snap.term);
        m.put("leader", identOf(snap.leader));
        // committed first: an index committed then is never truncated, so end read after it
        // is at least as high (no false committed-beyond-end from a torn look)
        long committed = look.committed();
        m.put("ledgerBeginIndex", look.firstLogIndex());
        m.put("ledgerEndIndex", look.lastLogIndex());
        m.put("committedIndex", committed);
        m.put("appliedIndex", look.applied());
        m.put("votedFor", identOf(snap.voted));
        m.put("incarnation", incarnation);
        m.put("mode", "jraft");
        m.put("config", config());
        return m;
    }

    private Map<String, Object> members() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", ident);
        m.put("leader", identOf(node.getLeaderId()));
        m.put("term", look.term());
        m.put("committedIndex", look.committed());
        m.putAll(config());
        return m;
    }

    /**
     * What the JRaft Node interface does not say (the term, the vote, the configuration on a
     * follower), read from NodeImpl's fields. A field a version lacks reads as unknown.
     */
    static final class Introspect {
        private final Node node;
        private final Field term;
        private final Field voted;
        private final Field state;
        private final Field conf;
        private final Field logManager;
        private final Field ballotBox;
        private final Field fsmCaller;
        private final java.util.concurrent.locks.Lock readLock;

        /** Term, role, leader and vote as of one moment (read under NodeImpl's read lock). */
        static final class Snap {
            long term;
            String role;
            PeerId leader;
            PeerId voted;
        }

        Introspect(Node node) {
            this.node = node;
            this.term = field("currTerm");
            this.voted = field("votedId");
            this.state = field("state");
            this.conf = field("conf");
            this.logManager = field("logManager");
            this.ballotBox = field("ballotBox");
            this.fsmCaller = field("fsmCaller");
            Object lock = get(field("readLock"));
            this.readLock = lock instanceof java.util.concurrent.locks.Lock
                    ? (java.util.concurrent.locks.Lock) lock : null;
        }

        private Field field(String name) {
            try {
                Field f = node.getClass().getDeclaredField(name);
                f.setAccessible(true);
                return f;
            } catch (ReflectiveOperationException | RuntimeException e) {
                System.err.println("NodeImpl has no readable field " + name + ": " + e);
                return null;
            }
        }

        private Object get(Field f) {
            try {
                return f == null ? null : f.get(node);
            } catch (ReflectiveOperationException e) {
                return null;
            }
        }

        /**
         * JRaft changes the term and the vote together under its write lock (a candidate
         * bumps the term, then votes for itself); read apart, a poll saw the new vote with
         * the old term and logged a vote that never happened. Under the read lock the
         * fields are one state, and visible.
         */
        Snap snap(Node n) {
            Snap s = new Snap();
            if (readLock != null) {
                readLock.lock();
            }
            try {
                s.term = term();
                s.role = role();
                s.voted = votedFor();
                s.leader = n.getLeaderId();
            } finally {
                if (readLock != null) {
                    readLock.unlock();
                }
            }
            return s;
        }

        long term() {
            Object t = get(term);
            return t instanceof Long ? (Long) t : -1;
        }

        PeerId votedFor() {
            Object v = get(voted);
            return v instanceof PeerId ? (PeerId) v : null;
        }

        String role() {
            Object s = get(state);
            String name = Objects.toString(s, "STATE_UNKNOWN");
            switch (name) {
                case "STATE_LEADER":
                case "STATE_TRANSFERRING":
                    return "leader";
                case "STATE_CANDIDATE":
                    return "candidate";
                case "STATE_FOLLOWER":
                    return "follower";
                default:
                    return name.replaceFirst("^STATE_", "").toLowerCase();
            }
        }

        /** [voters, learners, config index, pending] of the configuration in force. */
        Object[] conf() {
            Object e = get(conf);
            if (e == null) {
                return null;
            }
            try {
                Object c = e.getClass().getMethod("getConf").invoke(e);
                Object id = e.getClass().getMethod("getId").invoke(e);
                Object index = id.getClass().getMethod("getIndex").invoke(id);
                Object stable = e.getClass().getMethod("isStable").invoke(e);
                List<PeerId> voters = new ArrayList<>(((Configuration) c).getPeers());
                List<PeerId> learners = new ArrayList<>();
                try {
                    Object ls = c.getClass().getMethod("listLearners").invoke(c);
                    learners.addAll(cast(ls));
                } catch (NoSuchMethodException old) {
                    // JRaft before learners
                }
                return new Object[] {voters, learners, index, !Boolean.TRUE.equals(stable)};
            } catch (ReflectiveOperationException | RuntimeException x) {
                return null;
            }
        }

        /** A long from a getter of one of NodeImpl's parts (-1 when a version has none). */
        private long of(Field part, String getter) {
            Object o = get(part);
            if (o == null) {
                return -1;
            }
            try {
                java.lang.reflect.Method m = o.getClass().getMethod(getter);
                m.setAccessible(true);
                return (Long) m.invoke(o);
            } catch (ReflectiveOperationException | RuntimeException x) {
                return -1;
            }
        }

        // Node.getLastLogIndex and friends appeared after 1.3.0; these read the same parts.
        long firstLogIndex() {
            return of(logManager, "getFirstLogIndex");
        }

        long lastLogIndex() {
            return of(logManager, "getLastLogIndex");
        }

        long committed() {
            return of(ballotBox, "getLastCommittedIndex");
        }

        long applied() {
            return of(fsmCaller, "getLastAppliedIndex");
        }
    }
}
