// Logs in with kafka-clients' own OAUTHBEARER login (OAuthBearerLoginCallbackHandler: a
// client-credentials grant at the OpenID provider's token endpoint) and creates a
// delegation token on that session.
//
//   java -cp ... OAuthTokenCreate BOOTSTRAP TOKEN_ENDPOINT_URL CLIENT_ID SCOPE CA_PEM
//
// CA_PEM: the PEM CA of the provider's HTTPS certificate (the login's ssl.* JAAS options).
// The client secret comes from the environment (OAUTH_CLIENT_SECRET), never the command
// line. Prints one line: "created <tokenId> <ownerType>:<ownerName> <issue> <max>", or
// "failed <exception class>: <message>" and exits 1.
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.common.security.token.delegation.TokenInformation;

public final class OAuthTokenCreate {
    private OAuthTokenCreate() {
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "java-oauth");
        props.put("security.protocol", "SASL_PLAINTEXT");
        props.put("sasl.mechanism", "OAUTHBEARER");
        props.put("sasl.login.callback.handler.class",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler");
        props.put("sasl.oauthbearer.token.endpoint.url", args[1]);
        props.put("sasl.jaas.config",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
                + " clientId=\"" + args[2] + "\" clientSecret=\"" + System.getenv("OAUTH_CLIENT_SECRET")
                + "\" scope=\"" + args[3] + "\""
                + " ssl.truststore.type=\"PEM\" ssl.truststore.location=\"" + args[4] + "\";");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        try (Admin admin = Admin.create(props)) {
            DelegationToken token = admin.createDelegationToken().delegationToken().get();
            TokenInformation info = token.tokenInfo();
            System.out.println("created " + info.tokenId() + " " + info.owner() + " "
                + info.issueTimestamp() + " " + info.maxTimestamp());
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("failed " + cause.getClass().getName() + ": " + cause.getMessage());
            System.exit(1);
        }
    }
}
