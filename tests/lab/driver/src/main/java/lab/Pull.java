package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.common.message.MessageQueue;

/** Reading whole queues with the remoting pull consumer, from the queue's minimum offset. */
final class Pull {
    private static final int BATCH = 32;

    private Pull() {
    }

    /**
     * {@code {"topics": [topic, ...], "queues": [{"topic", "broker", "queue_id"}, ...]}}: every
     * message of every queue of the named topics (the route comes from the name server) and of
     * the listed queues, as {@code {"messages": [...], "queues": [{topic, queue_id, min_offset,
     * max_offset}]}}.
     */
    @SuppressWarnings("deprecation")
    static Object pull(JSONObject request) throws Exception {
        DefaultMQPullConsumer consumer = Clients.configure(
            new DefaultMQPullConsumer(Clients.group(request, "lab-puller")), request);
        consumer.start();
        Clients.adminTimeout(consumer);
        try {
            List<MessageQueue> queues = new ArrayList<>();
            JSONArray topics = request.getJSONArray("topics");
            if (topics != null) {
                for (Object topic : topics) {
                    queues.addAll(consumer.fetchSubscribeMessageQueues((String) topic));
                }
            }
            JSONArray listed = request.getJSONArray("queues");
            if (listed != null) {
                for (Object each : listed) {
                    JSONObject queue = (JSONObject) each;
                    queues.add(new MessageQueue(queue.getString("topic"), queue.getString("broker"),
                        queue.getIntValue("queue_id")));
                }
            }
            queues.sort(Comparator.comparing(MessageQueue::getTopic).thenComparing(MessageQueue::getQueueId));
            List<JSONObject> messages = new ArrayList<>();
            List<JSONObject> described = new ArrayList<>();
            for (MessageQueue queue : queues) {
                described.add(readQueue(consumer, queue, messages));
            }
            JSONObject result = new JSONObject(true);
            result.put("queues", described);
            result.put("messages", messages);
            return result;
        } finally {
            consumer.shutdown();
        }
    }

    @SuppressWarnings("deprecation")
    private static JSONObject readQueue(DefaultMQPullConsumer consumer, MessageQueue queue,
                                        List<JSONObject> into) throws Exception {
        long min = consumer.minOffset(queue);
        long max = consumer.maxOffset(queue);
        long offset = min;
        while (offset < max) {
            PullResult result = consumer.pull(queue, "*", offset, BATCH, Clients.TIMEOUT_MS);
            if (result.getPullStatus() != PullStatus.FOUND) {
                throw new IllegalStateException("pull " + queue + " at " + offset + " of [" + min
                    + ", " + max + "): " + result.getPullStatus());
            }
            into.addAll(Messages.describeAll(result.getMsgFoundList()));
            offset = result.getNextBeginOffset();
        }
        JSONObject json = new JSONObject(true);
        json.put("topic", queue.getTopic());
        json.put("broker", queue.getBrokerName());
        json.put("queue_id", queue.getQueueId());
        json.put("min_offset", min);
        json.put("max_offset", max);
        return json;
    }
}
