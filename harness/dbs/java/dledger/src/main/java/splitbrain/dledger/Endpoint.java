package splitbrain.dledger;

import io.openmessaging.storage.dledger.DLedgerConfig;
import io.openmessaging.storage.dledger.DLedgerServer;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.protocol.AppendEntryResponse;
import io.openmessaging.storage.dledger.protocol.GetEntriesResponse;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.Value;
import splitbrain.shared.Frames;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The reference node's client protocol (node_impl/wire.py: a u32 big-endian length, then
 * one msgpack map) on the client port, answered by DLedger's own handlers: {@code append}
 * through {@code handleAppend}, {@code get} through {@code handleGet} (leader only; entries
 * of the leader's log) or, with {@code local}, from this member's own {@code DLedgerStore}.
 * Every read reply carries the committed index read <em>before</em> the entries, so a
 * reader trusts only entries DLedger had committed when it read them.
 *
 * <p>One thread per connection: the harness's clients send one request at a time per
 * connection, and an append blocks only its own connection while DLedger waits for acks.
 */
final class Endpoint {
    /** Entries we wrote start with this; anything else is DLedger's own or unreadable. */
    static final byte[] MAGIC = {'s', 'b', '1', ':'};
    static final int MAX_FRAME = 16 << 20;
    static final int MAX_GET_ENTRIES = 1000;
    static final int MAX_GET_BYTES = 1 << 20;

    private final DLedgerServer server;
    private final Launcher.Compat compat;
    private final DLedgerConfig config;
    private final String incarnation;
    private final ServerSocket socket;
    private final String self;
    private final String group;

    Endpoint(DLedgerServer server, Launcher.Compat compat, DLedgerConfig config, String incarnation,
             String host, int port) throws IOException {
        this.server = server;
        this.compat = compat;
        this.config = config;
        this.incarnation = incarnation;
        this.self = config.getSelfId();
        this.group = config.getGroup();
        socket = new ServerSocket();
        socket.setReuseAddress(true);
        socket.bind(new InetSocketAddress(host, port), 128);
    }

    String describe() {
        return socket.getLocalSocketAddress().toString();
    }

    void serve() throws IOException {
        while (true) {
            Socket s = socket.accept();
            s.setTcpNoDelay(true);
            Thread t = new Thread(() -> connection(s), "client-" + s.getRemoteSocketAddress());
            t.setDaemon(true);
            t.start();
        }
    }

    private void connection(Socket s) {
        try (s;
             DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
             DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()))) {
            while (true) {
                int n;
                try {
                    n = in.readInt();
                } catch (EOFException e) {
                    return;
                }
                if (n <= 0 || n > MAX_FRAME) {
                    return;
                }
                byte[] payload = new byte[n];
                in.readFully(payload);
                Map<String, Value> msg = Frames.decodeValues(payload);
                Map<String, Object> reply;
                try {
                    reply = handle(msg);
                } catch (Exception e) {
                    reply = new LinkedHashMap<>();
                    reply.put("type", type(msg) + "-resp");
                    reply.put("code", "INTERNAL_ERROR");
                    reply.put("error", e.toString());
                }
                Value rid = msg.get("rid");
                reply.put("rid", rid);
                byte[] bytes = Frames.encode(reply);
                out.writeInt(bytes.length);
                out.write(bytes);
                out.flush();
            }
        } catch (IOException e) {
            // the client went away; nothing to answer
        }
    }

    private static String type(Map<String, Value> msg) {
        Value t = msg.get("type");
        return t != null && t.isStringValue() ? t.asStringValue().asString() : "unknown";
    }

    Map<String, Object> handle(Map<String, Value> msg) throws Exception {
        String t = type(msg);
        switch (t) {
            case "status":
                return status();
            case "append":
                return append(msg);
            case "get":
                return get(msg);
            case "transfer-leader":
                return transfer(msg);
            default:
                Map<String, Object> r = resp(t, "UNSUPPORTED");
                r.put("error", "unknown request type " + t);
                return r;
        }
    }

    private static Map<String, Object> resp(String t, String code) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("type", t + "-resp");
        r.put("code", code);
        return r;
    }

    private Map<String, Object> redirect(String leader) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("type", "redirect");
        r.put("code", "NOT_LEADER");
        r.put("leader", leader);
        r.put("leader_addr", null);
        return r;
    }

    private Map<String, Object> status() {
        Launcher.Snapshot s = Launcher.Snapshot.of(server.getMemberState());
        // committed before end: end only shrinks by truncating what is not committed.
        long committed = compat.committedIndex();
        long end = compat.store.getLedgerEndIndex();
        Map<String, Object> r = resp("status", "SUCCESS");
        r.put("id", self);
        r.put("role", s.role);
        r.put("term", s.term);
        r.put("leader", s.leader);
        r.put("ledgerBeginIndex", compat.beginIndex());
        r.put("ledgerEndIndex", end);
        r.put("ledgerEndTerm", compat.store.getLedgerEndTerm());
        r.put("committedIndex", committed);
        r.put("votedFor", server.getMemberState().currVoteFor());
        r.put("incarnation", incarnation);
        r.put("mode", "dledger-java");
        r.put("version", Launcher.Compat.version());
        r.put("config", null);
        return r;
    }

    private Map<String, Object> append(Map<String, Value> msg) throws Exception {
        Value body = msg.get("body");
        if (body == null) {
            Map<String, Object> r = resp("append", "UNSUPPORTED");
            r.put("error", "append needs 'body' (one entry per request here)");
            return r;
        }
        MessageBufferPacker p = MessagePack.newDefaultBufferPacker();
        p.writePayload(MAGIC);
        p.packValue(body);
        AppendEntryResponse res;
        try {
            res = Launcher.append(server, group, self, p.toByteArray(), config.getMaxWaitAckTimeMs() + 3000L);
        } catch (TimeoutException e) {
            return resp("append", "TIMEOUT");
        }
        String code = Launcher.codeName(res.getCode());
        if (code.equals("NOT_LEADER")) {
            return redirect(res.getLeaderId() != null ? res.getLeaderId() : server.getMemberState().getLeaderId());
        }
        Map<String, Object> r = resp("append", code);
        if (code.equals("SUCCESS")) {
            r.put("index", res.getIndex());
            r.put("term", res.getTerm());
            r.put("leader", self);
        }
        return r;
    }

    private static Long longField(Map<String, Value> msg, String name) {
        Value v = msg.get(name);
        if (v == null || v.isNilValue()) {
            return null;
        }
        if (!v.isIntegerValue()) {
            throw new IllegalArgumentException("'" + name + "' must be an int");
        }
        return v.asIntegerValue().toLong();
    }

    private Map<String, Object> get(Map<String, Value> msg) throws Exception {
        Value localV = msg.get("local");
        boolean local = localV != null && localV.isBooleanValue() && localV.asBooleanValue().getBoolean();
        Long index = longField(msg, "index");
        Long lo = index != null ? index : longField(msg, "from");
        Long hi = index != null ? index : longField(msg, "to");
        // The committed index first: every entry read after it at or below it is committed.
        long committed = compat.committedIndex();
        long end = compat.store.getLedgerEndIndex();
        long from = lo == null ? 0 : lo;
        long to = Math.min(hi == null ? end : hi, end);
        to = Math.min(to, from + MAX_GET_ENTRIES - 1);
        List<Object> entries = new ArrayList<>();
        long size = 0;
        for (long i = Math.max(from, 0); i <= to; i++) {
            DLedgerEntry e;
            if (local) {
                try {
                    e = compat.store.get(i);
                } catch (RuntimeException ex) {
                    e = null; // below the log's first index, or truncated meanwhile
                }
                if (e == null) {
                    continue;
                }
            } else {
                GetEntriesResponse res = Launcher.get(server, group, self, i);
                String code = Launcher.codeName(res.getCode());
                if (!code.equals("SUCCESS")) {
                    if (!entries.isEmpty() || code.equals("INDEX_OUT_OF_RANGE")) {
                        break;
                    }
                    if (code.equals("NOT_LEADER")) {
                        return redirect(server.getMemberState().getLeaderId());
                    }
                    return resp("get", code);
                }
                List<DLedgerEntry> got = Launcher.entries(res);
                if (got.isEmpty()) {
                    break;
                }
                e = got.get(0);
            }
            entries.add(view(e));
            size += e.getBody() == null ? 0 : e.getBody().length;
            if (size > MAX_GET_BYTES) {
                break;
            }
        }
        Map<String, Object> r = resp("get", "SUCCESS");
        r.put("entries", entries);
        r.put("committedIndex", committed);
        r.put("ledgerEndIndex", end);
        return r;
    }

    /** [index, term, kind, payload] as node_impl's entry_view gives it. */
    static List<Object> view(DLedgerEntry e) throws IOException {
        byte[] b = e.getBody();
        List<Object> out = new ArrayList<>(Arrays.asList(e.getIndex(), e.getTerm(), null, null));
        if (b == null || b.length == 0) {
            out.set(2, "noop");
        } else if (b.length > MAGIC.length && Arrays.equals(Arrays.copyOf(b, MAGIC.length), MAGIC)) {
            try (MessageUnpacker u = MessagePack.newDefaultUnpacker(b, MAGIC.length, b.length - MAGIC.length)) {
                out.set(2, "append");
                out.set(3, u.unpackValue());
            } catch (IOException | RuntimeException ex) {
                out.set(2, "undecodable");
                out.set(3, hex(b));
            }
        } else {
            out.set(2, "undecodable");
            out.set(3, hex(b));
        }
        return out;
    }

    private static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder(b.length * 2);
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    private Map<String, Object> transfer(Map<String, Value> msg) throws Exception {
        Value id = msg.get("id");
        if (id == null || !id.isStringValue()) {
            Map<String, Object> r = resp("transfer-leader", "UNSUPPORTED");
            r.put("error", "'id' must be a string");
            return r;
        }
        if (!compat.canTransfer()) {
            Map<String, Object> r = resp("transfer-leader", "UNSUPPORTED");
            r.put("error", "DLedger " + Launcher.Compat.version() + " has no leadership transfer");
            return r;
        }
        Launcher.Snapshot s = Launcher.Snapshot.of(server.getMemberState());
        if (!"leader".equals(s.role)) {
            return redirect(s.leader);
        }
        Long ms = longField(msg, "timeout_ms");
        long wait = ms == null ? 10000 : ms + 1000;
        CompletableFuture<?> f = compat.transfer(self, group, id.asStringValue().asString(), s.term);
        String code;
        try {
            code = Launcher.codeName(Launcher.Compat.code(f.get(wait, TimeUnit.MILLISECONDS)));
        } catch (TimeoutException e) {
            code = "TIMEOUT";
        }
        Launcher.Snapshot after = Launcher.Snapshot.of(server.getMemberState());
        Map<String, Object> r = resp("transfer-leader", code);
        r.put("term", after.term);
        r.put("leader", after.leader);
        return r;
    }
}
