package lab;

import com.alibaba.fastjson.JSONObject;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.impl.MQClientManager;

/** Settings every remoting client of the driver shares. */
final class Clients {
    static final int TIMEOUT_MS = 30_000;

    private Clients() {
    }

    static <T extends ClientConfig> T configure(T client, JSONObject request) {
        client.setNamesrvAddr(request.getString("namesrv"));
        client.setInstanceName("lab-" + ProcessHandle.current().pid());
        client.setVipChannelEnabled(false);
        client.setPollNameServerInterval(1000);
        // generous: the lab shares two cores with the rest of the test suite
        client.setMqClientApiTimeout(TIMEOUT_MS);
        return client;
    }

    /**
     * Give a started client's admin requests (route lookups for its queues, queue offsets) the
     * same generous wait: they keep a 6 s timeout of their own, which a name server sharing two
     * cores with eight CI lanes once outran on a route lookup. The client's instance is the one
     * {@code start()} registered under its client id, so this reaches the client's own.
     */
    static <T extends ClientConfig> T adminTimeout(T started) {
        MQClientManager.getInstance().getOrCreateMQClientInstance(started).getMQAdminImpl()
            .setTimeoutMillis(TIMEOUT_MS);
        return started;
    }

    static String group(JSONObject request, String fallback) {
        String group = request.getString("group");
        return group == null ? fallback + "-" + ProcessHandle.current().pid() : group;
    }
}
