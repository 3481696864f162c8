// Drives the official RocketMQ Java client with ACL credentials and/or TLS (-Dtls.enable=true).
//
// Usage: java -cp "lib/*:classes" SecureClient MODE NAMESRV key=value...
//   produce  topic= count= group= [ak= sk=] [keys=K]  sync sends, no retries: one RESULT per
//            send (with its offset message id)
//   consume  topic= count= group= [ak= sk=] [timeout=S]   push consumer from the first offset
//   lookup   topic= msgid= key= group= [ak= sk=]  viewMessage(topic, msgid) then
//            queryMessage(topic, key): what each returned, or the error
// With ak/sk every request is signed by AclClientRPCHook (the Java client's ACL 1.0 hook).
// Prints "RESULT op=... k=v" lines, values URL-encoded (UTF-8); exits 0 when every send
// succeeded / COUNT messages arrived, 1 otherwise, 2 on usage errors.
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

public class SecureClient {
    private static String enc(Object value) throws Exception {
        return URLEncoder.encode(String.valueOf(value), "UTF-8");
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: SecureClient produce|consume NAMESRV key=value...");
            System.exit(2);
        }
        Map<String, String> options = new HashMap<>();
        for (int i = 2; i < args.length; i++) {
            String[] pair = args[i].split("=", 2);
            options.put(pair[0], pair.length > 1 ? pair[1] : "");
        }
        RPCHook hook = options.containsKey("ak")
            ? new AclClientRPCHook(new SessionCredentials(options.get("ak"), options.get("sk")))
            : null;
        int status;
        if (args[0].equals("produce")) {
            status = produce(args[1], options, hook);
        } else if (args[0].equals("consume")) {
            status = consume(args[1], options, hook);
        } else if (args[0].equals("lookup")) {
            status = lookup(args[1], options, hook);
        } else {
            System.err.println("unknown mode " + args[0]);
            status = 2;
        }
        System.exit(status);
    }

    private static int produce(String namesrv, Map<String, String> o, RPCHook hook)
        throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(o.get("group"), hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("secure-" + System.nanoTime());
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(10000);
        producer.start();
        int count = Integer.parseInt(o.get("count"));
        int ok = 0;
        for (int i = 0; i < count; i++) {
            Message message = new Message(o.get("topic"), "TagA",
                ("secure-" + i).getBytes(StandardCharsets.UTF_8));
            if (o.containsKey("keys")) {
                message.setKeys(o.get("keys"));
            }
            try {
                SendResult result = producer.send(message);
                System.out.println("RESULT op=send i=" + i + " status=" + result.getSendStatus()
                    + " queue=" + result.getMessageQueue().getQueueId()
                    + " offset=" + result.getQueueOffset()
                    + " msgid=" + result.getOffsetMsgId());
                ok++;
            } catch (Exception error) {
                // The producer wraps a broker error it may retry (code 1 is one) in an
                // MQClientException: report the broker's answer itself.
                Throwable cause = error;
                while (cause != null && !(cause instanceof MQBrokerException)) {
                    cause = cause.getCause();
                }
                if (cause != null) {
                    MQBrokerException broker = (MQBrokerException) cause;
                    System.out.println("RESULT op=send_error i=" + i + " code="
                        + broker.getResponseCode() + " remark=" + enc(broker.getErrorMessage()));
                } else {
                    System.out.println("RESULT op=send_exception i=" + i + " class="
                        + error.getClass().getName() + " message=" + enc(error.getMessage()));
                }
            }
        }
        producer.shutdown();
        System.out.println("RESULT op=summary sent=" + ok + " count=" + count);
        return ok == count ? 0 : 1;
    }

    private static String describe(Throwable error) throws Exception {
        Throwable cause = error;
        while (cause != null && !(cause instanceof MQBrokerException)) {
            cause = cause.getCause();
        }
        if (cause != null) {
            MQBrokerException broker = (MQBrokerException) cause;
            return "code=" + broker.getResponseCode() + " remark=" + enc(broker.getErrorMessage());
        }
        return "class=" + error.getClass().getName() + " message=" + enc(error.getMessage());
    }

    private static String found(MessageExt message) throws Exception {
        return "topic=" + enc(message.getTopic()) + " body="
            + enc(new String(message.getBody(), StandardCharsets.UTF_8));
    }

    private static int lookup(String namesrv, Map<String, String> o, RPCHook hook)
        throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(o.get("group"), hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("secure-" + System.nanoTime());
        producer.start();
        try {
            MessageExt viewed = producer.viewMessage(o.get("topic"), o.get("msgid"));
            System.out.println("RESULT op=view " + found(viewed));
        } catch (Exception error) {
            System.out.println("RESULT op=view_error " + describe(error));
        }
        try {
            QueryResult result = producer.queryMessage(o.get("topic"), o.get("key"), 32, 0,
                Long.MAX_VALUE);
            for (MessageExt message : result.getMessageList()) {
                System.out.println("RESULT op=query " + found(message));
            }
            System.out.println("RESULT op=query_done found=" + result.getMessageList().size());
        } catch (Exception error) {
            System.out.println("RESULT op=query_error " + describe(error));
        }
        producer.shutdown();
        return 0;
    }

    private static int consume(String namesrv, Map<String, String> o, RPCHook hook)
        throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(o.get("group"), hook,
            new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("secure-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(o.get("topic"), "*");
        Set<String> seen = ConcurrentHashMap.newKeySet();
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                String body = new String(message.getBody(), StandardCharsets.UTF_8);
                if (seen.add(body)) {
                    try {
                        System.out.println("RESULT op=recv body=" + enc(body));
                    } catch (Exception ignored) {
                        // URL encoding of a Java string cannot fail with UTF-8
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        int count = Integer.parseInt(o.get("count"));
        long deadline = System.nanoTime()
            + TimeUnit.SECONDS.toNanos(Long.parseLong(o.getOrDefault("timeout", "90")));
        while (seen.size() < count && System.nanoTime() < deadline) {
            Thread.sleep(100);
        }
        consumer.shutdown();
        System.out.println("RESULT op=summary received=" + seen.size() + " count=" + count);
        return seen.size() >= count ? 0 : 1;
    }
}
