package splitbrain.rocketmq;

import java.io.IOException;
import java.io.PrintStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.remoting.exception.RemotingConnectException;
import org.apache.rocketmq.remoting.exception.RemotingException;
import org.apache.rocketmq.remoting.exception.RemotingTimeoutException;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
// 5.x only: begin (harness/dbs/rocketmq.py:gateway_source_4x cuts these lines for 4.x)
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo;
import org.apache.rocketmq.remoting.protocol.header.controller.GetMetaDataResponseHeader;
// 5.x only: end
import org.apache.rocketmq.remoting.protocol.body.KVTable;
import org.apache.rocketmq.remoting.protocol.header.GetMaxOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.GetMaxOffsetResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PullMessageResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.UpdateConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;

import splitbrain.shared.Frames;

/**
 * splitbrain's client gateway for real RocketMQ: one JVM on the harness's side, one loopback
 * port per lab node, each speaking the reference node's client protocol (a u32 big-endian length,
 * then one msgpack map; replies echo {@code rid}). Nothing here stores or replicates: sends go
 * through RocketMQ's own {@link DefaultMQProducer} (one attempt, no retry, to the queue asked),
 * pulls and offset commits are RocketMQ's own remoting requests (PULL_MESSAGE,
 * UPDATE_CONSUMER_OFFSET) sent by RocketMQ's Netty client straight to the node's broker, so a pull
 * on a slave's port is answered by that slave. The name server's port pulls from whatever broker
 * the name server's route says is the master, as a routed consumer would.
 *
 * <p>Arguments: {@code --namesrv A;B --broker-name broker-a --topic t0 --queues 4 --brokers HOST:PORT,...
 * --endpoint NODE=PORT=HOST:PORT|route ... --send-timeout-ms N --pull-timeout-ms N --log FILE}, and in
 * controller mode {@code --controllers HOST:PORT;...} (asked by {@code controller-status}), and
 * {@code --push-group G}: the consumer group of the push consumer that {@code enqueue} and
 * {@code dequeue} (the consume-and-ack history, docs/queues.md) start on first use.
 * The gateway exits when its standard input closes, so a harness that dies takes it along.
 */
public final class Gateway {
    private final Map<String, String> opts = new HashMap<>();
    private final Map<String, Object[]> endpoints = new LinkedHashMap<>(); // node -> {port, target}
    private DefaultMQProducer producer;
    private NettyRemotingClient remoting;
    private MQClientAPIImpl api;
    private volatile boolean topicReady;
    private PrintStream log = System.err;
    // the push consumer (consume-and-ack mode): started by the first enqueue or dequeue
    private DefaultMQPushConsumer push;
    private final SynchronousQueue<MessageExt> handoff = new SynchronousQueue<>();
    private final AtomicLong enqueued = new AtomicLong();

    /** Exits on any failure to start: the producer's threads are not daemons, so a JVM whose
     * main thread died (a port taken between the harness choosing it and the bind, measured:
     * BindException) would otherwise live on serving nothing, and the harness would wait for
     * its readiness until the timeout instead of seeing it exit. */
    public static void main(String[] args) {
        try {
            new Gateway().run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
    }

    private void run(String[] args) throws Exception {
        for (String[] p : Frames.parseArgs(args, opts)) {
            endpoints.put(p[0], new Object[] {Integer.parseInt(p[1]), p[2]});
        }
        log = Frames.log(opts, log);
        producer = new DefaultMQProducer("sb_gateway_producer");
        producer.setNamesrvAddr(opts.get("namesrv"));
        producer.setRetryTimesWhenSendFailed(0); // one attempt per op: a retry would duplicate
        producer.setSendMsgTimeout(intOpt("send-timeout-ms", 4000));
        producer.setVipChannelEnabled(false);
        producer.setPollNameServerInterval(2000);
        producer.setInstanceName("sb_gateway");
        producer.start();
        api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        remoting = new NettyRemotingClient(new NettyClientConfig());
        remoting.start();

        String host = opts.getOrDefault("listen", "127.0.0.1");
        for (Map.Entry<String, Object[]> e : endpoints.entrySet()) {
            String node = e.getKey();
            String target = (String) e.getValue()[1];
            Frames.listen(host, (Integer) e.getValue()[0], node,
                    s -> Frames.serve(s, req -> handle(req, node, target)), this::note);
        }
        note("gateway up: " + endpoints.keySet() + " rocketmq " + opts.get("version"));
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

    private void note(String s) {
        log.println(Instant.now() + " " + s);
    }

    /** Creates the test's topic and consumer groups on every broker (UPDATE_CONSUMER_OFFSET of an
     * unknown group is refused with SUBSCRIPTION_GROUP_NOT_EXIST), retried until each takes them. */
    private void ensureTopic() {
        TopicConfig tc = new TopicConfig(opts.get("topic"));
        tc.setReadQueueNums(intOpt("queues", 4));
        tc.setWriteQueueNums(intOpt("queues", 4));
        tc.setPerm(6);
        // --order-topic true (the upgrade from master/slave): a broker made read-only
        // (brokerPermission=4) refuses a send naming a queue of an order topic with
        // NO_PERMISSION, and lets one of any other topic through (AbstractSendMessageProcessor
        // .msgCheck), so only an order topic lets the upgrade's seal stop the old commitlog
        tc.setOrder(Boolean.parseBoolean(opts.getOrDefault("order-topic", "false")));
        // ... and as RocketMQ's own order-topic configuration (mqadmin updateOrderConf: the
        // name server's ORDER_TOPIC_CONFIG namespace), which each broker applies to its topic
        // at its next registration: 4.x's admin topic creation drops the order flag
        while (tc.isOrder()) {
            try {
                api.putKVConfigValue("ORDER_TOPIC_CONFIG", tc.getTopicName(),
                        opts.get("broker-name") + ":" + intOpt("queues", 4), 3000);
                note("order topic " + tc.getTopicName() + " configured on the name server");
                break;
            } catch (Exception e) {
                note("order topic config: " + e);
                Frames.sleep(500);
            }
        }
        // every broker of the group: under DLedger any of them may be the next master, and
        // a slave that has the topic serves pulls before its first config sync
        List<String> todo = new ArrayList<>(List.of(opts.get("brokers").split(",")));
        while (!todo.isEmpty()) {
            String addr = todo.get(0);
            try {
                api.createTopic(addr, "TBW102", tc, 3000);
                for (String g : opts.getOrDefault("groups", "g0").split(",")) {
                    SubscriptionGroupConfig sg = new SubscriptionGroupConfig();
                    sg.setGroupName(g);
                    api.createSubscriptionGroup(addr, sg, 3000);
                }
                note("topic " + tc.getTopicName() + " created on " + addr);
                todo.remove(0);
            } catch (MQClientException e) {
                if (e.getResponseCode() == ResponseCode.SYSTEM_ERROR
                        && String.valueOf(e.getErrorMessage()).contains("from slave broker")) {
                    // 4.x: a slave refuses config changes and copies them from its master
                    // (SlaveSynchronize); the master's copy is what counts
                    note("topic on " + addr + ": a slave, it copies the topic from its master");
                    todo.remove(0);
                } else {
                    note("create topic on " + addr + ": " + e);
                    todo.add(todo.remove(0));
                    Frames.sleep(500);
                }
            } catch (Exception e) {
                note("create topic on " + addr + ": " + e);
                todo.add(todo.remove(0));
                Frames.sleep(500);
            }
        }
        topicReady = true;
    }

    // requests ----------------------------------------------------------------------------

    private final Map<String, Integer> errorsSeen = new HashMap<>();

    /** {@link #dispatch}, noting in the gateway's log each request type's exceptions (the first
     * three of each class with the stack): the harness records only GATEWAY_ERROR. */
    private Map<String, Object> handle(Map<String, Object> req, String node, String target)
            throws Exception {
        try {
            return dispatch(req, node, target);
        } catch (Exception e) {
            String key = req.get("type") + " " + e.getClass().getName();
            int n;
            synchronized (errorsSeen) {
                n = errorsSeen.merge(key, 1, Integer::sum);
            }
            if (n <= 3) {
                java.io.StringWriter w = new java.io.StringWriter();
                e.printStackTrace(new java.io.PrintWriter(w));
                note(req.get("type") + " on " + node + " failed (" + n + "): " + w);
            }
            throw e;
        }
    }

    private Map<String, Object> dispatch(Map<String, Object> req, String node, String target)
            throws Exception {
        String type = String.valueOf(req.get("type"));
        switch (type) {
            case "send":
                return send(req);
            case "pull":
                return pull(req, target);
            case "commit-offset":
                return commit(req);
            case "enqueue":
                return enqueue(req);
            case "dequeue":
                return dequeue(req);
            case "status":
                return status(node, target);
            case "seal":
                return seal(target);
            // 5.x only: begin
            case "controller-status":
                return controllerStatus();
            // 5.x only: end
            default:
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("code", "UNSUPPORTED");
                return r;
        }
    }

    private Map<String, Object> send(Map<String, Object> req) throws InterruptedException {
        Map<String, Object> r = new LinkedHashMap<>();
        String body = String.valueOf(req.get("body"));
        Message msg = new Message(String.valueOf(req.get("topic")), "", body, body.getBytes(StandardCharsets.UTF_8));
        MessageQueue mq = new MessageQueue(msg.getTopic(), opts.get("broker-name"), ((Number) req.get("queue")).intValue());
        try {
            SendResult res = producer.send(msg, mq, intOpt("send-timeout-ms", 4000));
            String status = res.getSendStatus().name();
            r.put("code", status.equals("SEND_OK") ? "SUCCESS" : status);
            r.put("send_status", status);
            r.put("queue_offset", res.getQueueOffset());
            r.put("offset", physical(res.getOffsetMsgId()));
            r.put("msg_id", res.getMsgId());
        } catch (MQBrokerException e) {
            r.put("code", brokerCode(e.getResponseCode()));
            r.put("error", e.getErrorMessage());
        } catch (MQClientException e) {
            Throwable c = e.getCause();
            if (c instanceof RemotingConnectException || c == null) {
                // no route to the master or no connection: the request never left the client
                r.put("code", "MASTER_NOT_READY");
            } else if (c instanceof RemotingTimeoutException) {
                r.put("code", "TIMEOUT");
            } else {
                r.put("code", "CLIENT_ERROR");
            }
            r.put("error", String.valueOf(e.getErrorMessage()) + (c == null ? "" : " / " + c));
        } catch (RemotingConnectException e) {
            r.put("code", "MASTER_NOT_READY");
            r.put("error", String.valueOf(e));
        } catch (RemotingTimeoutException e) {
            r.put("code", "TIMEOUT");
            r.put("error", String.valueOf(e));
        } catch (RemotingException e) {
            r.put("code", "REMOTING_ERROR");
            r.put("error", String.valueOf(e));
        } catch (IllegalStateException e) {
            // 5.x wraps a failed route lookup (no connection to the name server, "connect to
            // null", or no answer from it) in an IllegalStateException thrown by
            // MQClientInstance.updateTopicRouteInfoFromNameServer, which the producer asks
            // before it sends anything: nothing was sent (measured: the stack in gateway.log)
            StackTraceElement[] st = e.getStackTrace();
            if (st.length == 0 || !st[0].getMethodName().equals("updateTopicRouteInfoFromNameServer")) {
                throw e;
            }
            r.put("code", "MASTER_NOT_READY");
            r.put("error", String.valueOf(e));
        }
        return r;
    }

    private static Long physical(String offsetMsgId) {
        try {
            return offsetMsgId == null ? null : MessageDecoder.decodeMessageId(offsetMsgId).getOffset();
        } catch (Exception e) {
            return null;
        }
    }

    /** RocketMQ's response codes by name where the queue client tells them apart: NO_PERMISSION
     * (a slave or a read-only broker refused it, nothing written) is a fail; the rest are info. */
    private static String brokerCode(int code) {
        switch (code) {
            case ResponseCode.NO_PERMISSION:
                return "NO_PERMISSION";
            case ResponseCode.SYSTEM_BUSY:
                return "SYSTEM_BUSY";
            case ResponseCode.FLUSH_DISK_TIMEOUT:
                return "FLUSH_DISK_TIMEOUT";
            case ResponseCode.SLAVE_NOT_AVAILABLE:
                return "SLAVE_NOT_AVAILABLE";
            case ResponseCode.FLUSH_SLAVE_TIMEOUT:
                return "FLUSH_SLAVE_TIMEOUT";
            case ResponseCode.TOPIC_NOT_EXIST:
                return "TOPIC_NOT_EXIST";
            default:
                return "BROKER_" + code;
        }
    }

    private String masterAddr() throws Exception {
        TopicRouteData route = api.getTopicRouteInfoFromNameServer(opts.get("topic"), 3000);
        for (BrokerData bd : route.getBrokerDatas()) {
            if (bd.getBrokerName().equals(opts.get("broker-name"))) {
                String a = bd.getBrokerAddrs().get(0L);
                if (a != null) {
                    return a;
                }
            }
        }
        return null;
    }

    private Map<String, Object> pull(Map<String, Object> req, String target) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        String addr = target.equals("route") ? masterAddr() : target;
        if (addr == null) {
            r.put("code", "NO_ROUTE");
            return r;
        }
        PullMessageRequestHeader h = new PullMessageRequestHeader();
        h.setConsumerGroup("sb_gateway_pull");
        h.setTopic(String.valueOf(req.get("topic")));
        h.setQueueId(((Number) req.get("queue")).intValue());
        h.setQueueOffset(((Number) req.get("offset")).longValue());
        h.setMaxMsgNums(Math.min(((Number) req.get("max")).intValue(), 256));
        h.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
        h.setCommitOffset(0L);
        h.setSuspendTimeoutMillis(0L);
        h.setSubscription("*");
        h.setSubVersion(0L);
        h.setExpressionType("TAG");
        RemotingCommand cmd = RemotingCommand.createRequestCommand(RequestCode.PULL_MESSAGE, h);
        RemotingCommand resp = remoting.invokeSync(addr, cmd, intOpt("pull-timeout-ms", 3000));
        int code = resp.getCode();
        List<Object> msgs = new ArrayList<>();
        if (code == ResponseCode.SUCCESS && resp.getBody() != null) {
            for (MessageExt m : MessageDecoder.decodes(ByteBuffer.wrap(resp.getBody()))) {
                List<Object> one = new ArrayList<>();
                one.add(m.getQueueOffset());
                one.add(m.getCommitLogOffset());
                one.add(new String(m.getBody(), StandardCharsets.UTF_8));
                msgs.add(one);
            }
        }
        if (code == ResponseCode.SUCCESS || code == ResponseCode.PULL_NOT_FOUND
                || code == ResponseCode.PULL_OFFSET_MOVED || code == ResponseCode.PULL_RETRY_IMMEDIATELY) {
            // the cast: 4.x returns the CommandCustomHeader interface, 5.x a type parameter
            PullMessageResponseHeader rh = (PullMessageResponseHeader) resp.decodeCommandCustomHeader(PullMessageResponseHeader.class);
            r.put("code", "SUCCESS");
            r.put("pull_status", code);
            r.put("messages", msgs);
            r.put("max_offset", rh.getMaxOffset());
            r.put("min_offset", rh.getMinOffset());
            r.put("next_offset", rh.getNextBeginOffset());
            r.put("broker", addr);
        } else {
            r.put("code", "BROKER_" + code);
            r.put("error", resp.getRemark());
        }
        return r;
    }

    private Map<String, Object> commit(Map<String, Object> req) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        String addr = masterAddr();
        if (addr == null) {
            r.put("code", "MASTER_NOT_READY");
            return r;
        }
        UpdateConsumerOffsetRequestHeader h = new UpdateConsumerOffsetRequestHeader();
        h.setConsumerGroup(String.valueOf(req.get("group")));
        h.setTopic(String.valueOf(req.get("topic")));
        h.setQueueId(((Number) req.get("queue")).intValue());
        h.setCommitOffset(((Number) req.get("offset")).longValue());
        RemotingCommand cmd = RemotingCommand.createRequestCommand(RequestCode.UPDATE_CONSUMER_OFFSET, h);
        RemotingCommand resp = remoting.invokeSync(addr, cmd, intOpt("pull-timeout-ms", 3000));
        r.put("code", resp.getCode() == ResponseCode.SUCCESS ? "SUCCESS" : "BROKER_" + resp.getCode());
        return r;
    }

    // the push consumer: consume-and-ack ------------------------------------------------

    /** Starts RocketMQ's own {@link DefaultMQPushConsumer} once: group {@code --push-group}, the
     * test's topic from its first offset, one consume thread and one message per listener call,
     * so deliveries reach the dequeue ops one at a time. The listener hands each message to a
     * dequeue op (a rendezvous: it blocks until an op takes it) and only then returns
     * CONSUME_SUCCESS, so a message is consumed only once an op holds it for its reply. */
    private synchronized void ensurePush() throws MQClientException {
        if (push != null) {
            return;
        }
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(opts.getOrDefault("push-group", "sb_push"));
        c.setNamesrvAddr(opts.get("namesrv"));
        c.setInstanceName("sb_gateway_push");
        c.setVipChannelEnabled(false);
        c.setPollNameServerInterval(2000);
        c.setHeartbeatBrokerInterval(5000);
        c.setPersistConsumerOffsetInterval(1000);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);
        c.setConsumeMessageBatchMaxSize(1);
        c.setPullBatchSize(8);
        c.setPullThresholdForQueue(64);
        c.subscribe(opts.get("topic"), "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                try {
                    handoff.put(m);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        push = c;
        note("push consumer started: group " + c.getConsumerGroup());
    }

    /** A send to the next queue in turn (the same one-attempt send as {@code send}). */
    private Map<String, Object> enqueue(Map<String, Object> req) throws Exception {
        ensurePush();
        Map<String, Object> s = new HashMap<>();
        int q = (int) (enqueued.getAndIncrement() % intOpt("queues", 4));
        s.put("topic", opts.get("topic"));
        s.put("queue", q);
        s.put("body", req.get("body"));
        Map<String, Object> r = send(s);
        r.put("queue", q);
        return r;
    }

    /** One delivery of the push consumer, or none. With {@code ack=master} (the default) the
     * delivery's ack is the consumer's offset past it, confirmed by the master: after the
     * listener returned CONSUME_SUCCESS the consumer's own offset store moves past the message,
     * and that offset is committed to the broker the name server routes as brokerId 0 by a
     * synchronous UPDATE_CONSUMER_OFFSET; {@code acked} is true only when the master answered
     * SUCCESS. With {@code ack=none} nothing is committed here ({@code acked} false: the
     * consumer commits its offsets on its own, asynchronously, and nothing confirms them).
     *
     * <p>No delivery within {@code wait_ms}: {@code NO_DELIVERY} (nothing delivered, nothing
     * removed). A final drain's empty answer is proved, not assumed: for every queue the
     * master's committed offset of the group must have reached the queue's max offset, else
     * {@code NOT_DRAINED}. */
    private Map<String, Object> dequeue(Map<String, Object> req) throws Exception {
        ensurePush();
        Map<String, Object> r = new LinkedHashMap<>();
        long wait = req.get("wait_ms") instanceof Number ? ((Number) req.get("wait_ms")).longValue() : 1000L;
        MessageExt m = handoff.poll(wait, TimeUnit.MILLISECONDS);
        if (m == null) {
            if (Boolean.TRUE.equals(req.get("final"))) {
                List<Object> behind = undrained();
                if (!behind.isEmpty()) {
                    r.put("code", "NOT_DRAINED");
                    r.put("behind", behind);
                    return r;
                }
                r.put("code", "SUCCESS");
                r.put("messages", new ArrayList<>());
                return r;
            }
            r.put("code", "NO_DELIVERY");
            return r;
        }
        Map<String, Object> one = new LinkedHashMap<>();
        one.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        one.put("acked", false);
        one.put("queue", m.getQueueId());
        one.put("queue_offset", m.getQueueOffset());
        one.put("offset", m.getCommitLogOffset());
        one.put("reconsume", m.getReconsumeTimes());
        one.put("broker", String.valueOf(m.getStoreHost()));
        List<Object> msgs = new ArrayList<>();
        msgs.add(one);
        r.put("code", "SUCCESS");
        r.put("messages", msgs);
        if (!"none".equals(String.valueOf(req.getOrDefault("ack", "master")))) {
            confirm(m, one);
        }
        return r;
    }

    /** Commits the consumer's offset past {@code m} to the master and says so in {@code one}. */
    private void confirm(MessageExt m, Map<String, Object> one) {
        MessageQueue mq = new MessageQueue(m.getTopic(), opts.get("broker-name"), m.getQueueId());
        long need = m.getQueueOffset() + 1;
        long deadline = System.currentTimeMillis() + 1000;
        long local = push.getOffsetStore().readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
        while (local < need && System.currentTimeMillis() < deadline) {
            Frames.sleep(5);
            local = push.getOffsetStore().readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
        }
        one.put("consumer_offset", local);
        if (local < need) {
            one.put("ack_error", "the consumer's offset did not pass the message");
            return;
        }
        try {
            String addr = masterAddr();
            if (addr == null) {
                one.put("ack_error", "no master routed");
                return;
            }
            UpdateConsumerOffsetRequestHeader h = new UpdateConsumerOffsetRequestHeader();
            h.setConsumerGroup(push.getConsumerGroup());
            h.setTopic(m.getTopic());
            h.setQueueId(m.getQueueId());
            h.setCommitOffset(local);
            RemotingCommand cmd = RemotingCommand.createRequestCommand(RequestCode.UPDATE_CONSUMER_OFFSET, h);
            RemotingCommand resp = remoting.invokeSync(addr, cmd, 2000);
            one.put("ack_broker", addr);
            if (resp.getCode() == ResponseCode.SUCCESS) {
                one.put("acked", true);
            } else {
                one.put("ack_error", "BROKER_" + resp.getCode());
            }
        } catch (Exception e) {
            one.put("ack_error", String.valueOf(e));
        }
    }

    /** The queues whose committed offset (group {@code --push-group}, on the master) is below the
     * queue's max offset: each {@code [queue, committed, max]}; one {@code [-1, error]} when the
     * master could not be asked (then nothing is proved). */
    private List<Object> undrained() {
        List<Object> out = new ArrayList<>();
        try {
            String addr = masterAddr();
            if (addr == null) {
                out.add(List.of(-1, "no master routed"));
                return out;
            }
            for (int q = 0; q < intOpt("queues", 4); q++) {
                GetMaxOffsetRequestHeader mh = new GetMaxOffsetRequestHeader();
                mh.setTopic(opts.get("topic"));
                mh.setQueueId(q);
                RemotingCommand mr = remoting.invokeSync(addr,
                        RemotingCommand.createRequestCommand(RequestCode.GET_MAX_OFFSET, mh), 1000);
                if (mr.getCode() != ResponseCode.SUCCESS) {
                    out.add(List.of(q, "GET_MAX_OFFSET " + mr.getCode()));
                    continue;
                }
                long max = ((GetMaxOffsetResponseHeader) mr.decodeCommandCustomHeader(GetMaxOffsetResponseHeader.class)).getOffset();
                QueryConsumerOffsetRequestHeader qh = new QueryConsumerOffsetRequestHeader();
                qh.setConsumerGroup(push.getConsumerGroup());
                qh.setTopic(opts.get("topic"));
                qh.setQueueId(q);
                RemotingCommand qr = remoting.invokeSync(addr,
                        RemotingCommand.createRequestCommand(RequestCode.QUERY_CONSUMER_OFFSET, qh), 1000);
                long done;
                if (qr.getCode() == ResponseCode.SUCCESS) {
                    done = ((QueryConsumerOffsetResponseHeader) qr.decodeCommandCustomHeader(QueryConsumerOffsetResponseHeader.class)).getOffset();
                } else if (qr.getCode() == ResponseCode.QUERY_NOT_FOUND) {
                    done = 0;
                } else {
                    out.add(List.of(q, "QUERY_CONSUMER_OFFSET " + qr.getCode()));
                    continue;
                }
                if (done < max) {
                    out.add(List.of(q, done, max));
                }
            }
        } catch (Exception e) {
            out.add(List.of(-1, String.valueOf(e)));
        }
        return out;
    }

    /** The upgrade's seal: RocketMQ's updateBrokerConfig brokerPermission=4 (read-only) on the
     * node's broker, what {@code mqadmin updateBrokerConfig -k brokerPermission -v 4} sends
     * (UPDATE_BROKER_CONFIG); the broker persists it in its configuration file and registers
     * again with the name server. */
    private Map<String, Object> seal(String target) {
        Map<String, Object> r = new LinkedHashMap<>();
        if (target.equals("route")) {
            r.put("code", "NOT_A_BROKER");
            return r;
        }
        java.util.Properties p = new java.util.Properties();
        p.setProperty("brokerPermission", "4");
        try {
            api.updateBrokerConfig(target, p, 3000);
            r.put("code", "SUCCESS");
        } catch (Exception e) {
            r.put("code", "SEAL_FAILED");
            r.put("error", String.valueOf(e));
        }
        note("seal " + target + ": " + r);
        return r;
    }

    /** The gateway's view for the harness: the name server's route (broker id -> address), whether
     * the test's topic exists, and the node's broker's own runtime table when it is a broker. */
    private Map<String, Object> status(String node, String target) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("code", "SUCCESS");
        r.put("id", node);
        r.put("topic_ready", topicReady);
        Map<String, Object> route = new LinkedHashMap<>();
        try {
            TopicRouteData rd = api.getTopicRouteInfoFromNameServer(opts.get("topic"), 2000);
            for (BrokerData bd : rd.getBrokerDatas()) {
                for (Map.Entry<Long, String> e : bd.getBrokerAddrs().entrySet()) {
                    route.put(bd.getBrokerName() + ":" + e.getKey(), e.getValue());
                }
            }
        } catch (Exception e) {
            r.put("route_error", String.valueOf(e));
        }
        r.put("route", route);
        if (!target.equals("route")) {
            try {
                KVTable kv = api.getBrokerRuntimeInfo(target, 2000);
                Map<String, Object> rt = new LinkedHashMap<>();
                if (kv.getTable() != null) {
                    rt.putAll(kv.getTable());
                }
                r.put("runtime", rt);
            } catch (Exception e) {
                r.put("runtime_error", String.valueOf(e));
            }
            try {
                // the broker's own configuration: brokerPermission (4 once the upgrade sealed it)
                java.util.Properties bc = api.getBrokerConfig(target, 2000);
                r.put("broker_permission", bc.getProperty("brokerPermission"));
                r.put("dledger", bc.getProperty("enableDLegerCommitLog"));
            } catch (Exception e) {
                r.put("config_error", String.valueOf(e));
            }
            try {
                // whether the broker holds the test's topic as an order topic (the seal's need)
                var w = api.getAllTopicConfig(target, 2000);
                TopicConfig tc = w.getTopicConfigTable().get(opts.get("topic"));
                r.put("order_topic", tc != null && tc.isOrder());
            } catch (Exception e) {
                r.put("topic_config_error", String.valueOf(e));
            }
            try {
                // whether this broker serves the test's topic yet (a slave copies topic
                // configs from its master every few seconds; before, TOPIC_NOT_EXIST)
                Map<String, Object> probe = new HashMap<>();
                probe.put("topic", opts.get("topic"));
                probe.put("queue", 0L);
                probe.put("offset", 0L);
                probe.put("max", 1L);
                r.put("probe", pull(probe, target).get("code"));
            } catch (Exception e) {
                r.put("probe", String.valueOf(e));
            }
        }
        return r;
    }

    // 5.x only: begin
    /** Controller mode: each controller's view of who leads the controllers (RocketMQ's
     * CONTROLLER_GET_METADATA_INFO), and the leader's SyncStateSet of the broker group
     * (CONTROLLER_GET_SYNC_STATE_DATA): the master it elected, its epochs, and which replicas
     * are in sync. Nothing is changed. */
    private Map<String, Object> controllerStatus() {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("code", "SUCCESS");
        Map<String, Object> views = new LinkedHashMap<>();
        String leader = null;
        for (String addr : opts.getOrDefault("controllers", "").split(";")) {
            if (addr.isEmpty()) {
                continue;
            }
            Map<String, Object> v = new LinkedHashMap<>();
            try {
                GetMetaDataResponseHeader md = api.getControllerMetaData(addr);
                v.put("leader_id", md.getControllerLeaderId());
                v.put("leader_addr", md.getControllerLeaderAddress());
                v.put("is_leader", md.isLeader());
                if (md.isLeader()) {
                    leader = addr;
                }
            } catch (Exception e) {
                v.put("error", String.valueOf(e));
            }
            views.put(addr, v);
        }
        r.put("controllers", views);
        r.put("leader", leader);
        if (leader != null) {
            try {
                BrokerReplicasInfo info = api.getInSyncStateData(leader, List.of(opts.get("broker-name")));
                BrokerReplicasInfo.ReplicasInfo ri = info.getReplicasInfoTable().get(opts.get("broker-name"));
                if (ri != null) {
                    Map<String, Object> sync = new LinkedHashMap<>();
                    sync.put("master_addr", ri.getMasterAddress());
                    sync.put("master_epoch", ri.getMasterEpoch());
                    sync.put("sync_state_set_epoch", ri.getSyncStateSetEpoch());
                    List<Object> in = new ArrayList<>();
                    for (BrokerReplicasInfo.ReplicaIdentity id : ri.getInSyncReplicas()) {
                        in.add(id.getBrokerAddress());
                    }
                    List<Object> out = new ArrayList<>();
                    for (BrokerReplicasInfo.ReplicaIdentity id : ri.getNotInSyncReplicas()) {
                        out.add(id.getBrokerAddress());
                    }
                    sync.put("in_sync", in);
                    sync.put("not_in_sync", out);
                    r.put("sync", sync);
                }
            } catch (Exception e) {
                r.put("sync_error", String.valueOf(e));
            }
        }
        return r;
    }
    // 5.x only: end
}
