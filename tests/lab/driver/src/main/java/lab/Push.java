package lab;

import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A push consumer whose listener fails chosen messages: once (they come back from
 * {@code %RETRY%group}) or always (after {@code max_reconsume_times} retries the broker moves them
 * to {@code %DLQ%group}).
 */
final class Push {
    private Push() {
    }

    /**
     * {@code {"group", "topic", "broker", "expect": [uniq keys], "fail_once": [..], "fail_always":
     * [..], "max_reconsume_times", "timeout_ms"}}: returns every delivery in arrival order, once
     * each expected message was consumed (or failed for the last time) and the dead-letter queue
     * holds the always-failing ones.
     */
    static Object push(JSONObject request) throws Exception {
        Set<String> failOnce = new HashSet<>(request.getJSONArray("fail_once").toJavaList(String.class));
        Set<String> failAlways = new HashSet<>(request.getJSONArray("fail_always").toJavaList(String.class));
        Set<String> pending = new HashSet<>(request.getJSONArray("expect").toJavaList(String.class));
        int maxReconsume = request.getIntValue("max_reconsume_times");
        long deadline = System.currentTimeMillis() + request.getLongValue("timeout_ms");
        List<JSONObject> deliveries = new ArrayList<>();
        String group = request.getString("group");
        DefaultMQPushConsumer consumer = Clients.configure(new DefaultMQPushConsumer(group), request);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(maxReconsume);
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.subscribe(request.getString("topic"), "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            synchronized (deliveries) {
                for (MessageExt message : messages) {
                    String key = MessageClientIDSetter.getUniqID(message);
                    boolean fail = failAlways.contains(key) || failOnce.contains(key) && message.getReconsumeTimes() == 0;
                    JSONObject delivery = Messages.describe(message);
                    delivery.put("outcome", fail ? "fail" : "ok");
                    deliveries.add(delivery);
                    if (fail) {
                        status = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    if (!fail || message.getReconsumeTimes() >= maxReconsume) {
                        pending.remove(key);
                    }
                }
                deliveries.notifyAll();
            }
            return status;
        });
        consumer.start();
        try {
            synchronized (deliveries) {
                while (!pending.isEmpty()) {
                    long left = deadline - System.currentTimeMillis();
                    if (left <= 0) {
                        throw new IllegalStateException("push: still waiting for " + pending + " after "
                            + deliveries.size() + " deliveries");
                    }
                    deliveries.wait(left);
                }
            }
            awaitDeadLetters(request, group, failAlways.size(), deadline);
        } finally {
            consumer.shutdown();
        }
        JSONObject result = new JSONObject(true);
        result.put("deliveries", deliveries);
        return result;
    }

    @SuppressWarnings("deprecation")
    private static void awaitDeadLetters(JSONObject request, String group, int expected, long deadline) throws Exception {
        if (expected == 0) {
            return;
        }
        DefaultMQPullConsumer probe = Clients.configure(new DefaultMQPullConsumer("lab-dlq-probe"), request);
        probe.start();
        try {
            probe.fetchSubscribeMessageQueues(request.getString("topic"));
            MessageQueue dlq = new MessageQueue("%DLQ%" + group, request.getString("broker"), 0);
            long count = -1;
            while (System.currentTimeMillis() < deadline) {
                try {
                    count = probe.maxOffset(dlq);
                } catch (Exception notYetCreated) {
                    count = -1;
                }
                if (count >= expected) {
                    return;
                }
                TimeUnit.MILLISECONDS.sleep(200);
            }
            throw new IllegalStateException("push: " + dlq + " holds " + count + " of " + expected + " messages");
        } finally {
            probe.shutdown();
        }
    }
}
