package lab;

import com.alibaba.fastjson.JSONObject;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * RocketMQ's own {@code mqadmin} (rocketmq-tools' {@code MQAdminStartup}, the class the
 * distribution's {@code bin/mqadmin} script runs), several commands in one JVM: each command's
 * standard output and error are captured apart and returned as printed.
 */
final class Mqadmin {
    private Mqadmin() {
    }

    /** {@code {"commands": [[arg, ...], ...]}}: {@code [{"args", "out", "err"}, ...]} in order. */
    static Object mqadmin(JSONObject request) {
        List<JSONObject> results = new ArrayList<>();
        PrintStream out = System.out;
        PrintStream err = System.err;
        for (Object each : request.getJSONArray("commands")) {
            String[] args = ((List<?>) each).stream().map(String::valueOf).toArray(String[]::new);
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            ByteArrayOutputStream capturedErr = new ByteArrayOutputStream();
            System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(capturedErr, true, StandardCharsets.UTF_8));
            try {
                MQAdminStartup.main0(args, null);
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(out);
                System.setErr(err);
            }
            JSONObject result = new JSONObject(true);
            result.put("args", args);
            result.put("out", captured.toString(StandardCharsets.UTF_8));
            result.put("err", capturedErr.toString(StandardCharsets.UTF_8));
            results.add(result);
        }
        return results;
    }
}
