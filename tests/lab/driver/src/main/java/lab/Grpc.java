package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/** The RocketMQ 5 gRPC client (rocketmq-client-java) through a proxy. */
final class Grpc {
    private Grpc() {
    }

    static ClientConfiguration configuration(JSONObject request) {
        return ClientConfiguration.newBuilder().setEndpoints(request.getString("endpoints"))
            .enableSsl(false).setRequestTimeout(Duration.ofSeconds(10)).build();
    }

    /**
     * {@code {"endpoints", "topic", "messages": [{"tags", "keys", "properties", "body" | "body_b64",
     * "message_group", "delivery_timestamp"}]}}: the message id of each send.
     */
    static Object produce(JSONObject request) throws Exception {
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        String topic = request.getString("topic");
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(configuration(request))
            .setTopics(topic).build()) {
            List<JSONObject> results = new ArrayList<>();
            for (Object each : request.getJSONArray("messages")) {
                SendReceipt receipt = producer.send(build(provider, topic, (JSONObject) each));
                JSONObject json = new JSONObject(true);
                json.put("message_id", receipt.getMessageId().toString());
                results.add(json);
            }
            return results;
        }
    }

    private static Message build(ClientServiceProvider provider, String topic, JSONObject spec) {
        MessageBuilder builder = provider.newMessageBuilder().setTopic(topic).setBody(Messages.body(spec));
        if (spec.containsKey("tags")) {
            builder.setTag(spec.getString("tags"));
        }
        JSONArray keys = spec.getJSONArray("keys");
        if (keys != null) {
            builder.setKeys(keys.toArray(new String[0]));
        }
        JSONObject properties = spec.getJSONObject("properties");
        if (properties != null) {
            for (Map.Entry<String, Object> entry : properties.entrySet()) {
                builder.addProperty(entry.getKey(), String.valueOf(entry.getValue()));
            }
        }
        if (spec.containsKey("message_group")) {
            builder.setMessageGroup(spec.getString("message_group"));
        }
        if (spec.containsKey("delivery_timestamp")) {
            builder.setDeliveryTimestamp(spec.getLongValue("delivery_timestamp"));
        }
        return builder.build();
    }

    /**
     * {@code {"endpoints", "group", "topic", "expect", "timeout_ms", "invisible_ms"}}: receives
     * (and acknowledges) until {@code expect} messages arrived or the time is up.
     */
    static Object receive(JSONObject request) throws Exception {
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        int expect = request.getIntValue("expect");
        long deadline = System.currentTimeMillis() + request.getLongValue("timeout_ms");
        long invisibleMs = request.containsKey("invisible_ms") ? request.getLongValue("invisible_ms") : 30000;
        List<JSONObject> received = new ArrayList<>();
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(configuration(request)).setConsumerGroup(request.getString("group"))
            .setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Map.of(request.getString("topic"),
                new FilterExpression("*", FilterExpressionType.TAG)))
            .build()) {
            while (received.size() < expect && System.currentTimeMillis() < deadline) {
                for (MessageView view : consumer.receive(16, Duration.ofMillis(invisibleMs))) {
                    received.add(describe(view));
                    consumer.ack(view);
                }
            }
        }
        JSONObject result = new JSONObject(true);
        result.put("messages", received);
        return result;
    }

    static JSONObject describe(MessageView view) {
        JSONObject json = new JSONObject(true);
        json.put("message_id", view.getMessageId().toString());
        json.put("topic", view.getTopic());
        json.put("tags", view.getTag().orElse(null));
        json.put("keys", new ArrayList<>(view.getKeys()));
        json.put("properties", new TreeMap<>(view.getProperties()));
        ByteBuffer body = view.getBody();
        byte[] bytes = new byte[body.remaining()];
        body.get(bytes);
        json.put("body_b64", Base64.getEncoder().encodeToString(bytes));
        json.put("message_group", view.getMessageGroup().orElse(null));
        json.put("delivery_timestamp", view.getDeliveryTimestamp().orElse(null));
        json.put("born_host", view.getBornHost());
        json.put("born_timestamp", view.getBornTimestamp());
        json.put("delivery_attempt", view.getDeliveryAttempt());
        return json;
    }
}
