package lab;

import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Throughput of the official remoting producer and push consumer, both in this JVM (used by
 * {@code bench/remoting_peers_bench.py}).
 *
 * <p>Send: {@code threads} threads share one {@code DefaultMQProducer} and each sends its share
 * of {@code count} messages of {@code body_bytes} bytes synchronously (every send must be
 * SEND_OK); the clock runs from the first send until the last returned. Consume: a fresh group's
 * {@code DefaultMQPushConsumer} (default settings, from the first offset) starts; the clock runs
 * from {@code start()} until its listener saw every message sent (distinct unique keys).
 */
final class Bench {
    private Bench() {
    }

    /** {@code {"topic", "group", "count", "body_bytes", "threads", "timeout_ms"}}. */
    static Object bench(JSONObject request) throws Exception {
        String topic = request.getString("topic");
        int count = request.getIntValue("count");
        long timeoutMs = request.getLongValue("timeout_ms");
        JSONObject result = new JSONObject(true);
        result.put("count", count);
        result.put("send_s", send(request, topic, count, timeoutMs));
        result.put("consume_s", consume(request, topic, count, timeoutMs));
        return result;
    }

    private static double send(JSONObject request, String topic, int count, long timeoutMs) throws Exception {
        DefaultMQProducer producer = Clients.configure(
            new DefaultMQProducer(request.getString("group") + "-producer"), request);
        producer.setSendMsgTimeout(Clients.TIMEOUT_MS);
        producer.start();
        int threads = Math.max(1, request.getIntValue("threads"));
        byte[] body = new byte[request.getIntValue("body_bytes")];
        java.util.Arrays.fill(body, (byte) 'x');
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(threads);
        List<Thread> senders = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int share = count / threads + (t < count % threads ? 1 : 0);
            senders.add(new Thread(() -> {
                try {
                    for (int i = 0; i < share && failure.get() == null; i++) {
                        SendResult sent = producer.send(new Message(topic, body));
                        if (sent.getSendStatus() != SendStatus.SEND_OK) {
                            throw new IllegalStateException("send: " + sent);
                        }
                    }
                } catch (Throwable error) {
                    failure.compareAndSet(null, error);
                } finally {
                    done.countDown();
                }
            }, "bench-sender-" + t));
        }
        long started = System.nanoTime();
        senders.forEach(Thread::start);
        boolean finished = done.await(timeoutMs, TimeUnit.MILLISECONDS);
        double seconds = (System.nanoTime() - started) / 1e9;
        producer.shutdown();
        if (failure.get() != null) {
            throw new IllegalStateException("bench send failed", failure.get());
        }
        if (!finished) {
            throw new IllegalStateException("bench send: not done after " + timeoutMs + " ms");
        }
        return seconds;
    }

    private static double consume(JSONObject request, String topic, int count, long timeoutMs) throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch all = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = Clients.configure(
            new DefaultMQPushConsumer(request.getString("group") + "-consumer"), request);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                seen.add(MessageClientIDSetter.getUniqID(message));
            }
            if (seen.size() >= count) {
                all.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long started = System.nanoTime();
        consumer.start();
        boolean finished = all.await(timeoutMs, TimeUnit.MILLISECONDS);
        double seconds = (System.nanoTime() - started) / 1e9;
        consumer.shutdown();
        if (!finished) {
            throw new IllegalStateException("bench consume: " + seen.size() + " of " + count
                + " after " + timeoutMs + " ms");
        }
        return seconds;
    }
}
