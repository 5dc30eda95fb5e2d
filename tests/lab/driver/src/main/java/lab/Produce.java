package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/** Sending with the remoting client: plain, batch, orderly (by selector) and transactional messages. */
final class Produce {
    private Produce() {
    }

    /** Orderly sending: messages with the same order key go to the same queue (key hash). */
    static final MessageQueueSelector BY_ORDER_KEY = (queues, message, key) ->
        queues.get(Math.floorMod(key.hashCode(), queues.size()));

    /**
     * {@code {"sends": [{"message": spec} | {"message": spec, "order_key": key} | {"batch": [spec,
     * ...]}]}}: one result per send, in order (a batch's result lists the unique keys of its
     * messages in {@code msg_id}; an order key picks the queue through a selector).
     */
    static Object produce(JSONObject request) throws Exception {
        DefaultMQProducer producer = Clients.configure(
            new DefaultMQProducer(Clients.group(request, "lab-producer")), request);
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(Clients.TIMEOUT_MS);
        producer.start();
        try {
            List<JSONObject> results = new ArrayList<>();
            for (Object each : request.getJSONArray("sends")) {
                JSONObject send = (JSONObject) each;
                SendResult result;
                if (send.containsKey("batch")) {
                    List<Message> batch = new ArrayList<>();
                    for (Object spec : send.getJSONArray("batch")) {
                        batch.add(Messages.build((JSONObject) spec));
                    }
                    result = producer.send(batch);
                } else if (send.containsKey("order_key")) {
                    result = producer.send(Messages.build(send.getJSONObject("message")), BY_ORDER_KEY,
                        send.getString("order_key"));
                } else {
                    result = producer.send(Messages.build(send.getJSONObject("message")));
                }
                results.add(Messages.sendResult(result));
            }
            return results;
        } finally {
            producer.shutdown();
        }
    }

    /**
     * {@code {"messages": [spec + "outcome": "commit" | "rollback" | "unknown", optional "check":
     * the answer to a broker check (default: the outcome)], "linger_ms": time to stay up after
     * the sends, answering checks (default 0)}}: half messages whose local transaction commits,
     * rolls back or does not know yet.
     */
    static Object transaction(JSONObject request) throws Exception {
        TransactionMQProducer producer = Clients.configure(
            new TransactionMQProducer(Clients.group(request, "lab-tx-producer")), request);
        producer.setSendMsgTimeout(Clients.TIMEOUT_MS);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message message, Object outcome) {
                return state((String) outcome);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt message) {
                String check = message.getUserProperty("lab_check");
                return state(check != null ? check : message.getUserProperty("lab_outcome"));
            }
        });
        producer.start();
        try {
            List<JSONObject> results = new ArrayList<>();
            JSONArray messages = request.getJSONArray("messages");
            for (Object each : messages) {
                JSONObject spec = (JSONObject) each;
                Message message = Messages.build(spec);
                message.putUserProperty("lab_outcome", spec.getString("outcome"));
                if (spec.containsKey("check")) {
                    message.putUserProperty("lab_check", spec.getString("check"));
                }
                TransactionSendResult result = producer.sendMessageInTransaction(message, spec.getString("outcome"));
                JSONObject json = Messages.sendResult(result);
                json.put("local_state", result.getLocalTransactionState().name());
                results.add(json);
            }
            Thread.sleep(request.getLongValue("linger_ms"));
            return results;
        } finally {
            producer.shutdown();
        }
    }

    static LocalTransactionState state(String outcome) {
        if ("unknown".equals(outcome)) {
            return LocalTransactionState.UNKNOW;
        }
        return "commit".equals(outcome) ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
    }
}
