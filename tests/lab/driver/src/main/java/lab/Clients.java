package lab;

import com.alibaba.fastjson.JSONObject;
import org.apache.rocketmq.client.ClientConfig;

/** Settings every remoting client of the driver shares. */
final class Clients {
    private Clients() {
    }

    static <T extends ClientConfig> T configure(T client, JSONObject request) {
        client.setNamesrvAddr(request.getString("namesrv"));
        client.setInstanceName("lab-" + ProcessHandle.current().pid());
        client.setVipChannelEnabled(false);
        client.setPollNameServerInterval(1000);
        return client;
    }

    static String group(JSONObject request, String fallback) {
        String group = request.getString("group");
        return group == null ? fallback + "-" + ProcessHandle.current().pid() : group;
    }
}
