package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A push consumer (concurrent or orderly) whose listener fails chosen messages: once (they come back from
 * {@code %RETRY%group}) or always (after {@code max_reconsume_times} retries the broker moves them
 * to {@code %DLQ%group}).
 */
final class Push {
    private Push() {
    }

    /**
     * {@code {"group", "topic", "broker", "expect": [uniq keys], "fail_once": [..], "fail_always":
     * [..], "max_reconsume_times", "timeout_ms", "orderly"}}: returns every delivery in arrival
     * order, once each expected message was consumed (or failed for the last time) and the
     * dead-letter queue holds the always-failing ones. With {@code "orderly": true} the listener
     * is a {@code MessageListenerOrderly} (queues locked on the broker; a failure suspends the
     * queue and the client redelivers the same message; {@code fail_always} is not allowed).
     */
    static Object push(JSONObject request) throws Exception {
        Recorder recorder = new Recorder(request);
        long deadline = System.currentTimeMillis() + request.getLongValue("timeout_ms");
        String group = request.getString("group");
        DefaultMQPushConsumer consumer = Clients.configure(new DefaultMQPushConsumer(group), request);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(recorder.maxReconsume);
        consumer.setPersistConsumerOffsetInterval(1000);
        // the listener's last call returns after the waiter woke: shutdown lets it finish and
        // its offset reach the offset store before persisting
        consumer.setAwaitTerminationMillisWhenShutdown(Clients.TIMEOUT_MS);
        consumer.subscribe(request.getString("topic"), "*");
        if (request.getBooleanValue("orderly")) {
            if (!recorder.failAlways.isEmpty()) {
                throw new IllegalArgumentException("push: fail_always needs a concurrent listener");
            }
            consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
                context.setSuspendCurrentQueueTimeMillis(100);
                return recorder.record(messages) ? ConsumeOrderlyStatus.SUCCESS
                    : ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
            });
        } else {
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) ->
                recorder.record(messages) ? ConsumeConcurrentlyStatus.CONSUME_SUCCESS
                    : ConsumeConcurrentlyStatus.RECONSUME_LATER);
        }
        consumer.start();
        try {
            recorder.await(deadline);
            awaitDeadLetters(request, group, recorder.failAlways.size(), deadline);
        } finally {
            consumer.shutdown();
        }
        JSONObject result = new JSONObject(true);
        result.put("deliveries", recorder.deliveries);
        return result;
    }

    /** What the listener saw, and which expected messages are still to come. */
    private static final class Recorder {
        final Set<String> failOnce;
        final Set<String> failAlways;
        final Set<String> failed = new HashSet<>();
        final Set<String> pending;
        final int maxReconsume;
        final List<JSONObject> deliveries = new ArrayList<>();

        Recorder(JSONObject request) {
            failOnce = keys(request, "fail_once");
            failAlways = keys(request, "fail_always");
            pending = keys(request, "expect");
            maxReconsume = request.getIntValue("max_reconsume_times");
        }

        private static Set<String> keys(JSONObject request, String name) {
            JSONArray array = request.getJSONArray(name);
            return array == null ? new HashSet<>() : new HashSet<>(array.toJavaList(String.class));
        }

        /** Records a delivery; false when one of the messages fails this time. */
        synchronized boolean record(List<MessageExt> messages) {
            boolean success = true;
            for (MessageExt message : messages) {
                String key = MessageClientIDSetter.getUniqID(message);
                boolean fail = failAlways.contains(key) || failOnce.contains(key) && failed.add(key);
                JSONObject delivery = Messages.describe(message);
                delivery.put("outcome", fail ? "fail" : "ok");
                deliveries.add(delivery);
                success &= !fail;
                if (!fail || message.getReconsumeTimes() >= maxReconsume) {
                    pending.remove(key);
                }
            }
            notifyAll();
            return success;
        }

        synchronized void await(long deadline) throws InterruptedException {
            while (!pending.isEmpty()) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) {
                    throw new IllegalStateException("push: still waiting for " + pending + " after "
                        + deliveries.size() + " deliveries");
                }
                wait(left);
            }
        }
    }

    @SuppressWarnings("deprecation")
    private static void awaitDeadLetters(JSONObject request, String group, int expected, long deadline) throws Exception {
        if (expected == 0) {
            return;
        }
        DefaultMQPullConsumer probe = Clients.configure(new DefaultMQPullConsumer("lab-dlq-probe"), request);
        probe.start();
        Clients.adminTimeout(probe);
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
