// Runs RocketMQ's own SQL92 filter (rocketmq-filter, as the Java broker uses it) over
// selectors and property maps, for differential tests of pybroker.filter.
//
// Usage: java -cp "lib/*:classes" SqlOracle < cases.jsonl > answers.jsonl
// Each input line: {"expr": "...", "messages": [{"k": "v", ...}, ...]}
// Each output line: {"remark": null | "<what CHECK_CLIENT_CONFIG answers>",
//                    "results": ["true" | "false" | "null" | "error", ...]}
// ("error": evaluation threw, which the broker treats as no match).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import org.apache.rocketmq.filter.FilterFactory;
import org.apache.rocketmq.filter.expression.EvaluationContext;
import org.apache.rocketmq.filter.expression.Expression;

public final class SqlOracle {
    private SqlOracle() {
    }

    static final class Context implements EvaluationContext {
        private final Map<String, Object> values;

        Context(Map<String, Object> values) {
            this.values = values;
        }

        @Override
        public Object get(String name) {
            return values.get(name);
        }

        @Override
        public Map<String, Object> keyValues() {
            return values;
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in,
            StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            out.println(answer(JSON.parseObject(line)));
        }
    }

    static String answer(JSONObject input) {
        JSONObject output = new JSONObject();
        Expression expression = null;
        try {
            expression = FilterFactory.INSTANCE.get("SQL92").compile(input.getString("expr"));
            output.put("remark", null);
        } catch (Throwable error) {
            output.put("remark", String.valueOf(error.getMessage()));
        }
        List<String> results = new ArrayList<>();
        JSONArray messages = input.getJSONArray("messages");
        for (int i = 0; expression != null && messages != null && i < messages.size(); i++) {
            Map<String, Object> values = new HashMap<>(messages.getJSONObject(i));
            try {
                Object result = expression.evaluate(new Context(values));
                results.add(result == null ? "null" : result instanceof Boolean
                    ? result.toString() : "other:" + result);
            } catch (Throwable error) {
                results.add("error");
            }
        }
        output.put("results", results);
        return JSON.toJSONString(output, com.alibaba.fastjson.serializer.SerializerFeature
            .WriteMapNullValue);
    }
}
