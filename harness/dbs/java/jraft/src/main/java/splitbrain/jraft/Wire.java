package splitbrain.jraft;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.Value;

/**
 * The reference node's client frames (node_impl/wire.py): a u32 big-endian length, then one
 * msgpack map. Requests are decoded to msgpack {@link Value}s; replies are built as plain Java
 * maps and packed here, so the Python clients of the reference node read them unchanged.
 */
final class Wire {
    static final int MAX_FRAME = 16 << 20;

    /** A value already msgpack-encoded (a stored register value), written as it is. */
    static final class Raw {
        final byte[] bytes;

        Raw(byte[] bytes) {
            this.bytes = bytes;
        }
    }

    private Wire() {}

    /** One request map, keys as strings; null at a clean EOF between frames. */
    static Map<String, Value> readFrame(DataInputStream in) throws IOException {
        int n;
        try {
            n = in.readInt();
        } catch (EOFException e) {
            return null;
        }
        if (n <= 0 || n > MAX_FRAME) {
            throw new IOException("bad frame length " + n);
        }
        byte[] buf = new byte[n];
        in.readFully(buf);
        try (MessageUnpacker u = MessagePack.newDefaultUnpacker(buf)) {
            Value v = u.unpackValue();
            if (!v.isMapValue()) {
                throw new IOException("frame is not a map");
            }
            Map<String, Value> out = new LinkedHashMap<>();
            for (Map.Entry<Value, Value> e : v.asMapValue().map().entrySet()) {
                out.put(e.getKey().isStringValue() ? e.getKey().asStringValue().asString()
                        : e.getKey().toString(), e.getValue());
            }
            return out;
        }
    }

    /** The frame of one reply map (length prefix included). */
    static byte[] frame(Map<String, Object> msg) throws IOException {
        MessageBufferPacker p = MessagePack.newDefaultBufferPacker();
        pack(p, msg);
        p.close();
        byte[] body = p.toByteArray();
        ByteBuffer b = ByteBuffer.allocate(4 + body.length);
        b.putInt(body.length).put(body);
        return b.array();
    }

    /** msgpack bytes of one value as a client sent it (stored, compared and sent back as is). */
    static byte[] encode(Value v) throws IOException {
        MessageBufferPacker p = MessagePack.newDefaultBufferPacker();
        if (v == null) {
            p.packNil();
        } else {
            p.packValue(v);
        }
        p.close();
        return p.toByteArray();
    }

    @SuppressWarnings("unchecked")
    static void pack(MessagePacker p, Object o) throws IOException {
        if (o == null) {
            p.packNil();
        } else if (o instanceof Raw) {
            p.writePayload(((Raw) o).bytes);
        } else if (o instanceof String) {
            p.packString((String) o);
        } else if (o instanceof Boolean) {
            p.packBoolean((Boolean) o);
        } else if (o instanceof Integer || o instanceof Long) {
            p.packLong(((Number) o).longValue());
        } else if (o instanceof Double) {
            p.packDouble((Double) o);
        } else if (o instanceof Map) {
            Map<String, Object> m = (Map<String, Object>) o;
            p.packMapHeader(m.size());
            for (Map.Entry<String, Object> e : m.entrySet()) {
                p.packString(e.getKey());
                pack(p, e.getValue());
            }
        } else if (o instanceof List) {
            List<Object> l = (List<Object>) o;
            p.packArrayHeader(l.size());
            for (Object x : l) {
                pack(p, x);
            }
        } else if (o instanceof Value) {
            p.packValue((Value) o);
        } else {
            p.packString(o.toString());
        }
    }

    /** Bytes of a log entry: one op byte, the key, then the values' msgpack bytes. */
    static byte[] entry(byte op, String key, byte[]... values) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(op);
        byte[] k = key.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        out.write(ByteBuffer.allocate(4).putInt(k.length).array());
        out.write(k);
        for (byte[] v : values) {
            out.write(ByteBuffer.allocate(4).putInt(v.length).array());
            out.write(v);
        }
        return out.toByteArray();
    }
}
