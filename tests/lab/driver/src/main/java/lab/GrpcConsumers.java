package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.message.MessageViewImpl;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;

/**
 * The gRPC client's consumers (rocketmq-client-java) for scenarios that compare brokers: each
 * delivery is reported with its arrival time, delivery attempt and the client's own "corrupted"
 * verdict (body digest), so the caller sees redelivery timing, tag filtering and dead-lettering.
 *
 * <p>Messages are named by their body text. Both commands start the consumer first, then send the
 * request's {@code send} messages with a Producer from the same process (so a new group misses
 * nothing), then collect until every message in {@code expect} is settled (acked, or delivered
 * {@code max_attempts} times if it is never acked) or {@code timeout_ms} passes, and finally keep
 * listening {@code quiet_ms} longer to catch extra deliveries.
 */
final class GrpcConsumers {
    private GrpcConsumers() {
    }

    /** What the scenario knows about one message name: deliveries so far, settled or not. */
    private static final class Book {
        final List<JSONObject> deliveries = new ArrayList<>();
        final Map<String, Integer> seen = new HashMap<>();
        final Map<String, Boolean> settled = new HashMap<>();

        /** Records one delivery; returns its body text (the message's name). */
        synchronized String record(MessageView view, long atMs) {
            JSONObject delivery = Grpc.describe(view);
            String body = bodyText(delivery);
            delivery.put("body", body);
            delivery.put("at_ms", atMs);
            delivery.put("corrupted", view instanceof MessageViewImpl && ((MessageViewImpl) view).isCorrupted());
            deliveries.add(delivery);
            seen.merge(body, 1, Integer::sum);
            return body;
        }

        synchronized void settle(String body) {
            settled.put(body, true);
        }

        synchronized boolean done(List<String> expect, Map<String, Integer> okAt, int maxAttempts) {
            for (String body : expect) {
                int at = okAt.getOrDefault(body, 1);
                boolean exhausted = at <= 0 && seen.getOrDefault(body, 0) >= maxAttempts;
                if (!settled.getOrDefault(body, false) && !exhausted) {
                    return false;
                }
            }
            return true;
        }

        synchronized JSONObject report(List<Object> sent) {
            JSONObject result = new JSONObject(true);
            result.put("sent", sent);
            result.put("deliveries", new ArrayList<>(deliveries));
            return result;
        }
    }

    static String bodyText(JSONObject delivery) {
        return new String(Base64.getDecoder().decode(delivery.getString("body_b64")), StandardCharsets.UTF_8);
    }

    /** {@code {"body": attempt}}: the attempt that succeeds (1 by default; 0 = never). */
    private static Map<String, Integer> okAt(JSONObject request) {
        Map<String, Integer> okAt = new HashMap<>();
        JSONObject given = request.getJSONObject("ok_at");
        if (given != null) {
            given.forEach((body, attempt) -> okAt.put(body, ((Number) attempt).intValue()));
        }
        return okAt;
    }

    private static boolean succeeds(Map<String, Integer> okAt, String body, int attempt) {
        int at = okAt.getOrDefault(body, 1);
        return at > 0 && attempt >= at;
    }

    private static Map<String, FilterExpression> subscription(JSONObject request) {
        String filter = request.containsKey("filter") ? request.getString("filter") : "*";
        return Map.of(request.getString("topic"), new FilterExpression(filter, FilterExpressionType.TAG));
    }

    /**
     * Sends {@code send} (the {@code grpc-produce} message specs; {@code delay_ms} there becomes a
     * delivery timestamp that many milliseconds after the send); returns the message ids in order.
     */
    private static List<Object> sendAll(JSONObject request) throws Exception {
        JSONArray send = request.getJSONArray("send");
        if (send == null || send.isEmpty()) {
            return new ArrayList<>();
        }
        JSONArray messages = new JSONArray();
        for (int index = 0; index < send.size(); index++) {
            JSONObject spec = new JSONObject(send.getJSONObject(index));
            if (spec.containsKey("delay_ms")) {
                spec.put("delivery_timestamp", System.currentTimeMillis() + spec.getLongValue("delay_ms"));
            }
            messages.add(spec);
        }
        JSONObject produce = new JSONObject(request);
        produce.put("messages", messages);
        List<Object> ids = new ArrayList<>();
        for (Object receipt : (List<?>) Grpc.produce(produce)) {
            ids.add(((JSONObject) receipt).getString("message_id"));
        }
        return ids;
    }

    /** Waits until the book is done or the time is up, then {@code quiet_ms} more. */
    private static void collect(JSONObject request, Book book, Runnable poll) {
        List<String> expect = request.getJSONArray("expect").toJavaList(String.class);
        Map<String, Integer> okAt = okAt(request);
        int maxAttempts = request.getIntValue("max_attempts");
        long deadline = System.currentTimeMillis() + request.getLongValue("timeout_ms");
        while (!book.done(expect, okAt, maxAttempts) && System.currentTimeMillis() < deadline) {
            poll.run();
        }
        long quietEnd = System.currentTimeMillis() + request.getLongValue("quiet_ms");
        while (System.currentTimeMillis() < quietEnd) {
            poll.run();
        }
    }

    /**
     * {@code grpc-simple}: {@code {"endpoints", "group", "topic", "filter", "invisible_ms", "send",
     * "expect", "ok_at", "max_attempts", "timeout_ms", "quiet_ms"}}. A delivery whose attempt has
     * not reached its {@code ok_at} is left unacknowledged (it comes back after the invisible time).
     */
    static Object simple(JSONObject request) throws Exception {
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        Map<String, Integer> okAt = okAt(request);
        Duration invisible = Duration.ofMillis(request.getLongValue("invisible_ms"));
        Book book = new Book();
        List<Object> sent;
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(Grpc.configuration(request)).setConsumerGroup(request.getString("group"))
            .setAwaitDuration(Duration.ofSeconds(1)).setSubscriptionExpressions(subscription(request)).build()) {
            sent = sendAll(request);
            collect(request, book, () -> {
                try {
                    for (MessageView view : consumer.receive(16, invisible)) {
                        long atMs = System.currentTimeMillis();
                        String body = book.record(view, atMs);
                        if (succeeds(okAt, body, view.getDeliveryAttempt())) {
                            consumer.ack(view);
                            book.settle(body);
                        }
                    }
                } catch (Exception failure) {
                    throw new IllegalStateException(failure);
                }
            });
        }
        return book.report(sent);
    }

    /**
     * {@code grpc-push}: {@code {"endpoints", "group", "topic", "filter", "send", "expect",
     * "ok_at", "max_attempts", "timeout_ms", "quiet_ms"}}. The listener returns FAILURE for a
     * delivery whose attempt has not reached its {@code ok_at}, SUCCESS otherwise.
     */
    static Object push(JSONObject request) throws Exception {
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        Map<String, Integer> okAt = okAt(request);
        Book book = new Book();
        List<Object> sent;
        try (PushConsumer consumer = provider.newPushConsumerBuilder()
            .setClientConfiguration(Grpc.configuration(request)).setConsumerGroup(request.getString("group"))
            .setSubscriptionExpressions(subscription(request)).setConsumptionThreadCount(4)
            .setMessageListener(view -> {
                long atMs = System.currentTimeMillis();
                String body = book.record(view, atMs);
                if (succeeds(okAt, body, view.getDeliveryAttempt())) {
                    book.settle(body);
                    return ConsumeResult.SUCCESS;
                }
                return ConsumeResult.FAILURE;
            }).build()) {
            sent = sendAll(request);
            collect(request, book, () -> {
                try {
                    Thread.sleep(100);
                } catch (InterruptedException interrupted) {
                    Thread.currentThread().interrupt();
                }
            });
        }
        return book.report(sent);
    }

    /**
     * {@code lab-setup}: {@code {"broker_addr", "topics": [{"topic", "queues", "message_type"}],
     * "groups": [{"group", "retry_max_times", "orderly"}]}}, in one admin session.
     */
    static Object setup(JSONObject request) throws Exception {
        String broker = request.getString("broker_addr");
        return Admin.with(request, admin -> {
            List<String> done = new ArrayList<>();
            JSONArray topics = request.getJSONArray("topics");
            for (int index = 0; topics != null && index < topics.size(); index++) {
                JSONObject spec = topics.getJSONObject(index);
                TopicConfig config = new TopicConfig(spec.getString("topic"));
                int queues = spec.getIntValue("queues") > 0 ? spec.getIntValue("queues") : 4;
                config.setReadQueueNums(queues);
                config.setWriteQueueNums(queues);
                Map<String, String> attributes = new HashMap<>();
                attributes.put("+message.type", spec.containsKey("message_type") ? spec.getString("message_type") : "NORMAL");
                config.setAttributes(attributes);
                admin.createAndUpdateTopicConfig(broker, config);
                done.add("topic " + config.getTopicName());
            }
            JSONArray groups = request.getJSONArray("groups");
            for (int index = 0; groups != null && index < groups.size(); index++) {
                JSONObject spec = groups.getJSONObject(index);
                SubscriptionGroupConfig config = new SubscriptionGroupConfig();
                config.setGroupName(spec.getString("group"));
                if (spec.containsKey("retry_max_times")) {
                    config.setRetryMaxTimes(spec.getIntValue("retry_max_times"));
                }
                config.setConsumeMessageOrderly(spec.getBooleanValue("orderly"));
                admin.createAndUpdateSubscriptionGroupConfig(broker, config);
                done.add("group " + config.getGroupName());
            }
            return done;
        });
    }
}
