package lab;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/**
 * The compatibility lab's driver: asks the official Apache RocketMQ Java clients to do one thing
 * and reports what they saw.
 *
 * <p>Usage: {@code java -cp ... lab.LabDriver <command>} with a JSON request on stdin. The answer
 * is one line on stdout, {@code LAB-RESULT <json>}; everything else on stdout or stderr is client
 * logging. A failure prints {@code LAB-ERROR <message>} and exits 1. Commands: see {@link #run}.
 */
public final class LabDriver {
    static final String RESULT_PREFIX = "LAB-RESULT ";
    static final String ERROR_PREFIX = "LAB-ERROR ";

    private LabDriver() {
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        if (args.length != 1) {
            out.println(ERROR_PREFIX + "usage: LabDriver <command> (request JSON on stdin)");
            System.exit(2);
        }
        JSONObject request = JSON.parseObject(readAll(System.in));
        if (request == null) {
            request = new JSONObject();
        }
        int status = 0;
        try {
            Object result = run(args[0], request);
            out.println(RESULT_PREFIX + JSON.toJSONString(result, SerializerFeature.DisableCircularReferenceDetect,
                SerializerFeature.WriteMapNullValue));
        } catch (Throwable failure) {
            failure.printStackTrace();
            out.println(ERROR_PREFIX + failure);
            status = 1;
        }
        out.flush();
        // Client threads (netty, schedulers) are not all daemons: leave without waiting for them.
        Runtime.getRuntime().halt(status);
    }

    static Object run(String command, JSONObject request) throws Exception {
        switch (command) {
            case "create-topic":
                return Admin.createTopic(request);
            case "create-group":
                return Admin.createGroup(request);
            case "consumer-offsets":
                return Admin.consumerOffsets(request);
            case "cluster":
                return Admin.cluster(request);
            case "await-route":
                return Admin.awaitRoute(request);
            case "produce":
                return Produce.produce(request);
            case "transaction":
                return Produce.transaction(request);
            case "pull":
                return Pull.pull(request);
            case "query":
                return Query.query(request);
            case "push":
                return Push.push(request);
            case "lite-pull":
                return LitePull.litePull(request);
            case "mqadmin":
                return Mqadmin.mqadmin(request);
            case "bench":
                return Bench.bench(request);
            case "load":
                return Load.load(request);
            case "grpc-produce":
                return Grpc.produce(request);
            case "grpc-receive":
                return Grpc.receive(request);
            case "grpc-simple":
                return GrpcConsumers.simple(request);
            case "grpc-push":
                return GrpcConsumers.push(request);
            case "lab-setup":
                return GrpcConsumers.setup(request);
            case "register-master":
                return Register.registerMaster(request);
            default:
                throw new IllegalArgumentException("unknown command " + command);
        }
    }

    private static String readAll(InputStream in) throws Exception {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        in.transferTo(buffer);
        return buffer.toString(StandardCharsets.UTF_8);
    }
}
