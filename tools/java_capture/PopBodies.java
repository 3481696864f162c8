// Prints, one "name<TAB>text" line each, the POP bodies Java 5.3.3 writes (tools/java_capture).
import com.alibaba.fastjson.JSON;
import java.util.Arrays;
import java.util.BitSet;
import java.util.HashSet;
import org.apache.rocketmq.broker.offset.ConsumerOrderInfoManager;
import org.apache.rocketmq.remoting.protocol.body.BatchAck;
import org.apache.rocketmq.remoting.protocol.body.BatchAckMessageRequestBody;
import org.apache.rocketmq.remoting.protocol.body.QueryAssignmentRequestBody;
import org.apache.rocketmq.remoting.protocol.body.QueryAssignmentResponseBody;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageQueueAssignment;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.store.pop.AckMsg;
import org.apache.rocketmq.store.pop.BatchAckMsg;
import org.apache.rocketmq.store.pop.PopCheckPoint;

public class PopBodies {
    private static void out(String name, String text) {
        System.out.println(name + "\t" + text);
    }

    public static void main(String[] args) {
        PopCheckPoint ck = new PopCheckPoint();
        ck.setBitMap(0);
        ck.setNum((byte) 2);
        ck.setPopTime(1700000000000L);
        ck.setInvisibleTime(60000);
        ck.setStartOffset(5);
        ck.setCId("g1");
        ck.setTopic("t1");
        ck.setQueueId(3);
        ck.setBrokerName("broker-a");
        ck.addDiff(0);
        ck.addDiff(2);
        out("checkpoint", JSON.toJSONString(ck));
        ck.setRePutTimes("1");
        ck.setBitMap(-2147483647);
        out("checkpoint_reput", JSON.toJSONString(ck));
        AckMsg ack = new AckMsg();
        ack.setAckOffset(7);
        ack.setStartOffset(5);
        ack.setConsumerGroup("g1");
        ack.setTopic("t1");
        ack.setQueueId(3);
        ack.setPopTime(1700000000000L);
        ack.setBrokerName("broker-a");
        out("ack", JSON.toJSONString(ack));
        BatchAckMsg batch = new BatchAckMsg();
        batch.getAckOffsetList().add(5L);
        batch.getAckOffsetList().add(7L);
        batch.setAckOffset(-1);
        batch.setStartOffset(5);
        batch.setConsumerGroup("g1");
        batch.setTopic("%RETRY%g1_t1");
        batch.setQueueId(0);
        batch.setPopTime(1700000000000L);
        out("batch_ack", JSON.toJSONString(batch));
        out("extra_info", ExtraInfoUtil.buildExtraInfo(5, 1700000000000L, 60000, 1, "%RETRY%g1+t1",
            "broker-a", 0, 7));
        BatchAckMessageRequestBody body = new BatchAckMessageRequestBody();
        body.setBrokerName("broker-a");
        BatchAck b = new BatchAck();
        b.setConsumerGroup("g1");
        b.setTopic("t1");
        b.setRetry("0");
        b.setStartOffset(5);
        b.setQueueId(3);
        b.setReviveQueueId(1);
        b.setPopTime(1700000000000L);
        b.setInvisibleTime(60000);
        BitSet bits = new BitSet();
        bits.set(0);
        bits.set(2);
        bits.set(9);
        b.setBitSet(bits);
        body.setAcks(Arrays.asList(b));
        out("batch_ack_request", new String(body.encode()));
        QueryAssignmentRequestBody query = new QueryAssignmentRequestBody();
        query.setTopic("t1");
        query.setConsumerGroup("g1");
        query.setClientId("c1");
        query.setStrategyName("AVG");
        query.setMessageModel(MessageModel.CLUSTERING);
        out("query_assignment_request", new String(query.encode()));
        QueryAssignmentResponseBody answer = new QueryAssignmentResponseBody();
        MessageQueueAssignment assignment = new MessageQueueAssignment();
        assignment.setMessageQueue(new MessageQueue("t1", "broker-a", -1));
        assignment.setMode(MessageRequestMode.POP);
        answer.setMessageQueueAssignments(new HashSet<>(Arrays.asList(assignment)));
        out("query_assignment_response", new String(answer.encode()));
        orderInfo();
    }

    private static void orderInfo() {
        ConsumerOrderInfoManager manager = new ConsumerOrderInfoManager();
        StringBuilder counts = new StringBuilder();
        manager.update("att", false, "t1", "g1", 0, 1700000000000L, 60000L,
            Arrays.asList(10L, 11L, 13L), counts);
        out("order_counts_first", counts.toString());
        manager.updateNextVisibleTime("t1", "g1", 0, 11L, 1700000000000L, 1700000099999L);
        out("order_commit_10", String.valueOf(manager.commitAndNext("t1", "g1", 0, 10L,
            1700000000000L)));
        out("order_commit_other_run", String.valueOf(manager.commitAndNext("t1", "g1", 0, 11L,
            1L)));
        out("order_commit_not_in_run", String.valueOf(manager.commitAndNext("t1", "g1", 0, 12L,
            1700000000000L)));
        out("order_block_same_attempt", String.valueOf(manager.checkBlock("att", "t1", "g1", 0,
            60000L)));
        out("order_block_other_attempt", String.valueOf(manager.checkBlock("att2", "t1", "g1", 0,
            60000L)));
        counts.setLength(0);
        manager.update("att2", false, "t1", "g1", 0, 1700000001000L, 60000L,
            Arrays.asList(11L, 13L), counts);
        out("order_counts_second", counts.toString());
        counts.setLength(0);
        manager.update("att2", false, "t1", "g1", 0, 1700000002000L, 60000L,
            Arrays.asList(11L, 13L, 14L), counts);
        out("order_counts_same_attempt", counts.toString());
        out("order_commit_11", String.valueOf(manager.commitAndNext("t1", "g1", 0, 11L,
            1700000002000L)));
        out("order_commit_13", String.valueOf(manager.commitAndNext("t1", "g1", 0, 13L,
            1700000002000L)));
        out("order_commit_14", String.valueOf(manager.commitAndNext("t1", "g1", 0, 14L,
            1700000002000L)));
        out("order_info_json", manager.encode().replaceAll("\"l\":[0-9]+", "\"l\":0"));
    }
}
