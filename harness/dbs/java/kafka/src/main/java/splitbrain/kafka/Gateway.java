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

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
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
        return producers.computeIfAbsent(node, n -> {
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
            return new KafkaProducer<>(p);
        });
    }

    /** One harness connection's consumers, made on first use and closed with the connection. */
    private final class Clients {
        final String node;
        KafkaConsumer<String, String> consumer;
        final Map<String, KafkaConsumer<String, String>> groups = new HashMap<>();

        Clients(String node) {
            this.node = node;
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
