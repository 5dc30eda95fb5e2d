// Receives messages from a Postbox broker with the official RocketMQ 5 Java gRPC client
// (rocketmq-client-java) and reports, as one JSON line on stdout, whether the client flagged
// any of them as corrupted (its body-digest check, MessageViewImpl.isCorrupted()).
//
// Usage: java DigestCheck <host:port> <topic> <group> <expected count> <timeout ms>
// Output: {"received": N, "corrupted": C, "messages": [{"body_hex": "...", "corrupted": b}]}
// Every received message is acknowledged. Exit code 0 when the expected count was received
// before the timeout, 2 otherwise (the JSON line is printed either way).

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

public final class DigestCheck {
    private DigestCheck() {
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        String group = args[2];
        int expected = Integer.parseInt(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(30)).build();  // a loaded machine starts slowly
        List<String> lines = new ArrayList<>();
        int corrupted = 0;
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(configuration)
                .setConsumerGroup(group)
                .setAwaitDuration(Duration.ofSeconds(2))
                .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
                .build()) {
            while (lines.size() < expected && System.currentTimeMillis() < deadline) {
                for (MessageView view : consumer.receive(16, Duration.ofSeconds(30))) {
                    boolean flagged = ((MessageViewImpl) view).isCorrupted();
                    corrupted += flagged ? 1 : 0;
                    lines.add("{\"body_hex\": \"" + hex(view.getBody()) + "\", \"corrupted\": "
                        + flagged + "}");
                    consumer.ack(view);
                }
            }
        }
        System.out.println("{\"received\": " + lines.size() + ", \"corrupted\": " + corrupted
            + ", \"messages\": [" + String.join(", ", lines) + "]}");
        System.exit(lines.size() >= expected ? 0 : 2);
    }

    private static String hex(ByteBuffer body) {
        StringBuilder text = new StringBuilder();
        ByteBuffer copy = body.duplicate();
        while (copy.hasRemaining()) {
            text.append(String.format("%02x", copy.get() & 0xff));
        }
        return text.toString();
    }
}
