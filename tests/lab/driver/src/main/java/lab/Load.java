package lab;

import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A broker under load (used by {@code bench/broker_load_bench.py}): many senders of the official
 * remoting producer and a concurrent push consumer, in this JVM, against one topic.
 *
 * <p>{@code mode} "sync": {@code threads} threads share one {@code DefaultMQProducer} and send
 * synchronously; "async": one thread keeps {@code in_flight} asynchronous sends outstanding;
 * "tx": {@code threads} threads share one {@code TransactionMQProducer} and send transactional
 * messages whose local transaction commits at once (the half, then END_TRANSACTION, which the
 * client sends one-way; a message counts once its commit was sent). A
 * fresh group's {@code DefaultMQPushConsumer} (default settings, from the first offset) consumes
 * all along. The senders run {@code warmup_ms} first (JIT, connections, the consumer's
 * rebalance), then a window of {@code window_ms} is measured: what was sent (SEND_OK) and what
 * the consumer received in it, both totals at its end, with the window's wall-clock bounds (epoch ms) so that the caller
 * can read the broker's CPU time over the same span. The senders then stop and the consumer gets
 * up to {@code drain_ms} to receive the rest. A send that fails is counted, not fatal; the
 * command fails only when nothing at all was sent.
 */
final class Load {
    private Load() {
    }

    /** {@code {"topic", "group", "mode", "threads", "in_flight", "body_bytes", "warmup_ms",
     * "window_ms", "drain_ms"}}. */
    static Object load(JSONObject request) throws Exception {
        String topic = request.getString("topic");
        String group = request.getString("group");
        AtomicLong consumed = new AtomicLong();
        DefaultMQPushConsumer consumer = Clients.configure(
            new DefaultMQPushConsumer(group + "-consumer"), request);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            consumed.addAndGet(messages.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = "tx".equals(request.getString("mode"))
            ? committing(new TransactionMQProducer(group + "-producer"))
            : new DefaultMQProducer(group + "-producer");
        Clients.configure(producer, request);
        producer.setSendMsgTimeout(Clients.TIMEOUT_MS);
        producer.start();
        Senders senders = new Senders(producer, topic, request);
        try {
            senders.start();
            Thread.sleep(request.getLongValue("warmup_ms"));
            long sentBefore = senders.sent.get();
            long consumedBefore = consumed.get();
            long startedNanos = System.nanoTime();
            long startedMs = System.currentTimeMillis();
            Thread.sleep(request.getLongValue("window_ms"));
            long consumedAtEnd = consumed.get();
            long sentAtEnd = senders.sent.get();
            long sentInWindow = sentAtEnd - sentBefore;
            long consumedInWindow = consumedAtEnd - consumedBefore;
            double windowS = (System.nanoTime() - startedNanos) / 1e9;
            long endedMs = System.currentTimeMillis();
            senders.stop();
            long drainStarted = System.nanoTime();
            long drainDeadline = drainStarted + TimeUnit.MILLISECONDS.toNanos(
                request.getLongValue("drain_ms"));
            while (consumed.get() < senders.sent.get() && System.nanoTime() < drainDeadline) {
                Thread.sleep(20);
            }
            if (senders.sent.get() == 0) {
                throw new IllegalStateException("load: nothing was sent", senders.failure.get());
            }
            JSONObject result = new JSONObject(true);
            result.put("window_s", windowS);
            result.put("window_started_ms", startedMs);
            result.put("window_ended_ms", endedMs);
            result.put("sent_in_window", sentInWindow);
            result.put("consumed_in_window", consumedInWindow);
            result.put("sent_at_window_end", sentAtEnd);
            result.put("consumed_at_window_end", consumedAtEnd);
            result.put("sent", senders.sent.get());
            result.put("consumed", consumed.get());
            result.put("failed", senders.failed.get());
            result.put("first_failure", senders.failure.get() == null ? null
                : String.valueOf(senders.failure.get()));
            result.put("drain_s", (System.nanoTime() - drainStarted) / 1e9);
            return result;
        } finally {
            senders.stop();
            producer.shutdown();
            consumer.shutdown();
        }
    }

    /** {@code producer} with a local transaction that commits every message at once. */
    private static TransactionMQProducer committing(TransactionMQProducer producer) {
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt message) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        return producer;
    }

    /** The sending threads of one mode, counting what was sent and what failed. */
    private static final class Senders {
        final AtomicLong sent = new AtomicLong();
        final AtomicLong failed = new AtomicLong();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        private final DefaultMQProducer producer;
        private final String topic;
        private final byte[] body;
        private final boolean async;
        private final int threads;
        private final Semaphore inFlight;
        private final int inFlightMax;
        private final List<Thread> running = new ArrayList<>();
        private volatile boolean stopping;

        Senders(DefaultMQProducer producer, String topic, JSONObject request) {
            this.producer = producer;
            this.topic = topic;
            this.body = new byte[request.getIntValue("body_bytes")];
            java.util.Arrays.fill(body, (byte) 'x');
            this.async = "async".equals(request.getString("mode"));
            this.threads = async ? 1 : Math.max(1, request.getIntValue("threads"));
            this.inFlightMax = Math.max(1, request.getIntValue("in_flight"));
            this.inFlight = new Semaphore(inFlightMax);
        }

        void start() {
            for (int t = 0; t < threads; t++) {
                Thread thread = new Thread(async ? this::sendAsync : this::sendSync,
                    "load-sender-" + t);
                running.add(thread);
                thread.start();
            }
        }

        void stop() throws InterruptedException {
            stopping = true;
            for (Thread thread : running) {
                thread.join();
            }
            running.clear();
            if (async && inFlight.tryAcquire(inFlightMax, Clients.TIMEOUT_MS,
                    TimeUnit.MILLISECONDS)) {
                inFlight.release(inFlightMax);  // every outstanding send has answered
            }
        }

        private void sendSync() {
            boolean transactional = producer instanceof TransactionMQProducer;
            while (!stopping) {
                try {
                    Message message = new Message(topic, body);
                    if (transactional) {
                        countCommitted(producer.sendMessageInTransaction(message, null));
                    } else {
                        count(producer.send(message));
                    }
                } catch (Throwable error) {
                    fail(error);
                    pause();
                }
            }
        }

        private void sendAsync() {
            while (!stopping) {
                try {
                    if (!inFlight.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                        continue;
                    }
                } catch (InterruptedException interrupted) {
                    return;
                }
                try {
                    producer.send(new Message(topic, body), new SendCallback() {
                        @Override
                        public void onSuccess(SendResult result) {
                            count(result);
                            inFlight.release();
                        }

                        @Override
                        public void onException(Throwable error) {
                            fail(error);
                            inFlight.release();
                        }
                    });
                } catch (Throwable error) {  // refused before it left: no callback comes
                    inFlight.release();
                    fail(error);
                }
            }
        }

        private void countCommitted(TransactionSendResult result) {
            if (result.getLocalTransactionState() == LocalTransactionState.COMMIT_MESSAGE) {
                count(result);
            } else {
                fail(new IllegalStateException("transaction not committed: " + result));
            }
        }

        private void count(SendResult result) {
            if (result.getSendStatus() == SendStatus.SEND_OK) {
                sent.incrementAndGet();
            } else {
                fail(new IllegalStateException("send: " + result));
            }
        }

        private static void pause() {
            try {
                Thread.sleep(10);  // a refused send is not retried in a busy loop
            } catch (InterruptedException interrupted) {
                Thread.currentThread().interrupt();
            }
        }

        private void fail(Throwable error) {
            failed.incrementAndGet();
            failure.compareAndSet(null, error);
        }
    }
}
