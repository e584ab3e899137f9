package splitbrain.shared;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.Value;
import org.msgpack.value.ValueType;

/**
 * The reference node's client framing (node_impl/wire.py: a u32 big-endian length, then one
 * msgpack map; a reply echoes {@code rid} and answers {@code type} with {@code type-resp}) as the
 * client gateways of the Java systems serve it: one loopback port per node, a thread per harness
 * connection, and a process that lives as long as its standard input (the harness's lifeline).
 *
 * <p>One source for every gateway (kafka, rocketmq, zookeeper): harness/dbs/maven.py compiles
 * it into each project that names it, so no artifact of its own is built or published. A
 * handler's failure is answered {@code GATEWAY_ERROR} with the exception, never a dropped
 * connection.
 */
public final class Frames {
    private Frames() {
    }

    /** What a gateway answers to one request of a connection. */
    public interface Handler<R> {
        Map<String, Object> handle(R request) throws Exception;
    }

    /** One frame in, its answer's bytes out. */
    private interface Answer {
        byte[] answer(byte[] frame) throws IOException;
    }

    /**
     * The command line's {@code --key value} pairs into {@code opts}, but each
     * {@code --endpoint NODE=PORT=TARGET}, returned in order as {NODE, PORT, TARGET}.
     */
    public static List<String[]> parseArgs(String[] args, Map<String, String> opts) {
        List<String[]> endpoints = new ArrayList<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            String k = args[i].replaceFirst("^--", "");
            if (k.equals("endpoint")) {
                endpoints.add(args[i + 1].split("=", 3));
            } else {
                opts.put(k, args[i + 1]);
            }
        }
        return endpoints;
    }

    /** The gateway's own log: {@code --log FILE} appended to, else {@code fallback}. */
    public static PrintStream log(Map<String, String> opts, PrintStream fallback) throws IOException {
        if (!opts.containsKey("log")) {
            return fallback;
        }
        return new PrintStream(new FileOutputStream(opts.get("log"), true), true);
    }

    /**
     * Binds {@code host:port} and serves every connection on its own daemon thread
     * ({@code conn-<node>}) with {@code connection}; accept failures are noted and retried.
     */
    public static void listen(String host, int port, String node, Consumer<Socket> connection,
                              Consumer<String> note) throws IOException {
        ServerSocket ss = new ServerSocket();
        ss.setReuseAddress(true);
        ss.bind(new InetSocketAddress(InetAddress.getByName(host), port));
        Thread t = new Thread(() -> accept(ss, node, connection, note), "accept-" + node);
        t.setDaemon(true);
        t.start();
    }

    private static void accept(ServerSocket ss, String node, Consumer<Socket> connection,
                               Consumer<String> note) {
        while (true) {
            try {
                Socket s = ss.accept();
                s.setTcpNoDelay(true);
                Thread t = new Thread(() -> connection.accept(s), "conn-" + node);
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                note.accept("accept " + node + ": " + e);
                sleep(100);
            }
        }
    }

    /** Returns once standard input closes: the harness that started the gateway is gone. */
    public static void untilStdinCloses() throws IOException {
        InputStream in = System.in;
        while (in.read() >= 0) {
            // nothing: stdin is only the harness's lifeline
        }
    }

    public static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
        }
    }

    /** Serves one connection of plain requests ({@link #decodeMap}) until the harness closes it. */
    public static void serve(Socket s, Handler<Map<String, Object>> handler) {
        frames(s, frame -> {
            Map<String, Object> req = decodeMap(frame);
            Map<String, Object> reply = answer(handler, req);
            reply.put("type", req.get("type") + "-resp");
            reply.put("rid", req.get("rid"));
            return encode(reply);
        });
    }

    /**
     * Serves one connection whose requests keep their msgpack values as sent
     * ({@link #decodeValues}: a value stored and compared byte for byte), until it closes.
     */
    public static void serveValues(Socket s, Handler<Map<String, Value>> handler) {
        frames(s, frame -> {
            Map<String, Value> req = decodeValues(frame);
            Map<String, Object> reply = answer(handler, req);
            Value type = req.get("type");
            reply.put("type", (type == null || type.isNilValue() ? ""
                    : type.isStringValue() ? type.asStringValue().asString() : type.toJson()) + "-resp");
            Value rid = req.get("rid");
            reply.put("rid", rid == null ? null : rid.asIntegerValue().toLong());
            return encode(reply);
        });
    }

    private static <R> Map<String, Object> answer(Handler<R> handler, R req) {
        try {
            return handler.handle(req);
        } catch (Exception e) {
            Map<String, Object> reply = new LinkedHashMap<>();
            reply.put("code", "GATEWAY_ERROR");
            reply.put("error", String.valueOf(e));
            return reply;
        }
    }

    private static void frames(Socket s, Answer answer) {
        try (s) {
            DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            while (true) {
                int len;
                try {
                    len = in.readInt();
                } catch (EOFException eof) {
                    return;
                }
                byte[] frame = new byte[len];
                in.readFully(frame);
                byte[] b = answer.answer(frame);
                out.writeInt(b.length);
                out.write(b);
                out.flush();
            }
        } catch (IOException e) {
            // the harness closed or dropped the connection
        }
    }

    // msgpack -------------------------------------------------------------------------------

    /** A request map with plain values ({@link #plain}); not a map: empty. */
    public static Map<String, Object> decodeMap(byte[] b) throws IOException {
        Map<String, Object> out = new HashMap<>();
        for (Map.Entry<String, Value> e : decodeValues(b).entrySet()) {
            out.put(e.getKey(), plain(e.getValue()));
        }
        return out;
    }

    /** A request map with its values as msgpack sent them; not a map: empty. */
    public static Map<String, Value> decodeValues(byte[] b) throws IOException {
        try (MessageUnpacker u = MessagePack.newDefaultUnpacker(b)) {
            Value v = u.unpackValue();
            Map<String, Value> out = new HashMap<>();
            if (v.getValueType() != ValueType.MAP) {
                return out;
            }
            for (Map.Entry<Value, Value> e : v.asMapValue().map().entrySet()) {
                out.put(e.getKey().isStringValue() ? e.getKey().asStringValue().asString()
                        : e.getKey().toJson(), e.getValue());
            }
            return out;
        }
    }

    /** nil, booleans, integers, floats, strings and (UTF-8) binaries as Java values; others as JSON. */
    public static Object plain(Value v) {
        switch (v.getValueType()) {
            case NIL:
                return null;
            case BOOLEAN:
                return v.asBooleanValue().getBoolean();
            case INTEGER:
                return v.asIntegerValue().toLong();
            case FLOAT:
                return v.asFloatValue().toDouble();
            case STRING:
                return v.asStringValue().asString();
            case BINARY:
                return new String(v.asBinaryValue().asByteArray(), StandardCharsets.UTF_8);
            default:
                return v.toJson();
        }
    }

    public static byte[] encode(Object o) throws IOException {
        MessageBufferPacker p = MessagePack.newDefaultBufferPacker();
        pack(p, o);
        p.close();
        return p.toByteArray();
    }

    /** Maps, lists, msgpack values (as they are), booleans, integers, other numbers as doubles;
     * anything else as its string. */
    @SuppressWarnings("unchecked")
    public static void pack(MessagePacker p, Object o) throws IOException {
        if (o == null) {
            p.packNil();
        } else if (o instanceof Value) {
            p.packValue((Value) o);
        } else if (o instanceof Boolean) {
            p.packBoolean((Boolean) o);
        } else if (o instanceof Integer || o instanceof Long || o instanceof Short) {
            p.packLong(((Number) o).longValue());
        } else if (o instanceof Number) {
            p.packDouble(((Number) o).doubleValue());
        } else if (o instanceof Map) {
            Map<Object, Object> m = (Map<Object, Object>) o;
            p.packMapHeader(m.size());
            for (Map.Entry<Object, Object> e : m.entrySet()) {
                p.packString(String.valueOf(e.getKey()));
                pack(p, e.getValue());
            }
        } else if (o instanceof List) {
            List<Object> l = (List<Object>) o;
            p.packArrayHeader(l.size());
            for (Object x : l) {
                pack(p, x);
            }
        } else {
            p.packString(String.valueOf(o));
        }
    }
}
