package splitbrain.kafka;

import java.io.IOException;
import java.io.PrintStream;
import java.net.Socket;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.errors.NotEnoughReplicasException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

import splitbrain.shared.Frames;

/**
 * splitbrain's client gateway for real Kafka (KRaft): one JVM on the harness's side, one loopback
 * port per node, each speaking the reference node's broker protocol (a u32 big-endian length,
 * then one msgpack map; replies echo {@code rid}): {@code send}, {@code pull},
 * {@code commit-offset}, {@code status}. Nothing here stores or replicates.
 *
 * <p>Every node's port has one {@link KafkaProducer} (acks, idempotence as asked; one attempt
 * when not idempotent, since a retry of a plain producer may duplicate), and every harness
 * connection its own {@link KafkaConsumer} with {@code client.rack} set to the node's name: the brokers run the
 * rack-aware replica selector with {@code broker.rack} = node, so a pull on a node that holds a
 * replica of the partition reads that replica (KIP-392), and a pull elsewhere reads the leader.
 * A send's queue offset is the record's Kafka offset; Kafka has no physical offset across
 * partitions, so {@code offset} is null. A pull seeks to the offset asked and polls until records
 * of that partition come, or the partition's end (the leader's high watermark) is reached (an
 * empty, final answer), or the pull times out ({@code TIMEOUT}: not an answer about the end).
 *
 * <p>The {@code watch} workload's requests (workloads/kafka_watch.py), flat fields because the
 * framing decodes nested values as JSON: {@code wpublish} ({@code n} events {@code p<i>} partition,
 * {@code v<i>} value; one event through the node's producer, several as one transaction of the
 * connection's transactional producer), {@code wsubscribe} ({@code partitions} "0,2" or absent
 * for all, {@code from} an offset, {@code listen_ms}, {@code final}: a read_committed consumer
 * assigned and seeked, its records and its positions after each poll) and {@code wsnapshot}
 * (each partition's last committed record, once no transaction holds the stable offset back).
 *
 * <p>Codes: {@code SUCCESS}; {@code NOT_LEADER} when the producer refused the record before it
 * was handed to the network (no metadata, a full buffer) or the leader answered
 * NOT_ENOUGH_REPLICAS (checked before the append): certainly not written; otherwise the Kafka
 * exception's simple name (unknown outcome for a send). Arguments: {@code --bootstrap H:P,...
 * --endpoint NODE=PORT=BROKERID --topic t0 --partitions 4 --replication 3 --min-isr 2
 * --unclean false --acks all --idempotent true --request-timeout-ms N --delivery-timeout-ms N
 * --pull-timeout-ms N --log FILE}. Exits when its standard input closes.
 */
public final class Gateway {
    private final Map<String, String> opts = new HashMap<>();
    private final Map<String, Object[]> endpoints = new LinkedHashMap<>(); // node -> {port, id}
    private final Map<Integer, String> nodeOf = new HashMap<>();
    private Admin admin;
    private volatile boolean topicReady;
    private PrintStream log = System.err;

    public static void main(String[] args) throws Exception {
        new Gateway().run(args);
    }

    private void run(String[] args) throws Exception {
        for (String[] p : Frames.parseArgs(args, opts)) {
            endpoints.put(p[0], new Object[] {Integer.parseInt(p[1]), Integer.parseInt(p[2])});
            nodeOf.put(Integer.parseInt(p[2]), p[0]);
        }
        log = Frames.log(opts, log);
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "4000");
        ap.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "200");
        admin = Admin.create(ap);
        String host = opts.getOrDefault("listen", "127.0.0.1");
        for (Map.Entry<String, Object[]> e : endpoints.entrySet()) {
            String node = e.getKey();
            Frames.listen(host, (Integer) e.getValue()[0], node, s -> serve(s, node), this::note);
        }
        note("gateway up: " + endpoints.keySet() + " acks=" + opts.get("acks") + " idempotent="
                + opts.get("idempotent"));
        Thread topic = new Thread(this::ensureTopic, "topic");
        topic.setDaemon(true);
        topic.start();
        Frames.untilStdinCloses();
        note("stdin closed: exiting");
        System.exit(0);
    }

    private int intOpt(String k, int d) {
        return opts.containsKey(k) ? Integer.parseInt(opts.get(k)) : d;
    }

    private boolean idempotent() {
        return Boolean.parseBoolean(opts.getOrDefault("idempotent", "true"));
    }

    private synchronized void note(String s) {
        log.println(Instant.now() + " " + s);
    }

    /** Creates the test's topic (its partitions, replication, min.insync.replicas and unclean
     * election as asked), retried until Kafka takes it or says it exists. */
    private void ensureTopic() {
        String name = opts.get("topic");
        Map<String, String> conf = new HashMap<>();
        conf.put("min.insync.replicas", opts.getOrDefault("min-isr", "2"));
        conf.put("unclean.leader.election.enable", opts.getOrDefault("unclean", "false"));
        NewTopic nt = new NewTopic(name, intOpt("partitions", 4), (short) intOpt("replication", 3))
                .configs(conf);
        while (true) {
            try {
                admin.createTopics(List.of(nt)).all().get(10, TimeUnit.SECONDS);
                note("topic " + name + " created: " + conf);
                break;
            } catch (ExecutionException e) {
                if (e.getCause() instanceof TopicExistsException) {
                    note("topic " + name + " exists");
                    break;
                }
                note("create topic: " + e.getCause());
            } catch (Exception e) {
                note("create topic: " + e);
            }
            Frames.sleep(500);
        }
        topicReady = true;
    }

    /** One producer per node's port, shared by its connections (KafkaProducer is thread-safe):
     * a fresh producer per harness connection paid a metadata round and InitProducerId on every
     * worker's first send, and a worker gets a fresh connection after every unknown outcome. */
    private final Map<String, KafkaProducer<String, String>> producers = new HashMap<>();

    private synchronized KafkaProducer<String, String> producerFor(String node) {
        return producers.computeIfAbsent(node, n -> new KafkaProducer<>(producerProps(n)));
    }

    /** A producer's settings for node {@code n}'s port: acks and idempotence as asked (one
     * attempt when not idempotent), the timeouts as asked. */
    private Properties producerProps(String n) {
        {
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
            p.put(ProducerConfig.ACKS_CONFIG, opts.getOrDefault("acks", "all"));
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(idempotent()));
            if (!idempotent()) {
                p.put(ProducerConfig.RETRIES_CONFIG, "0");
                p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
            }
            p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
            p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, opts.getOrDefault("request-timeout-ms", "3000"));
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, opts.getOrDefault("delivery-timeout-ms", "4000"));
            p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "2000");
            p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
            p.put(ProducerConfig.CLIENT_ID_CONFIG, "sb-" + n);
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            return p;
        }
    }

    private static final AtomicInteger TXN_IDS = new AtomicInteger();
    /** Short, so a transaction a lost connection left open stops holding the partitions'
     * stable offset (what read_committed consumers may read up to) within seconds. */
    private static final int TXN_TIMEOUT_MS = 10000;
    /** How long past its timeout (and the broker's 1 s sweep) a transaction may stay open
     * before a snapshot calls it hanging. */
    private static final int HANG_MARGIN_MS = 15000;

    /** One harness connection's consumers, made on first use and closed with the connection. */
    private final class Clients {
        final String node;
        KafkaConsumer<String, String> consumer;
        KafkaConsumer<String, String> watcher;
        KafkaProducer<String, String> txn;
        final String txnId;
        final Map<String, KafkaConsumer<String, String>> groups = new HashMap<>();

        Clients(String node) {
            this.node = node;
            this.txnId = "sbw-" + node + "-" + TXN_IDS.incrementAndGet();
        }

        /** The watch workload's consumer: read_committed, so an aborted transaction's records
         * are never delivered and a committed one's are delivered whole. */
        KafkaConsumer<String, String> watcher() {
            if (watcher == null) {
                Properties p = consumerProps(null);
                p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
                p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "500");
                watcher = new KafkaConsumer<>(p);
            }
            return watcher;
        }

        /** The connection's transactional producer (acks=all and idempotence, as Kafka requires
         * of one), made and initialised on first use; dropped after any error, so the next one
         * (same transactional.id) fences what the old one left open. */
        KafkaProducer<String, String> txn() {
            if (txn == null) {
                Properties p = producerProps(node);
                p.put(ProducerConfig.ACKS_CONFIG, "all");
                p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
                p.remove(ProducerConfig.RETRIES_CONFIG);
                p.remove(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION);
                p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
                p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(TXN_TIMEOUT_MS));
                p.put(ProducerConfig.CLIENT_ID_CONFIG, txnId);
                // initTransactions and commitTransaction block this long (finding the
                // coordinator of a loaded cluster takes more than the plain producer's 2 s)
                p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "4000");
                KafkaProducer<String, String> made = new KafkaProducer<>(p);
                try {
                    made.initTransactions();
                } catch (RuntimeException e) {
                    made.close(Duration.ZERO);
                    throw e;
                }
                txn = made;
            }
            return txn;
        }

        void dropTxn() {
            if (txn != null) {
                try {
                    txn.close(Duration.ZERO);
                } catch (Exception e) {
                    // a producer of unreachable brokers
                }
                txn = null;
            }
        }

        KafkaProducer<String, String> producer() {
            return producerFor(node);
        }

        Properties consumerProps(String group) {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
            p.put(ConsumerConfig.CLIENT_RACK_CONFIG, node);
            p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
            p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "3000");
            p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            if (group != null) {
                p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            }
            return p;
        }

        KafkaConsumer<String, String> consumer() {
            if (consumer == null) {
                consumer = new KafkaConsumer<>(consumerProps(null));
            }
            return consumer;
        }

        KafkaConsumer<String, String> group(String g) {
            return groups.computeIfAbsent(g, k -> new KafkaConsumer<>(consumerProps(k)));
        }

        void close() {
            try {
                if (consumer != null) {
                    consumer.close(Duration.ofMillis(500));
                }
                if (watcher != null) {
                    watcher.close(Duration.ofMillis(500));
                }
                dropTxn();
                for (KafkaConsumer<String, String> c : groups.values()) {
                    c.close(Duration.ofMillis(500));
                }
            } catch (Exception e) {
                // closing clients of unreachable brokers
            }
        }
    }

    private void serve(Socket s, String node) {
        Clients clients = new Clients(node);
        try {
            Frames.serve(s, req -> handle(req, clients));
        } finally {
            clients.close();
        }
    }

    private Map<String, Object> handle(Map<String, Object> req, Clients c) throws Exception {
        switch (String.valueOf(req.get("type"))) {
            case "send":
                return send(req, c);
            case "pull":
                return pull(req, c);
            case "commit-offset":
                return commit(req, c);
            case "status":
                return status(c.node);
            case "wpublish":
                return wpublish(req, c);
            case "wsubscribe":
                return wsubscribe(req, c);
            case "wsnapshot":
                return wsnapshot(req, c);
            default:
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("code", "UNSUPPORTED");
                return r;
        }
    }

    private static String name(Throwable t) {
        return t.getClass().getSimpleName().replaceAll("Exception$", "");
    }

    private Map<String, Object> send(Map<String, Object> req, Clients c) throws InterruptedException {
        Map<String, Object> r = new LinkedHashMap<>();
        String body = String.valueOf(req.get("body"));
        int partition = ((Number) req.get("queue")).intValue();
        ProducerRecord<String, String> rec =
                new ProducerRecord<>(String.valueOf(req.get("topic")), partition, null, body);
        java.util.concurrent.Future<RecordMetadata> f;
        try {
            f = c.producer().send(rec);
        } catch (Exception e) {
            // refused by the client before it was queued for the network: never sent
            r.put("code", "NOT_LEADER");
            r.put("error", "not queued: " + e);
            return r;
        }
        try {
            RecordMetadata md = f.get(intOpt("delivery-timeout-ms", 4000) + 2000L, TimeUnit.MILLISECONDS);
            r.put("code", "SUCCESS");
            r.put("queue_offset", md.offset());
            r.put("offset", null);
            r.put("partition", md.partition());
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof NotEnoughReplicasException) {
                // the leader checks the ISR before it appends: not written
                r.put("code", "NOT_LEADER");
            } else {
                r.put("code", name(cause));
            }
            r.put("error", String.valueOf(cause));
        } catch (TimeoutException e) {
            r.put("code", "TIMEOUT");
            r.put("error", "no answer within the delivery timeout");
        }
        return r;
    }

    // the watch workload ---------------------------------------------------------------------

    private static long longOf(Map<String, Object> req, String k, long d) {
        Object v = req.get(k);
        return v instanceof Number ? ((Number) v).longValue() : d;
    }

    private List<TopicPartition> partitionsOf(Map<String, Object> req) {
        String topic = opts.get("topic");
        List<TopicPartition> out = new ArrayList<>();
        Object asked = req.get("partitions");
        if (asked == null || String.valueOf(asked).isEmpty()) {
            for (int p = 0; p < intOpt("partitions", 4); p++) {
                out.add(new TopicPartition(topic, p));
            }
        } else {
            for (String p : String.valueOf(asked).split(",")) {
                out.add(new TopicPartition(topic, Integer.parseInt(p.trim())));
            }
        }
        return out;
    }

    /** A send's failure that says the record was never written: NOT_ENOUGH_REPLICAS (the
     * leader checks the ISR before it appends) or no metadata for the topic within
     * max.block.ms (the record never left the producer). */
    private static boolean neverSent(Throwable cause) {
        return cause instanceof NotEnoughReplicasException
                || (cause instanceof org.apache.kafka.common.errors.TimeoutException
                        && String.valueOf(cause.getMessage()).contains("not present in metadata"));
    }

    /** One publish of the watch workload: one event through the node's producer (as
     * {@code send}), several as one transaction. {@code written} says what a failure means:
     * {@code no} (certainly nothing visible: refused before it was queued, NOT_ENOUGH_REPLICAS,
     * or a transaction aborted before its commit was ever asked) or {@code unknown}. */
    private Map<String, Object> wpublish(Map<String, Object> req, Clients c) throws InterruptedException {
        Map<String, Object> r = new LinkedHashMap<>();
        String topic = opts.get("topic");
        int n = (int) longOf(req, "n", 0);
        long started = System.currentTimeMillis();
        long wait = Math.min(longOf(req, "timeout_ms", Long.MAX_VALUE),
                intOpt("delivery-timeout-ms", 4000) + 2000L);
        List<ProducerRecord<String, String>> recs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int part = (int) longOf(req, "p" + i, -1);
            if (part < 0 || part >= intOpt("partitions", 4)) {
                r.put("code", "UNKNOWN_PARTITION");
                r.put("written", "no");
                r.put("error", "the topic has " + intOpt("partitions", 4) + " partitions, asked " + part);
                return r;
            }
            recs.add(new ProducerRecord<>(topic, part, null, String.valueOf(req.get("v" + i))));
        }
        if (recs.isEmpty()) {
            r.put("code", "EMPTY");
            r.put("written", "no");
            return r;
        }
        if (recs.size() == 1) {
            java.util.concurrent.Future<RecordMetadata> f;
            try {
                f = c.producer().send(recs.get(0));
            } catch (Exception e) {
                r.put("code", "NOT_QUEUED");
                r.put("written", "no");
                r.put("error", "not queued: " + e);
                return r;
            }
            try {
                // the time send() blocked on metadata counts: the caller's deadline is whole
                long left = Math.max(1, started + wait - System.currentTimeMillis());
                RecordMetadata md = f.get(left, TimeUnit.MILLISECONDS);
                r.put("code", "SUCCESS");
                r.put("offsets", List.of(md.offset()));
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                r.put("code", name(cause));
                r.put("written", neverSent(cause) ? "no" : "unknown");
                r.put("error", String.valueOf(cause));
            } catch (TimeoutException e) {
                r.put("code", "TIMEOUT");
                r.put("written", "unknown");
                r.put("error", "no answer within " + wait + " ms");
            }
            return r;
        }
        if (!"all".equals(opts.getOrDefault("acks", "all")) || !idempotent()) {
            r.put("code", "NO_TRANSACTIONS");
            r.put("written", "no");
            r.put("error", "a transactional producer needs acks=all and idempotence; not sent");
            return r;
        }
        KafkaProducer<String, String> p;
        try {
            p = c.txn();
        } catch (Exception e) {
            r.put("code", name(e));
            r.put("written", "no");
            r.put("error", "initTransactions: " + e);
            return r;
        }
        List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
        try {
            p.beginTransaction();
            for (ProducerRecord<String, String> rec : recs) {
                fs.add(p.send(rec));
            }
            p.flush();
            for (java.util.concurrent.Future<RecordMetadata> f : fs) {
                f.get(0, TimeUnit.MILLISECONDS);
            }
        } catch (Exception e) {
            // the commit was never asked for: abort, and nothing of it is ever read_committed
            Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
            try {
                p.abortTransaction();
            } catch (Exception e2) {
                c.dropTxn();
            }
            r.put("code", name(cause));
            r.put("written", "no");
            r.put("error", "aborted before the commit: " + cause);
            return r;
        }
        try {
            p.commitTransaction();
        } catch (Exception e) {
            c.dropTxn(); // the next producer of this transactional.id settles it
            r.put("code", name(e));
            r.put("written", "unknown");
            r.put("error", "commit: " + e);
            return r;
        }
        List<Object> offsets = new ArrayList<>();
        try {
            for (java.util.concurrent.Future<RecordMetadata> f : fs) {
                offsets.add(f.get(0, TimeUnit.MILLISECONDS).offset());
            }
        } catch (Exception e) {
            r.put("code", "NO_OFFSETS");
            r.put("written", "unknown");
            r.put("error", "committed, but the offsets: " + e);
            return r;
        }
        r.put("code", "SUCCESS");
        r.put("offsets", offsets);
        return r;
    }

    /** A subscription: the connection's read_committed consumer assigned to the partitions,
     * each seeked to {@code from} (an offset), polled for {@code listen_ms}; a final one stops
     * once every partition's position reached its end (the last stable offset) taken when it
     * began. Every record in the order poll returned them, and each partition's position
     * whenever it moved ({@code [partition, position, records before it]}): every committed
     * record below a position was returned. An exception ends it ({@code ended}) and keeps
     * what came before. */
    private Map<String, Object> wsubscribe(Map<String, Object> req, Clients c) {
        Map<String, Object> r = new LinkedHashMap<>();
        long from = longOf(req, "from", 0);
        long listen = longOf(req, "listen_ms", 1000);
        boolean fin = Boolean.TRUE.equals(req.get("final"));
        long deadline = System.currentTimeMillis() + listen;
        List<Object> events = new ArrayList<>();
        List<Object> marks = new ArrayList<>();
        String ended = null;
        KafkaConsumer<String, String> k = c.watcher();
        try {
            List<TopicPartition> tps = partitionsOf(req);
            k.assign(tps);
            Map<TopicPartition, Long> pos = new HashMap<>();
            for (TopicPartition tp : tps) {
                k.seek(tp, from);
                pos.put(tp, from);
            }
            Map<TopicPartition, Long> ends = null;
            while (true) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) {
                    break;
                }
                if (fin && ends == null) {
                    try {
                        ends = k.endOffsets(tps, Duration.ofMillis(Math.min(1500, left)));
                    } catch (Exception e) {
                        ends = null; // asked again on the next round
                    }
                }
                for (ConsumerRecord<String, String> rec : k.poll(Duration.ofMillis(Math.max(1, Math.min(200, left))))) {
                    List<Object> one = new ArrayList<>();
                    one.add(rec.partition());
                    one.add(rec.offset());
                    one.add(rec.value());
                    events.add(one);
                }
                boolean caught = ends != null;
                for (TopicPartition tp : tps) {
                    long q = k.position(tp, Duration.ofMillis(200));
                    if (q != pos.get(tp)) {
                        pos.put(tp, q);
                        marks.add(List.of(tp.partition(), q, events.size()));
                    }
                    if (ends != null && q < ends.getOrDefault(tp, Long.MAX_VALUE)) {
                        caught = false;
                    }
                }
                if (fin && caught) {
                    break;
                }
            }
        } catch (Exception e) {
            ended = name(e) + ": " + e;
        }
        r.put("code", "SUCCESS");
        r.put("events", events);
        r.put("marks", marks);
        if (ended != null) {
            r.put("ended", ended);
        }
        return r;
    }

    /** The final state: for each partition, its last committed record (read from the node's
     * replica, read_committed) and its offset, once no open transaction holds the stable
     * offset below the high watermark; {@code TXN_OPEN} when one still did at the deadline,
     * unless every open one is hanging (then the state read_committed gives, and
     * {@code hanging} says which). */
    private Map<String, Object> wsnapshot(Map<String, Object> req, Clients c) {
        Map<String, Object> r = new LinkedHashMap<>();
        long deadline = System.currentTimeMillis() + longOf(req, "timeout_ms", 4000);
        List<TopicPartition> tps = partitionsOf(Map.of());
        Map<TopicPartition, OffsetSpec> ask = new HashMap<>();
        for (TopicPartition tp : tps) {
            ask.put(tp, OffsetSpec.latest());
        }
        Map<TopicPartition, Long> stable = new HashMap<>();
        try {
            while (true) {
                Map<TopicPartition, Long> hw = new HashMap<>();
                admin.listOffsets(ask, new ListOffsetsOptions(IsolationLevel.READ_UNCOMMITTED)).all()
                        .get(3, TimeUnit.SECONDS).forEach((tp, i) -> hw.put(tp, i.offset()));
                stable.clear();
                admin.listOffsets(ask, new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all()
                        .get(3, TimeUnit.SECONDS).forEach((tp, i) -> stable.put(tp, i.offset()));
                if (hw.equals(stable)) {
                    break;
                }
                if (System.currentTimeMillis() >= deadline) {
                    String open = openTransactions(stable, hw);
                    if (!open.startsWith("hanging")) {
                        r.put("code", "TXN_OPEN");
                        r.put("error", "a transaction holds the stable offsets " + stable
                                + " below " + hw + "; open: " + open);
                        return r;
                    }
                    // Kafka aborts a transaction its producer left within transaction.timeout.ms;
                    // one open far longer never closes by itself (a hanging transaction): what a
                    // read_committed reader can read now is the final state
                    r.put("hanging", "stable offsets " + stable + " below " + hw + ": " + open);
                    break;
                }
                Frames.sleep(300);
            }
            KafkaConsumer<String, String> k = c.watcher();
            Map<TopicPartition, Long> begins = k.beginningOffsets(tps, Duration.ofMillis(3000));
            Map<String, Object> last = new LinkedHashMap<>();
            for (TopicPartition tp : tps) {
                long end = stable.get(tp);
                long begin = begins.getOrDefault(tp, 0L);
                ConsumerRecord<String, String> found = null;
                while (found == null && end > begin) {
                    long lo = Math.max(begin, end - 64);
                    k.assign(List.of(tp));
                    k.seek(tp, lo);
                    long at;
                    while ((at = k.position(tp, Duration.ofMillis(1000))) < end) {
                        if (System.currentTimeMillis() >= deadline) {
                            r.put("code", "TIMEOUT");
                            r.put("error", "partition " + tp.partition() + " read from " + lo
                                    + " to position " + at + ", not up to " + end
                                    + (found == null ? "" : " (last record at " + found.offset() + ")"));
                            return r;
                        }
                        for (ConsumerRecord<String, String> rec : k.poll(Duration.ofMillis(200)).records(tp)) {
                            if (rec.offset() < end) {
                                found = rec;
                            }
                        }
                    }
                    end = lo;
                }
                if (found != null) {
                    last.put(String.valueOf(tp.partition()), List.of(found.offset(), found.value()));
                }
            }
            r.put("code", "SUCCESS");
            r.put("partitions", last);
        } catch (Exception e) {
            r.put("code", name(e));
            r.put("error", String.valueOf(e));
        }
        return r;
    }

    /** The producers with a transaction open on the partitions whose stable offset is below
     * the high watermark (Admin.describeProducers, KIP-664), prefixed {@code hanging: } when
     * every one of them last wrote longer ago than the transaction timeout and a margin. */
    private String openTransactions(Map<TopicPartition, Long> stable, Map<TopicPartition, Long> hw) {
        List<TopicPartition> held = new ArrayList<>();
        for (Map.Entry<TopicPartition, Long> e : hw.entrySet()) {
            if (!e.getValue().equals(stable.get(e.getKey()))) {
                held.add(e.getKey());
            }
        }
        StringBuilder b = new StringBuilder();
        long now = System.currentTimeMillis();
        boolean[] young = {false, false}; // a transaction still within its timeout; any seen
        try {
            admin.describeProducers(held).all().get(3, TimeUnit.SECONDS).forEach((tp, st) -> {
                for (org.apache.kafka.clients.admin.ProducerState ps : st.activeProducers()) {
                    if (ps.currentTransactionStartOffset().isPresent()) {
                        young[1] = true;
                        if (now - ps.lastTimestamp() < TXN_TIMEOUT_MS + HANG_MARGIN_MS) {
                            young[0] = true;
                        }
                        b.append(tp).append(": producer ").append(ps.producerId()).append(" epoch ")
                                .append(ps.producerEpoch()).append(" from offset ")
                                .append(ps.currentTransactionStartOffset().getAsLong())
                                .append(" last write ").append(Instant.ofEpochMilli(ps.lastTimestamp()))
                                .append("; ");
                    }
                }
            });
        } catch (Exception e) {
            return "describeProducers: " + e;
        }
        return (young[1] && !young[0] ? "hanging: " : "") + b;
    }

    private Long endOffset(KafkaConsumer<String, String> consumer, TopicPartition tp) {
        try {
            return consumer.endOffsets(List.of(tp), Duration.ofMillis(1500)).get(tp);
        } catch (Exception e) {
            return null;
        }
    }

    private Map<String, Object> pull(Map<String, Object> req, Clients c) {
        Map<String, Object> r = new LinkedHashMap<>();
        TopicPartition tp = new TopicPartition(String.valueOf(req.get("topic")),
                ((Number) req.get("queue")).intValue());
        long offset = ((Number) req.get("offset")).longValue();
        int max = Math.min(((Number) req.get("max")).intValue(), 500);
        KafkaConsumer<String, String> consumer = c.consumer();
        List<Object> msgs = new ArrayList<>();
        long deadline = System.currentTimeMillis() + intOpt("pull-timeout-ms", 3000);
        Long end = null;
        try {
            consumer.assign(List.of(tp));
            consumer.seek(tp, offset);
            while (true) {
                for (ConsumerRecord<String, String> rec : consumer.poll(Duration.ofMillis(150)).records(tp)) {
                    if (rec.offset() >= offset && msgs.size() < max) {
                        List<Object> one = new ArrayList<>();
                        one.add(rec.offset());
                        one.add(null);
                        one.add(rec.value());
                        msgs.add(one);
                    }
                }
                if (!msgs.isEmpty()) {
                    break;
                }
                end = endOffset(consumer, tp);
                if (end != null && end <= offset) {
                    break; // nothing there yet: an answer about the end
                }
                if (System.currentTimeMillis() >= deadline) {
                    r.put("code", "TIMEOUT");
                    r.put("error", "no records within the pull timeout (end " + end + ")");
                    r.put("max_offset", end);
                    return r;
                }
            }
        } catch (Exception e) {
            r.put("code", name(e));
            r.put("error", String.valueOf(e));
            return r;
        }
        r.put("code", "SUCCESS");
        r.put("messages", msgs);
        r.put("max_offset", end);
        return r;
    }

    private Map<String, Object> commit(Map<String, Object> req, Clients c) {
        Map<String, Object> r = new LinkedHashMap<>();
        TopicPartition tp = new TopicPartition(String.valueOf(req.get("topic")),
                ((Number) req.get("queue")).intValue());
        try {
            c.group(String.valueOf(req.get("group"))).commitSync(
                    Map.of(tp, new OffsetAndMetadata(((Number) req.get("offset")).longValue())),
                    Duration.ofMillis(3000));
            r.put("code", "SUCCESS");
        } catch (Exception e) {
            r.put("code", name(e));
            r.put("error", String.valueOf(e));
        }
        return r;
    }

    /** The gateway's view for the harness: each partition's leader, replicas and ISR (node
     * names), its end offset, and the KRaft quorum's leader and voters' log end offsets. */
    private Map<String, Object> status(String node) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("code", "SUCCESS");
        r.put("id", node);
        r.put("topic_ready", topicReady);
        String topic = opts.get("topic");
        try {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                    .get(4, TimeUnit.SECONDS).get(topic);
            List<Object> parts = new ArrayList<>();
            Map<TopicPartition, OffsetSpec> ask = new HashMap<>();
            for (TopicPartitionInfo p : d.partitions()) {
                ask.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest());
            }
            Map<TopicPartition, Long> ends = new HashMap<>();
            try {
                admin.listOffsets(ask).all().get(4, TimeUnit.SECONDS)
                        .forEach((tp, info) -> ends.put(tp, info.offset()));
            } catch (Exception e) {
                r.put("offsets_error", String.valueOf(e));
            }
            for (TopicPartitionInfo p : d.partitions()) {
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("partition", p.partition());
                one.put("leader", p.leader() == null || p.leader().isEmpty() ? null : nodeName(p.leader()));
                one.put("replicas", names(p.replicas()));
                one.put("isr", names(p.isr()));
                one.put("end", ends.get(new TopicPartition(topic, p.partition())));
                parts.add(one);
            }
            r.put("partitions", parts);
        } catch (Exception e) {
            r.put("topic_error", String.valueOf(e));
        }
        try {
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get(4, TimeUnit.SECONDS);
            Map<String, Object> quorum = new LinkedHashMap<>();
            quorum.put("leader", nodeOf.getOrDefault(q.leaderId(), String.valueOf(q.leaderId())));
            quorum.put("epoch", q.leaderEpoch());
            quorum.put("high_watermark", q.highWatermark());
            Map<String, Object> voters = new LinkedHashMap<>();
            for (QuorumInfo.ReplicaState v : q.voters()) {
                voters.put(nodeOf.getOrDefault(v.replicaId(), String.valueOf(v.replicaId())), v.logEndOffset());
            }
            quorum.put("voters", voters);
            r.put("quorum", quorum);
        } catch (Exception e) {
            r.put("quorum_error", String.valueOf(e));
        }
        return r;
    }

    private String nodeName(Node n) {
        return nodeOf.getOrDefault(n.id(), String.valueOf(n.id()));
    }

    private List<Object> names(List<Node> ns) {
        List<Object> out = new ArrayList<>();
        for (Node n : ns) {
            out.add(nodeName(n));
        }
        Collections.sort(out, (a, b) -> String.valueOf(a).compareTo(String.valueOf(b)));
        return out;
    }
}
