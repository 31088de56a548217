// Sets client quotas through one broker with kafka-clients' Admin.alterClientQuotas, then
// asks that broker and every other one given the same describeClientQuotas filters.
//
//   java -cp ... ClientQuotaMatrix COMMAND_CONFIG NAME_PREFIX SET_BOOTSTRAP [BOOTSTRAP...]
//
// COMMAND_CONFIG: the client properties of an admin (as for Kafka's --command-config).
// The quotas set are on users and client ids named after NAME_PREFIX, the defaults and
// one ip. Prints one line per filter and broker asked:
//   "<filter>\t<bootstrap>\t<entities>" where <entities> is the sorted answer
//   ("{client-id=c, user=u}={producer_byte_rate=10.0}|...") or "error <exception class>".
import java.io.FileInputStream;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

public final class ClientQuotaMatrix {
    private static final String USER = ClientQuotaEntity.USER;
    private static final String CLIENT = ClientQuotaEntity.CLIENT_ID;
    private static final String IP = ClientQuotaEntity.IP;

    private ClientQuotaMatrix() {
    }

    private static ClientQuotaEntity entity(String... typeThenName) {
        Map<String, String> entries = new HashMap<>();
        for (int i = 0; i < typeThenName.length; i += 2) {
            entries.put(typeThenName[i], typeThenName[i + 1]);
        }
        return new ClientQuotaEntity(entries);
    }

    private static ClientQuotaAlteration set(ClientQuotaEntity entity, String key, double value) {
        return new ClientQuotaAlteration(entity,
            Collections.singletonList(new ClientQuotaAlteration.Op(key, value)));
    }

    private static Admin admin(Properties base, String bootstrap) {
        Properties props = new Properties();
        props.putAll(base);
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "quota-matrix");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(props);
    }

    private static String answer(Admin admin, ClientQuotaFilter filter) throws InterruptedException {
        try {
            Map<ClientQuotaEntity, Map<String, Double>> found =
                admin.describeClientQuotas(filter).entities().get(60, TimeUnit.SECONDS);
            List<String> entries = new ArrayList<>();
            for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : found.entrySet()) {
                entries.add(new TreeMap<>(e.getKey().entries()) + "=" + new TreeMap<>(e.getValue()));
            }
            Collections.sort(entries);
            return String.join("|", entries);
        } catch (ExecutionException e) {
            return "error " + e.getCause().getClass().getName();
        } catch (java.util.concurrent.TimeoutException e) {
            return "error timeout";
        }
    }

    public static void main(String[] args) throws Exception {
        Properties base = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            base.load(in);
        }
        String user = args[1] + "-user";
        String spaced = args[1] + " user ü*";
        String client = args[1] + "-client";
        String ip = "127.0.0.77";

        try (Admin setter = admin(base, args[2])) {
            setter.alterClientQuotas(Arrays.asList(
                set(entity(USER, user), "producer_byte_rate", 1024),
                set(entity(USER, spaced), "request_percentage", 12.5),
                set(entity(USER, null), "consumer_byte_rate", 1e9),
                set(entity(USER, user, CLIENT, client), "producer_byte_rate", 10),
                set(entity(USER, null, CLIENT, null), "consumer_byte_rate", 1e9),
                set(entity(CLIENT, client), "consumer_byte_rate", 500),
                set(entity(IP, ip), "connection_creation_rate", 5),
                set(entity(IP, null), "connection_creation_rate", 1e6)
            )).all().get(60, TimeUnit.SECONDS);
        }

        Map<String, ClientQuotaFilter> filters = new LinkedHashMap<>();
        filters.put("everything", ClientQuotaFilter.all());
        filters.put("strict-nothing", ClientQuotaFilter.containsOnly(Collections.emptyList()));
        filters.put("user", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntity(USER, user))));
        filters.put("user-and-clients", ClientQuotaFilter.contains(
            List.of(ClientQuotaFilterComponent.ofEntity(USER, user))));
        filters.put("user-sanitized", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntity(USER, spaced))));
        filters.put("user-default", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofDefaultEntity(USER))));
        filters.put("user-default-and-clients", ClientQuotaFilter.contains(
            List.of(ClientQuotaFilterComponent.ofDefaultEntity(USER))));
        filters.put("users", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntityType(USER))));
        filters.put("client", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntity(CLIENT, client))));
        filters.put("client-and-users", ClientQuotaFilter.contains(
            List.of(ClientQuotaFilterComponent.ofEntity(CLIENT, client))));
        filters.put("user-client", ClientQuotaFilter.containsOnly(List.of(
            ClientQuotaFilterComponent.ofEntity(USER, user),
            ClientQuotaFilterComponent.ofEntity(CLIENT, client))));
        filters.put("defaults", ClientQuotaFilter.containsOnly(List.of(
            ClientQuotaFilterComponent.ofDefaultEntity(USER),
            ClientQuotaFilterComponent.ofDefaultEntity(CLIENT))));
        filters.put("users-clients", ClientQuotaFilter.containsOnly(List.of(
            ClientQuotaFilterComponent.ofEntityType(USER),
            ClientQuotaFilterComponent.ofEntityType(CLIENT))));
        filters.put("ips", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntityType(IP))));
        filters.put("ip", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntity(IP, ip))));
        filters.put("ip-default", ClientQuotaFilter.contains(
            List.of(ClientQuotaFilterComponent.ofDefaultEntity(IP))));
        filters.put("missing-user", ClientQuotaFilter.containsOnly(
            List.of(ClientQuotaFilterComponent.ofEntity(USER, args[1] + "-nobody"))));
        filters.put("duplicate-user", ClientQuotaFilter.contains(List.of(
            ClientQuotaFilterComponent.ofEntityType(USER),
            ClientQuotaFilterComponent.ofEntityType(USER))));
        filters.put("ip-with-user", ClientQuotaFilter.contains(List.of(
            ClientQuotaFilterComponent.ofEntityType(USER),
            ClientQuotaFilterComponent.ofEntityType(IP))));
        filters.put("unknown-type", ClientQuotaFilter.contains(
            List.of(ClientQuotaFilterComponent.ofEntityType("group"))));

        for (int b = 2; b < args.length; b++) {
            try (Admin asker = admin(base, args[b])) {
                for (Map.Entry<String, ClientQuotaFilter> f : filters.entrySet()) {
                    System.out.println(f.getKey() + "\t" + args[b] + "\t" + answer(asker, f.getValue()));
                }
            }
        }
    }
}
