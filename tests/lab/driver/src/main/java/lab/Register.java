package lab;

import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.body.RegisterBrokerBody;
import org.apache.rocketmq.remoting.protocol.body.TopicConfigAndMappingSerializeWrapper;
import org.apache.rocketmq.remoting.protocol.header.namesrv.RegisterBrokerRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;

/**
 * Registers a master that is not a Java broker (a Postbox master) with the name server, the way
 * a broker registers itself, so that a Java slave of the same broker name learns the master's HA
 * address: RocketMQ 5.3.3 applies broker.conf's {@code haMasterAddress} before its HA client
 * exists, so a slave only follows the address the name server returns.
 */
final class Register {
    private static final long TIMEOUT_MS = 5_000;
    private static final long REREGISTER_MS = 10_000;

    private Register() {
    }

    /**
     * {@code {"cluster", "broker_name", "broker_addr", "ha_addr", "wait_for_broker_id",
     * "hold_after_seen_ms", "timeout_ms"}}: registers the master (broker id 0) and keeps it
     * registered until the name server has listed {@code wait_for_broker_id} under the same
     * broker name for {@code hold_after_seen_ms} (longer than that broker's registration period,
     * so at least one of its registrations is answered with the master's HA address even if its
     * first one came before this one), or until {@code timeout_ms}. The registration ends with
     * this process (the name server drops it with the connection).
     */
    static Object registerMaster(JSONObject request) throws Exception {
        String namesrv = request.getString("namesrv");
        String brokerName = request.getString("broker_name");
        long waitFor = request.getLongValue("wait_for_broker_id");
        long hold = request.getLongValue("hold_after_seen_ms");
        long deadline = System.currentTimeMillis() + request.getLongValue("timeout_ms");
        long seenAt = -1;
        NettyRemotingClient client = new NettyRemotingClient(new NettyClientConfig());
        client.start();
        try {
            long registered = 0;
            Map<Long, String> members = new TreeMap<>();
            while (System.currentTimeMillis() < deadline) {
                if (System.currentTimeMillis() - registered >= REREGISTER_MS) {
                    register(client, namesrv, request);
                    registered = System.currentTimeMillis();
                }
                members = members(client, namesrv, brokerName);
                if (members.containsKey(waitFor) && seenAt < 0) {
                    seenAt = System.currentTimeMillis();
                }
                if (seenAt >= 0 && System.currentTimeMillis() - seenAt >= hold) {
                    break;
                }
                Thread.sleep(500);
            }
            JSONObject result = new JSONObject();
            Map<String, String> named = new TreeMap<>();  // JSON keys must be strings
            members.forEach((id, address) -> named.put(String.valueOf(id), address));
            result.put("members", named);
            result.put("seen", members.containsKey(waitFor));
            return result;
        } finally {
            client.shutdown();
        }
    }

    private static void register(NettyRemotingClient client, String namesrv, JSONObject request)
        throws Exception {
        RegisterBrokerRequestHeader header = new RegisterBrokerRequestHeader();
        header.setClusterName(request.getString("cluster"));
        header.setBrokerName(request.getString("broker_name"));
        header.setBrokerAddr(request.getString("broker_addr"));
        header.setHaServerAddr(request.getString("ha_addr"));
        header.setBrokerId(0L);
        header.setCompressed(false);
        RegisterBrokerBody body = new RegisterBrokerBody();
        body.setTopicConfigSerializeWrapper(new TopicConfigAndMappingSerializeWrapper());
        body.setFilterServerList(new ArrayList<>());
        byte[] encoded = body.encode(false);
        header.setBodyCrc32(UtilAll.crc32(encoded));
        RemotingCommand command = RemotingCommand.createRequestCommand(RequestCode.REGISTER_BROKER,
            header);
        command.setBody(encoded);
        RemotingCommand response = client.invokeSync(namesrv, command, TIMEOUT_MS);
        if (response.getCode() != ResponseCode.SUCCESS) {
            throw new IllegalStateException("REGISTER_BROKER refused: " + response.getRemark());
        }
    }

    private static Map<Long, String> members(NettyRemotingClient client, String namesrv,
                                             String brokerName) throws Exception {
        RemotingCommand command = RemotingCommand.createRequestCommand(
            RequestCode.GET_BROKER_CLUSTER_INFO, null);
        RemotingCommand response = client.invokeSync(namesrv, command, TIMEOUT_MS);
        Map<Long, String> members = new TreeMap<>();
        if (response.getCode() != ResponseCode.SUCCESS || response.getBody() == null) {
            return members;
        }
        ClusterInfo info = RemotingSerializable.decode(response.getBody(), ClusterInfo.class);
        BrokerData data = info.getBrokerAddrTable().get(brokerName);
        if (data != null) {
            members.putAll(data.getBrokerAddrs());
        }
        return members;
    }
}
