package lab;

import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.ResponseCode;

/** The broker's query services, through DefaultMQAdminExt. */
final class Query {
    private static final int MAX_NUM = 64;

    private Query() {
    }

    /**
     * {@code {"cluster", "begin", "end", "by_key": [{topic, key}], "by_uniq_key": [{topic, key}],
     * "by_msg_id": [{topic, msg_id}], "by_time": [{topic, broker, queue_id, timestamp}]}}: the
     * answers in the same order, messages as the pull command reports them.
     */
    static Object query(JSONObject request) throws Exception {
        long begin = request.getLongValue("begin");
        long end = request.containsKey("end") ? request.getLongValue("end") : Long.MAX_VALUE;
        return Admin.with(request, admin -> {
            JSONObject result = new JSONObject(true);
            List<Object> byKey = new ArrayList<>();
            for (JSONObject ask : list(request, "by_key")) {
                byKey.add(found(() -> admin.queryMessage(ask.getString("topic"),
                    ask.getString("key"), MAX_NUM, begin, end)));
            }
            result.put("by_key", byKey);
            List<Object> byUniqKey = new ArrayList<>();
            for (JSONObject ask : list(request, "by_uniq_key")) {
                byUniqKey.add(found(() -> admin.queryMessageByUniqKey(request.getString("cluster"),
                    ask.getString("topic"), ask.getString("key"), MAX_NUM, begin, end)));
            }
            result.put("by_uniq_key", byUniqKey);
            List<Object> byMsgId = new ArrayList<>();
            for (JSONObject ask : list(request, "by_msg_id")) {
                byMsgId.add(Messages.describe(admin.viewMessage(ask.getString("topic"), ask.getString("msg_id"))));
            }
            result.put("by_msg_id", byMsgId);
            List<Object> byTime = new ArrayList<>();
            for (JSONObject ask : list(request, "by_time")) {
                MessageQueue queue = new MessageQueue(ask.getString("topic"), ask.getString("broker"),
                    ask.getIntValue("queue_id"));
                byTime.add(admin.searchOffset(queue, ask.getLongValue("timestamp")));
            }
            result.put("by_time", byTime);
            return result;
        });
    }

    interface Search {
        QueryResult run() throws Exception;
    }

    /** The messages found; none when the broker answers NO_MESSAGE (the client throws then). */
    private static List<JSONObject> found(Search search) throws Exception {
        try {
            return Messages.describeAll(search.run().getMessageList());
        } catch (MQClientException failure) {
            if (failure.getResponseCode() == ResponseCode.NO_MESSAGE) {
                return List.of();
            }
            throw failure;
        }
    }

    private static List<JSONObject> list(JSONObject request, String name) {
        JSONArray array = request.getJSONArray(name);
        return array == null ? List.of() : array.toJavaList(JSONObject.class);
    }
}
