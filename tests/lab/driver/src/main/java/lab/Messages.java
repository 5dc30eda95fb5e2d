package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;

/** Messages from request JSON, and what a client saw of a message as JSON. */
final class Messages {
    private Messages() {
    }

    /**
     * A remoting-client message from {@code {"topic", "tags", "keys": [..], "properties": {..},
     * "body" (text) | "body_b64", "delay_level", "delay_ms", "deliver_time_ms" (RocketMQ 5's timer to a
     * moment, {@code TIMER_DELIVER_MS}), "flag"}}.
     */
    static Message build(JSONObject spec) {
        Message message = new Message(spec.getString("topic"), body(spec));
        if (spec.containsKey("tags")) {
            message.setTags(spec.getString("tags"));
        }
        JSONArray keys = spec.getJSONArray("keys");
        if (keys != null) {
            message.setKeys(keys.toJavaList(String.class));
        }
        JSONObject properties = spec.getJSONObject("properties");
        if (properties != null) {
            for (Map.Entry<String, Object> entry : properties.entrySet()) {
                message.putUserProperty(entry.getKey(), String.valueOf(entry.getValue()));
            }
        }
        if (spec.containsKey("delay_level")) {
            message.setDelayTimeLevel(spec.getIntValue("delay_level"));
        }
        if (spec.containsKey("delay_ms")) {
            message.setDelayTimeMs(spec.getLongValue("delay_ms"));
        }
        if (spec.containsKey("deliver_time_ms")) {
            message.setDeliverTimeMs(spec.getLongValue("deliver_time_ms"));
        }
        if (spec.containsKey("flag")) {
            message.setFlag(spec.getIntValue("flag"));
        }
        return message;
    }

    static byte[] body(JSONObject spec) {
        if (spec.containsKey("body_b64")) {
            return Base64.getDecoder().decode(spec.getString("body_b64"));
        }
        return spec.getString("body").getBytes(StandardCharsets.UTF_8);
    }

    static JSONObject sendResult(SendResult result) {
        JSONObject json = new JSONObject(true);
        json.put("status", result.getSendStatus().name());
        json.put("msg_id", result.getMsgId());
        json.put("offset_msg_id", result.getOffsetMsgId());
        json.put("topic", result.getMessageQueue().getTopic());
        json.put("queue_id", result.getMessageQueue().getQueueId());
        json.put("queue_offset", result.getQueueOffset());
        json.put("transaction_id", result.getTransactionId());
        return json;
    }

    /** Everything the client decoded from one stored message. */
    static JSONObject describe(MessageExt message) {
        JSONObject json = new JSONObject(true);
        json.put("topic", message.getTopic());
        json.put("queue_id", message.getQueueId());
        json.put("queue_offset", message.getQueueOffset());
        json.put("commit_log_offset", message.getCommitLogOffset());
        json.put("store_size", message.getStoreSize());
        json.put("offset_msg_id", offsetMsgId(message));
        json.put("uniq_key", MessageClientIDSetter.getUniqID(message));
        json.put("tags", message.getTags());
        json.put("keys", message.getKeys());
        json.put("properties", new TreeMap<>(message.getProperties()));
        json.put("body_b64", Base64.getEncoder().encodeToString(message.getBody() == null ? new byte[0] : message.getBody()));
        json.put("body_crc", message.getBodyCRC());
        json.put("flag", message.getFlag());
        json.put("sys_flag", message.getSysFlag());
        json.put("born_timestamp", message.getBornTimestamp());
        json.put("store_timestamp", message.getStoreTimestamp());
        json.put("born_host", host(message.getBornHost()));
        json.put("store_host", host(message.getStoreHost()));
        json.put("reconsume_times", message.getReconsumeTimes());
        json.put("prepared_transaction_offset", message.getPreparedTransactionOffset());
        return json;
    }

    static List<JSONObject> describeAll(List<MessageExt> messages) {
        List<JSONObject> described = new ArrayList<>();
        if (messages != null) {
            for (MessageExt message : messages) {
                described.add(describe(message));
            }
        }
        return described;
    }

    static String offsetMsgId(MessageExt message) {
        if (message instanceof MessageClientExt) {
            return ((MessageClientExt) message).getOffsetMsgId();
        }
        return message.getMsgId();
    }

    static String host(SocketAddress address) {
        if (address instanceof InetSocketAddress) {
            InetSocketAddress inet = (InetSocketAddress) address;
            return inet.getAddress().getHostAddress() + ":" + inet.getPort();
        }
        return String.valueOf(address);
    }
}
