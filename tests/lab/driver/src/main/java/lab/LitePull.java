package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The remoting client's lite pull consumer: in subscribe mode (the client rebalances the topic's
 * queues within its group) or assign mode (the caller names the queues), with seeks, then a
 * synchronous commit that is persisted to the broker, and the committed offsets read back from
 * the broker.
 */
final class LitePull {
    private LitePull() {
    }

    /**
     * {@code {"group", "topic", "mode": "subscribe" | "assign", "expect": count, "seek":
     * [{"queue_id", "offset"}], "expect_after_seek": count, "timeout_ms"}}: polls until {@code
     * expect} messages arrived; then, if seeks are given (assign mode), moves those queues to
     * the offsets and polls {@code expect_after_seek} more; commits and persists the offsets
     * after everything polled and returns {@code {"messages": [...], "after_seek": [...],
     * "queues": [{queue_id, committed}]}} (committed = what the broker now holds for the
     * group, -1 for none).
     */
    static Object litePull(JSONObject request) throws Exception {
        DefaultLitePullConsumer consumer = Clients.configure(
            new DefaultLitePullConsumer(request.getString("group")), request);
        consumer.setAutoCommit(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollTimeoutMillis(1000);
        String topic = request.getString("topic");
        boolean assign = "assign".equals(request.getString("mode"));
        if (!assign) {
            consumer.subscribe(topic, "*");
        }
        consumer.start();
        Clients.adminTimeout(consumer);
        try {
            List<MessageQueue> queues = new ArrayList<>(consumer.fetchMessageQueues(topic));
            queues.sort(Comparator.comparingInt(MessageQueue::getQueueId));
            if (assign) {
                consumer.assign(queues);
            }
            long deadline = System.currentTimeMillis() + request.getLongValue("timeout_ms");
            List<MessageExt> polled = poll(consumer, request.getIntValue("expect"), deadline);
            List<MessageExt> afterSeek = List.of();
            if (request.containsKey("seek")) {
                seek(consumer, queues, request.getJSONArray("seek"));
                afterSeek = poll(consumer, request.getIntValue("expect_after_seek"), deadline);
            }
            Map<MessageQueue, Long> next = new HashMap<>();
            for (MessageExt message : concat(polled, afterSeek)) {
                MessageQueue queue = new MessageQueue(topic, message.getBrokerName(), message.getQueueId());
                next.merge(queue, message.getQueueOffset() + 1, Math::max);
            }
            consumer.commitSync(next, true);
            JSONObject result = new JSONObject(true);
            result.put("messages", Messages.describeAll(polled));
            result.put("after_seek", Messages.describeAll(afterSeek));
            result.put("queues", committed(consumer, queues));
            return result;
        } finally {
            consumer.shutdown();
        }
    }

    private static List<MessageExt> concat(List<MessageExt> first, List<MessageExt> second) {
        List<MessageExt> both = new ArrayList<>(first);
        both.addAll(second);
        return both;
    }

    private static void seek(DefaultLitePullConsumer consumer, List<MessageQueue> queues,
                             JSONArray seeks) throws Exception {
        if (seeks == null) {
            return;
        }
        for (Object each : seeks) {
            JSONObject seek = (JSONObject) each;
            for (MessageQueue queue : queues) {
                if (queue.getQueueId() == seek.getIntValue("queue_id")) {
                    consumer.seek(queue, seek.getLongValue("offset"));
                }
            }
        }
    }

    private static List<MessageExt> poll(DefaultLitePullConsumer consumer, int expect, long deadline) {
        List<MessageExt> polled = new ArrayList<>();
        while (polled.size() < expect) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("lite-pull: " + polled.size() + " of " + expect
                    + " messages before the deadline");
            }
            polled.addAll(consumer.poll());
        }
        return polled;
    }

    private static List<JSONObject> committed(DefaultLitePullConsumer consumer,
                                              List<MessageQueue> queues) throws Exception {
        List<JSONObject> rows = new ArrayList<>();
        for (MessageQueue queue : queues) {
            JSONObject row = new JSONObject(true);
            row.put("queue_id", queue.getQueueId());
            Long committed = consumer.committed(queue);
            row.put("committed", committed == null ? -1 : committed);
            rows.add(row);
        }
        return rows;
    }
}
