package splitbrain.jraft;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import com.alipay.sofa.jraft.Closure;
import com.alipay.sofa.jraft.Iterator;
import com.alipay.sofa.jraft.Status;
import com.alipay.sofa.jraft.core.StateMachineAdapter;
import com.alipay.sofa.jraft.entity.LeaderChangeContext;
import com.alipay.sofa.jraft.error.RaftException;

/**
 * The replicated map: every write and cas is a log entry applied here, in log order, on
 * JRaft's state machine thread. The leader's closure of an entry gets the result of applying
 * it ({@link Result}); followers apply the same bytes without one. No snapshots: a restarted
 * node rebuilds the map by replaying its log (RocksDB under data/log).
 */
final class KvFsm extends StateMachineAdapter {
    static final byte PUT = 1;
    static final byte CAS = 2;

    /** What applying one entry did, handed to the closure that proposed it. */
    static final class Result {
        boolean ok;
        byte[] value;
        long index;
        long term;
    }

    /** A closure that carries its result slot. */
    abstract static class Op implements Closure {
        final Result result = new Result();
    }

    final Map<String, byte[]> data = new ConcurrentHashMap<>();
    volatile long applied;
    private final NodeLog log;
    private final Server server;

    KvFsm(NodeLog log, Server server) {
        this.log = log;
        this.server = server;
    }

    @Override
    public void onApply(Iterator it) {
        while (it.hasNext()) {
            ByteBuffer b = it.getData();
            Closure done = it.done();
            Result r = done instanceof Op ? ((Op) done).result : new Result();
            r.index = it.getIndex();
            r.term = it.getTerm();
            if (b != null && b.remaining() > 0) {
                apply(b.slice(), r);
            }
            applied = it.getIndex();
            if (done != null) {
                done.run(Status.OK());
            }
            it.next();
        }
    }

    private void apply(ByteBuffer b, Result r) {
        byte op = b.get();
        String key = new String(field(b), StandardCharsets.UTF_8);
        if (op == PUT) {
            data.put(key, field(b));
            r.ok = true;
        } else if (op == CAS) {
            byte[] old = field(b);
            byte[] neu = field(b);
            byte[] cur = data.get(key);
            if (cur != null && Arrays.equals(cur, old)) {
                data.put(key, neu);
                r.ok = true;
                r.value = neu;
            } else {
                r.ok = false;
                r.value = cur;
            }
        }
    }

    private static byte[] field(ByteBuffer b) {
        byte[] out = new byte[b.getInt()];
        b.get(out);
        return out;
    }

    @Override
    public void onLeaderStart(long term) {
        server.observe("leader-start term=" + term);
    }

    @Override
    public void onLeaderStop(Status status) {
        server.observe("leader-stop");
    }

    @Override
    public void onStartFollowing(LeaderChangeContext ctx) {
        server.observe("start-following term=" + ctx.getTerm());
    }

    @Override
    public void onStopFollowing(LeaderChangeContext ctx) {
        server.observe("stop-following term=" + ctx.getTerm());
    }

    @Override
    public void onError(RaftException e) {
        log.line("INFO event=fsm-error error=" + NodeLog.word(String.valueOf(e.getStatus())));
    }
}
