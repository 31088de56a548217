import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A producer and a consumer of kafka-clients logging in with a delegation token: SCRAM with
 * {@code tokenauth=true}, the token id as user name and its HMAC (base64) as password, both
 * from the environment ({@code TOKEN_ID}, {@code TOKEN_HMAC}) so the HMAC is never on a
 * command line.
 *
 * <pre>
 * KafkaTokenClient produce-consume BOOTSTRAP MECHANISM TOPIC COUNT PREFIX TIMEOUT_MS
 *     writes COUNT values PREFIX-0.. to TOPIC, then reads the topic from the beginning
 *     (assigned partitions, no group) until it has them all or TIMEOUT_MS passed
 * KafkaTokenClient session BOOTSTRAP MECHANISM TOPIC MAX_MS
 *     logs in (within a minute), then polls TOPIC until the broker ends the session or
 *     MAX_MS passed since it was open
 * </pre>
 *
 * One line per event on stdout, tab-separated: {@code sent V}, {@code received V},
 * {@code session-open MS}, {@code session-alive MS}; an authentication failure prints
 * {@code login-refused MESSAGE} (or {@code session-ended MS MESSAGE}) and exits 3; any other
 * failure prints {@code error MESSAGE} and exits 1.
 */
public final class KafkaTokenClient {
    private static final int REFUSED = 3;
    private static final long LOGIN_TIMEOUT_MS = 60_000;

    private KafkaTokenClient() {
    }

    public static void main(String[] args) {
        try {
            switch (args[0]) {
                case "produce-consume":
                    produceConsume(args[1], args[2], args[3], Integer.parseInt(args[4]), args[5],
                            Long.parseLong(args[6]));
                    break;
                case "session":
                    session(args[1], args[2], args[3], Long.parseLong(args[4]));
                    break;
                default:
                    throw new IllegalArgumentException("unknown mode " + args[0]);
            }
        } catch (Exception e) {
            AuthenticationException refused = authenticationCause(e);
            if (refused != null) {
                emit("login-refused", refused.getMessage());
                System.exit(REFUSED);
            }
            emit("error", e.toString());
            System.exit(1);
        }
        System.exit(0);
    }

    private static void produceConsume(String bootstrap, String mechanism, String topic, int count,
            String prefix, long timeoutMs) throws InterruptedException, ExecutionException, TimeoutException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Properties producerProps = common(bootstrap, mechanism);
        producerProps.put(ProducerConfig.ACKS_CONFIG, "all");
        producerProps.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Long.toString(timeoutMs));
        producerProps.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(timeoutMs));
        producerProps.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Long.toString(Math.min(timeoutMs, 30000)));
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(producerProps, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < count; i++) {
                String value = prefix + "-" + i;
                producer.send(new ProducerRecord<>(topic, value)).get(remaining(deadline), TimeUnit.MILLISECONDS);
                emit("sent", value);
            }
        }
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, mechanism, topic, deadline)) {
            consumer.seekToBeginning(consumer.assignment());
            int received = 0;
            while (received < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    if (record.value().startsWith(prefix + "-")) {
                        emit("received", record.value());
                        received++;
                    }
                }
            }
        }
    }

    private static void session(String bootstrap, String mechanism, String topic, long maxMs) {
        long loginDeadline = System.currentTimeMillis() + LOGIN_TIMEOUT_MS;
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, mechanism, topic, loginDeadline)) {
            consumer.seekToEnd(consumer.assignment());
            consumer.poll(Duration.ofMillis(100));
            emit("session-open", Long.toString(System.currentTimeMillis()));
            long deadline = System.currentTimeMillis() + maxMs;
            try {
                while (System.currentTimeMillis() < deadline) {
                    consumer.poll(Duration.ofMillis(200));
                }
            } catch (AuthenticationException e) {
                emit("session-ended", System.currentTimeMillis() + "\t" + e.getMessage());
                System.exit(REFUSED);
            }
            emit("session-alive", Long.toString(System.currentTimeMillis()));
        }
    }

    private static KafkaConsumer<String, String> consumer(String bootstrap, String mechanism, String topic,
            long deadline) {
        Properties props = common(bootstrap, mechanism);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Long.toString(remaining(deadline)));
        KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
        List<TopicPartition> partitions = new ArrayList<>();
        for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofMillis(remaining(deadline)))) {
            partitions.add(new TopicPartition(topic, info.partition()));
        }
        consumer.assign(partitions);
        return consumer;
    }

    private static Properties common(String bootstrap, String mechanism) {
        Properties props = new Properties();
        props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        props.put(CommonClientConfigs.CLIENT_ID_CONFIG, "kafka-token-client");
        props.put(SaslConfigs.SASL_MECHANISM, mechanism);
        props.put(SaslConfigs.SASL_JAAS_CONFIG,
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                        + System.getenv("TOKEN_ID") + "\" password=\"" + System.getenv("TOKEN_HMAC")
                        + "\" tokenauth=true;");
        props.put(CommonClientConfigs.RECONNECT_BACKOFF_MS_CONFIG, "100");
        props.put(CommonClientConfigs.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        return props;
    }

    private static long remaining(long deadline) {
        return Math.max(1, deadline - System.currentTimeMillis());
    }

    private static AuthenticationException authenticationCause(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof AuthenticationException) {
                return (AuthenticationException) t;
            }
        }
        return null;
    }

    private static void emit(String event, String detail) {
        System.out.println(event + "\t" + String.valueOf(detail).replace('\n', ' '));
        System.out.flush();
    }
}
