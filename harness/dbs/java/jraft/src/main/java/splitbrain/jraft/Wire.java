package splitbrain.jraft;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.LinkedHashMap;
import java.util.Map;

import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.Value;

import splitbrain.shared.Frames;

/**
 * The reference node's client frames (node_impl/wire.py): a u32 big-endian length, then one
 * msgpack map. Requests are decoded to msgpack {@link Value}s; replies are built as plain Java
 * maps and packed by the gateways' shared {@link Frames#pack} (harness/dbs/java/shared, compiled
 * in by harness/dbs/maven.py), so the Python clients of the reference node read them unchanged.
 */
final class Wire {
    static final int MAX_FRAME = 16 << 20;

    /**
     * A value already msgpack-encoded (a stored register value) as the msgpack value it is, so
     * the reply packs it unchanged: the bytes are msgpack-java's own encoding of the value the
     * client sent ({@link #encode}), which decode and encode again to the same bytes (so they
     * cannot fail to decode: the unchecked exception lets the read callbacks use it).
     */
    static Value raw(byte[] bytes) {
        try (MessageUnpacker u = MessagePack.newDefaultUnpacker(bytes)) {
            return u.unpackValue();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
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

    /** The frame of one reply map (length prefix included), packed by {@link Frames#pack}. */
    static byte[] frame(Map<String, Object> msg) throws IOException {
        byte[] body = Frames.encode(msg);
        ByteBuffer b = ByteBuffer.allocate(4 + body.length);
        b.putInt(body.length).put(body);
        return b.array();
    }

    /** msgpack bytes of one value as a client sent it (stored, compared and sent back as is). */
    static byte[] encode(Value v) throws IOException {
        return Frames.encode(v);
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
