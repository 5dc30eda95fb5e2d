package lab;

import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/** Topics, subscription groups, consumer offsets and the cluster, through DefaultMQAdminExt. */
final class Admin {
    private Admin() {
    }

    interface Action<T> {
        T apply(DefaultMQAdminExt admin) throws Exception;
    }

    static <T> T with(JSONObject request, Action<T> action) throws Exception {
        DefaultMQAdminExt admin = Clients.configure(new DefaultMQAdminExt(Clients.TIMEOUT_MS), request);
        admin.setAdminExtGroup("lab-admin-" + ProcessHandle.current().pid());
        admin.start();
        try {
            return action.apply(admin);
        } finally {
            admin.shutdown();
        }
    }

    /**
     * {@code {"broker_addr", "topic", "queues", "message_type" (NORMAL, FIFO, DELAY, TRANSACTION)}},
     * or {@code {"broker_addr", "topics": [{"topic", "queues", "message_type"}, ...]}}.
     */
    static Object createTopic(JSONObject request) throws Exception {
        List<JSONObject> specs = request.containsKey("topics")
            ? request.getJSONArray("topics").toJavaList(JSONObject.class) : List.of(request);
        return with(request, admin -> {
            List<JSONObject> done = new ArrayList<>();
            for (JSONObject spec : specs) {
                TopicConfig config = new TopicConfig(spec.getString("topic"));
                int queues = spec.getIntValue("queues") > 0 ? spec.getIntValue("queues") : 4;
                config.setReadQueueNums(queues);
                config.setWriteQueueNums(queues);
                Map<String, String> attributes = new HashMap<>();
                if (spec.containsKey("message_type")) {
                    attributes.put("+message.type", spec.getString("message_type"));
                }
                config.setAttributes(attributes);
                admin.createAndUpdateTopicConfig(request.getString("broker_addr"), config);
                JSONObject created = new JSONObject(true);
                created.put("topic", config.getTopicName());
                created.put("queues", queues);
                done.add(created);
            }
            return request.containsKey("topics") ? done : done.get(0);
        });
    }

    /** {@code {"broker_addr", "group", "retry_max_times"}}. */
    static Object createGroup(JSONObject request) throws Exception {
        SubscriptionGroupConfig config = new SubscriptionGroupConfig();
        config.setGroupName(request.getString("group"));
        if (request.containsKey("retry_max_times")) {
            config.setRetryMaxTimes(request.getIntValue("retry_max_times"));
        }
        return with(request, admin -> {
            admin.createAndUpdateSubscriptionGroupConfig(request.getString("broker_addr"), config);
            JSONObject done = new JSONObject(true);
            done.put("group", config.getGroupName());
            done.put("retry_max_times", config.getRetryMaxTimes());
            return done;
        });
    }

    /**
     * {@code {"group", "topic" (optional)}}: the broker's committed offsets of the group, one row
     * per queue (without a topic: the topics of the group's retry-topic route, as mqadmin
     * consumerProgress shows them; a pop-only group has no retry route, so name its topic).
     */
    static Object consumerOffsets(JSONObject request) throws Exception {
        return with(request, admin -> {
            String topic = request.getString("topic");
            ConsumeStats stats = topic == null ? admin.examineConsumeStats(request.getString("group"))
                : admin.examineConsumeStats(request.getString("group"), topic);
            List<JSONObject> rows = new ArrayList<>();
            for (Map.Entry<MessageQueue, OffsetWrapper> entry : stats.getOffsetTable().entrySet()) {
                JSONObject row = new JSONObject(true);
                row.put("topic", entry.getKey().getTopic());
                row.put("queue_id", entry.getKey().getQueueId());
                row.put("broker_offset", entry.getValue().getBrokerOffset());
                row.put("consumer_offset", entry.getValue().getConsumerOffset());
                rows.add(row);
            }
            return rows;
        });
    }

    /**
     * {@code {"topics": [..], "timeout_ms"}}: waits until the name server has a route for every
     * topic (a broker registers its topics at start and then every 30 s; a registration that
     * timed out on a busy machine is only repeated then). Returns the brokers of each route.
     */
    static Object awaitRoute(JSONObject request) throws Exception {
        long deadline = System.currentTimeMillis() + request.getLongValue("timeout_ms");
        return with(request, admin -> {
            JSONObject routes = new JSONObject(true);
            for (Object topic : request.getJSONArray("topics")) {
                while (true) {
                    try {
                        List<String> brokers = new ArrayList<>();
                        admin.examineTopicRouteInfo((String) topic).getBrokerDatas()
                            .forEach(data -> brokers.add(data.getBrokerName()));
                        routes.put((String) topic, brokers);
                        break;
                    } catch (Exception notYet) {
                        if (System.currentTimeMillis() > deadline) {
                            throw new IllegalStateException("no route for " + topic, notYet);
                        }
                        Thread.sleep(200);
                    }
                }
            }
            return routes;
        });
    }

    /** The brokers the name server knows: {@code {brokerName: {brokerId: address}}}. */
    static Object cluster(JSONObject request) throws Exception {
        return with(request, admin -> {
            ClusterInfo info = admin.examineBrokerClusterInfo();
            JSONObject brokers = new JSONObject(true);
            info.getBrokerAddrTable().forEach((name, data) -> {
                JSONObject addresses = new JSONObject(true);
                data.getBrokerAddrs().forEach((id, address) -> addresses.put(String.valueOf(id), address));
                brokers.put(name, addresses);
            });
            return brokers;
        });
    }
}
