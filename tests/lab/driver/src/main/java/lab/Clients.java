package lab;

import com.alibaba.fastjson.JSONObject;
import org.apache.rocketmq.client.ClientConfig;

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

    static String group(JSONObject request, String fallback) {
        String group = request.getString("group");
        return group == null ? fallback + "-" + ProcessHandle.current().pid() : group;
    }
}
