/*
 * The reference Java client (Apache kafka-clients' Admin) against a tokensvc cluster.
 *
 * Run by tests/integration/test_java_client.py, which compiles it against the kafka-clients
 * jar of an installed Python package. Every client setting is kafka-clients' default except
 * what a SCRAM login needs (security.protocol, sasl.mechanism, sasl.jaas.config); waits are
 * bounded by the program (BOUND), not by client timeouts.
 *
 *   java TokenMatrix all <bootstrap> <mechanism> <suffix>
 *       every check below, in order; the admin's user name and password come from the
 *       environment (MATRIX_ADMIN_USER, MATRIX_ADMIN_PASSWORD).
 *   java TokenMatrix describe <bootstrap> <mechanism>
 *       only the "describe" check: every token the admin may see, with all its fields.
 *
 * Output: one line per check, "check <name> ok <json>", and last "check program ok {}"; on
 * the first failure "check <name> FAIL <json>" and exit status 1 ("program" names a failure
 * outside any check). Never prints an HMAC or a password.
 */

import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.DescribeDelegationTokenOptions;
import org.apache.kafka.clients.admin.ExpireDelegationTokenOptions;
import org.apache.kafka.clients.admin.RenewDelegationTokenOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.DelegationTokenAuthorizationException;
import org.apache.kafka.common.errors.DelegationTokenExpiredException;
import org.apache.kafka.common.errors.DelegationTokenNotFoundException;
import org.apache.kafka.common.errors.ResourceNotFoundException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.UnsupportedByAuthenticationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.common.security.token.delegation.TokenInformation;

public final class TokenMatrix {
    /** How long a change may take to reach the broker that answers next (correctness, not speed). */
    private static final long BOUND_MS = 20_000;
    private static final long RETRY_MS = 50;
    private static final String SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule";
    /** Longer than the default expiry period (1 day), shorter than the maximum (7 days). */
    private static final long RENEW_PERIOD_MS = 2 * 86_400_000L;

    private final String bootstrap;
    private final List<String> brokers;
    private final String mechanism;
    private final String adminUser;
    private final String adminPassword;
    private final String requester;
    private final String owner;
    private final String requesterPassword;

    private TokenMatrix(String bootstrap, String mechanism, String suffix) {
        this.bootstrap = bootstrap;
        this.brokers = List.of(bootstrap.split(","));
        this.mechanism = mechanism;
        this.adminUser = requireEnv("MATRIX_ADMIN_USER");
        this.adminPassword = requireEnv("MATRIX_ADMIN_PASSWORD");
        this.requester = "java-requester-" + suffix;
        this.owner = "java-owner-" + suffix;
        byte[] secret = new byte[18];
        new java.security.SecureRandom().nextBytes(secret);
        this.requesterPassword = Base64.getUrlEncoder().withoutPadding().encodeToString(secret);
    }

    public static void main(String[] args) {
        if (args.length == 4 && args[0].equals("all")) {
            check("program", () -> {
                new TokenMatrix(args[1], args[2], args[3]).all();
                return obj();
            });
        } else if (args.length == 3 && args[0].equals("describe")) {
            check("program", () -> {
                new TokenMatrix(args[1], args[2], "-").describeAll();
                return obj();
            });
        } else {
            System.err.println("usage: TokenMatrix all <bootstrap> <mechanism> <suffix>"
                    + " | describe <bootstrap> <mechanism>");
            System.exit(2);
        }
        System.exit(0);
    }

    // -- the checks -------------------------------------------------------------------------

    private void all() throws Exception {
        ScramMechanism mine = ScramMechanism.fromMechanismName(mechanism);
        ScramMechanism other = mine == ScramMechanism.SCRAM_SHA_256
                ? ScramMechanism.SCRAM_SHA_512 : ScramMechanism.SCRAM_SHA_256;
        KafkaPrincipal adminPrincipal = user(adminUser);
        KafkaPrincipal requesterPrincipal = user(requester);
        KafkaPrincipal ownerPrincipal = user(owner);

        try (Closing admin = new Closing(admin(bootstrap, adminUser, adminPassword, false))) {
            check("admin_login", () -> {
                Collection<Node> nodes = get(admin.it.describeCluster().nodes());
                return obj("brokers", nodeIds(nodes));
            });

            // SCRAM credentials through the Admin API (KIP-554).
            // One request per mechanism: like a KRaft controller, tokensvc refuses two changes
            // of one user in one request (DUPLICATE_RESOURCE).
            check("scram_upsert", () -> {
                for (ScramCredentialInfo info : List.of(new ScramCredentialInfo(mine, 4096),
                        new ScramCredentialInfo(other, 8192))) {
                    List<UserScramCredentialAlteration> upsert = List.of(
                            new UserScramCredentialUpsertion(requester, info, requesterPassword));
                    get(admin.it.alterUserScramCredentials(upsert).all());
                }
                return obj("user", requester);
            });
            check("scram_describe", () -> obj("user", requester, "credentials", eventually(
                    "both credentials described", () -> credentials(admin.it, requester, 2))));
            check("scram_delete", () -> {
                get(admin.it.alterUserScramCredentials(
                        List.of(new UserScramCredentialDeletion(requester, other))).all());
                return obj("user", requester, "deleted", other.mechanismName(), "credentials",
                        eventually("one credential left", () -> credentials(admin.it, requester, 1)));
            });
            check("scram_unknown_user", () -> {
                Throwable refused = refused(() -> get(admin.it.describeUserScramCredentials(
                        List.of(owner)).description(owner)));
                expect(refused, ResourceNotFoundException.class);
                return obj("user", owner, "exception", refused.getClass().getName());
            });

            try (Closing requesterAdmin = new Closing(step("requester_login",
                    () -> eventually("the requester logs in",
                            () -> loggedIn(bootstrap, requester, requesterPassword, false)),
                    loggedIn -> obj("user", requester, "mechanism", mechanism)))) {

                // KIP-373 needs CREATE_TOKENS on the owner's User resource.
                check("create_for_owner_unauthorized", () -> {
                    Throwable refused = refused(() -> get(requesterAdmin.it.createDelegationToken(
                            new CreateDelegationTokenOptions().owner(ownerPrincipal)).delegationToken()));
                    expect(refused, DelegationTokenAuthorizationException.class);
                    return obj("owner", owner, "exception", refused.getClass().getName());
                });

                // ACLs through the Admin API: the grant KIP-373 needs, and one to delete.
                AclBinding createTokens = new AclBinding(
                        new ResourcePattern(ResourceType.USER, ownerPrincipal.toString(), PatternType.LITERAL),
                        new AccessControlEntry(requesterPrincipal.toString(), "*",
                                AclOperation.CREATE_TOKENS, AclPermissionType.ALLOW));
                AclBinding readTopics = new AclBinding(
                        new ResourcePattern(ResourceType.TOPIC, "java-" + requester + "-", PatternType.PREFIXED),
                        new AccessControlEntry(requesterPrincipal.toString(), "*",
                                AclOperation.READ, AclPermissionType.ALLOW));
                AclBindingFilter ofRequester = new AclBindingFilter(ResourcePatternFilter.ANY,
                        new AccessControlEntryFilter(requesterPrincipal.toString(), null,
                                AclOperation.ANY, AclPermissionType.ANY));
                check("acl_create", () -> {
                    get(admin.it.createAcls(List.of(createTokens, readTopics)).all());
                    return obj("bindings", List.of(createTokens.toString(), readTopics.toString()));
                });
                check("acl_describe", () -> obj("bindings", eventually("both ACLs described",
                        () -> acls(admin.it, ofRequester, List.of(createTokens, readTopics)))));
                check("acl_delete", () -> {
                    Collection<AclBinding> deleted = get(admin.it.deleteAcls(
                            List.of(readTopics.toFilter())).all());
                    if (!new ArrayList<>(deleted).equals(List.of(readTopics))) {
                        throw new AssertionError("deleted " + deleted);
                    }
                    return obj("deleted", List.of(readTopics.toString()), "left", eventually(
                            "the deleted ACL gone", () -> acls(admin.it, ofRequester, List.of(createTokens))));
                });

                // Delegation tokens.
                DelegationToken mineToken = step("create", () -> get(admin.it.createDelegationToken(
                        new CreateDelegationTokenOptions().renewers(List.of(requesterPrincipal)))
                        .delegationToken()), created -> {
                    TokenInformation info = created.tokenInfo();
                    same("owner", adminPrincipal, info.owner());
                    same("requester", adminPrincipal, info.tokenRequester());
                    same("renewers", List.of(requesterPrincipal), new ArrayList<>(info.renewers()));
                    if (created.hmac().length != 64) {
                        throw new AssertionError("HMAC of " + created.hmac().length + " bytes");
                    }
                    return describe(created);
                });
                DelegationToken ownerToken = step("create_for_owner", () -> eventually(
                        "the CREATE_TOKENS grant applies", () -> get(requesterAdmin.it.createDelegationToken(
                                new CreateDelegationTokenOptions().owner(ownerPrincipal)
                                        .renewers(List.of(adminPrincipal))).delegationToken())), created -> {
                    TokenInformation info = created.tokenInfo();
                    same("owner", ownerPrincipal, info.owner());
                    same("requester", requesterPrincipal, info.tokenRequester());
                    same("renewers", List.of(adminPrincipal), new ArrayList<>(info.renewers()));
                    return describe(created);
                });
                check("describe", () -> obj("tokens", eventually("both tokens described", () -> {
                    List<DelegationToken> tokens = get(admin.it.describeDelegationToken().delegationTokens());
                    List<String> ids = tokenIds(tokens);
                    if (!ids.contains(mineToken.tokenInfo().tokenId())
                            || !ids.contains(ownerToken.tokenInfo().tokenId())) {
                        throw new AssertionError("described " + ids);
                    }
                    return describeAll(tokens);
                })));
                check("describe_by_owner", () -> obj("owner", owner, "tokens", eventually(
                        "the owner's token described", () -> {
                            List<DelegationToken> tokens = get(admin.it.describeDelegationToken(
                                    new DescribeDelegationTokenOptions().owners(List.of(ownerPrincipal)))
                                    .delegationTokens());
                            same("tokens of " + owner, List.of(ownerToken.tokenInfo().tokenId()),
                                    tokenIds(tokens));
                            same("HMAC", b64(ownerToken.hmac()), b64(tokens.get(0).hmac()));
                            same("fields", ownerToken.tokenInfo(), tokens.get(0).tokenInfo());
                            return describeAll(tokens);
                        })));
                check("renew_by_renewer", () -> {
                    long before = mineToken.tokenInfo().expiryTimestamp();
                    long asked = System.currentTimeMillis() + RENEW_PERIOD_MS;
                    long expiry = eventually("the renewer renews", () -> get(
                            requesterAdmin.it.renewDelegationToken(mineToken.hmac(),
                                    new RenewDelegationTokenOptions().renewTimePeriodMs(RENEW_PERIOD_MS))
                                    .expiryTimestamp()));
                    // expiry = now + period on the cluster's clock (this host's, give or take).
                    if (expiry <= before || expiry > mineToken.tokenInfo().maxTimestamp()
                            || Math.abs(expiry - asked) > BOUND_MS) {
                        throw new AssertionError("expiry " + before + " -> " + expiry);
                    }
                    return obj("token_id", mineToken.tokenInfo().tokenId(), "renewer", requester,
                            "expiry_before", before, "expiry", expiry);
                });

                // A worker logs in with the token, on every broker.
                String tokenId = mineToken.tokenInfo().tokenId();
                List<Closing> workers = new ArrayList<>();
                try {
                    check("token_login", () -> {
                        Map<String, Object> byBroker = new LinkedHashMap<>();
                        for (String broker : brokers) {
                            Closing worker = new Closing(eventually("token login on " + broker,
                                    () -> loggedIn(broker, tokenId, b64(mineToken.hmac()), true)));
                            workers.add(worker);
                            byBroker.put(broker, nodeIds(get(worker.it.describeCluster().nodes())));
                        }
                        return obj("token_id", tokenId, "brokers", byBroker);
                    });
                    check("token_create_refused", () -> {
                        Throwable refused = refused(() -> get(workers.get(0).it.createDelegationToken()
                                .delegationToken()));
                        expect(refused, UnsupportedByAuthenticationException.class);
                        return obj("exception", refused.getClass().getName(), "message", refused.getMessage());
                    });
                } finally {
                    for (Closing worker : workers) {
                        worker.close();
                    }
                }

                check("expire_now", () -> {
                    DelegationToken gone = get(admin.it.createDelegationToken().delegationToken());
                    get(admin.it.expireDelegationToken(gone.hmac(),
                            new ExpireDelegationTokenOptions().expiryTimePeriodMs(-1)).expiryTimestamp());
                    Throwable refused = eventually("the removed token's renewal refused", () -> {
                        Throwable error = refused(() -> get(admin.it.renewDelegationToken(gone.hmac())
                                .expiryTimestamp()));
                        expect(error, DelegationTokenNotFoundException.class);
                        return error;
                    });
                    eventually("the removed token no longer described", () -> {
                        List<String> ids = tokenIds(get(admin.it.describeDelegationToken().delegationTokens()));
                        if (ids.contains(gone.tokenInfo().tokenId())) {
                            throw new AssertionError("still described");
                        }
                        return ids;
                    });
                    return obj("token_id", gone.tokenInfo().tokenId(), "renew", refused.getClass().getName());
                });
                check("expire", () -> {
                    long expiry = get(admin.it.expireDelegationToken(mineToken.hmac(),
                            new ExpireDelegationTokenOptions().expiryTimePeriodMs(0)).expiryTimestamp());
                    if (expiry > System.currentTimeMillis() + 1_000) {
                        throw new AssertionError("expiry " + expiry + " is in the future");
                    }
                    return obj("token_id", tokenId, "expiry", expiry);
                });
                check("expired_renew_refused", () -> {
                    Throwable refused = refused(() -> get(requesterAdmin.it.renewDelegationToken(
                            mineToken.hmac()).expiryTimestamp()));
                    expect(refused, DelegationTokenExpiredException.class);
                    return obj("exception", refused.getClass().getName());
                });
                check("expired_login_refused", () -> {
                    Map<String, Object> byBroker = new LinkedHashMap<>();
                    for (String broker : brokers) {
                        Throwable refused = eventually("the expired token refused on " + broker, () -> {
                            Throwable error = loginError(broker, tokenId, b64(mineToken.hmac()));
                            expect(error, SaslAuthenticationException.class);
                            return error;
                        });
                        byBroker.put(broker, obj("exception", refused.getClass().getName(),
                                "message", refused.getMessage()));
                    }
                    return obj("token_id", tokenId, "brokers", byBroker);
                });
            }
        }
    }

    /** The "describe" check alone: every token the admin may see. */
    private void describeAll() throws Exception {
        try (Closing admin = new Closing(admin(bootstrap, adminUser, adminPassword, false))) {
            check("describe", () -> obj("tokens",
                    describeAll(get(admin.it.describeDelegationToken().delegationTokens()))));
        }
    }

    // -- clients ----------------------------------------------------------------------------

    private Admin admin(String servers, String username, String password, boolean token) {
        Properties props = new Properties();
        props.put("bootstrap.servers", servers);
        props.put("security.protocol", "SASL_PLAINTEXT");
        props.put("sasl.mechanism", mechanism);
        props.put("sasl.jaas.config", SCRAM_LOGIN + " required username=\"" + username
                + "\" password=\"" + password + "\"" + (token ? " tokenauth=\"true\"" : "") + ";");
        return Admin.create(props);
    }

    /** An Admin of this login that has read the cluster (so it has logged in). */
    private Admin loggedIn(String servers, String username, String password, boolean token)
            throws Exception {
        Admin admin = admin(servers, username, password, token);
        try {
            Collection<Node> nodes = get(admin.describeCluster().nodes());
            if (nodes.size() != brokers.size()) {
                throw new AssertionError("describeCluster listed " + nodeIds(nodes));
            }
            return admin;
        } catch (Exception | AssertionError e) {
            admin.close(java.time.Duration.ofSeconds(5));
            throw e;
        }
    }

    /** Why a token login on {@code broker} fails, or an AssertionError when it succeeds. */
    private Throwable loginError(String broker, String tokenId, String hmac) throws Exception {
        Admin admin = admin(broker, tokenId, hmac, true);
        try {
            return refused(() -> get(admin.describeCluster().nodes()));
        } finally {
            admin.close(java.time.Duration.ofSeconds(5));
        }
    }

    private static List<Object> credentials(Admin admin, String user, int expected) throws Exception {
        UserScramCredentialsDescription description = get(
                admin.describeUserScramCredentials(List.of(user)).description(user));
        List<Object> infos = new ArrayList<>();
        for (ScramCredentialInfo info : description.credentialInfos()) {
            infos.add(obj("mechanism", info.mechanism().mechanismName(), "iterations", info.iterations()));
        }
        if (infos.size() != expected) {
            throw new AssertionError("credentials " + infos);
        }
        return infos;
    }

    private static List<String> acls(Admin admin, AclBindingFilter filter, List<AclBinding> expected)
            throws Exception {
        Collection<AclBinding> described = get(admin.describeAcls(filter).values());
        if (!new java.util.HashSet<>(described).equals(new java.util.HashSet<>(expected))) {
            throw new AssertionError("described " + described);
        }
        List<String> out = new ArrayList<>();
        for (AclBinding binding : described) {
            out.add(binding.toString());
        }
        return out;
    }

    // -- tokens as JSON -----------------------------------------------------------------------

    /** Every field of a described token (the HMAC only by its length). */
    private static Map<String, Object> describe(DelegationToken token) {
        TokenInformation info = token.tokenInfo();
        List<String> renewers = new ArrayList<>(new TreeSet<>(info.renewersAsString()));
        return obj("token_id", info.tokenId(), "owner", info.ownerAsString(),
                "requester", info.tokenRequesterAsString(), "renewers", renewers,
                "issue_ms", info.issueTimestamp(), "expiry_ms", info.expiryTimestamp(),
                "max_ms", info.maxTimestamp(), "hmac_bytes", token.hmac().length);
    }

    private static List<Object> describeAll(List<DelegationToken> tokens) {
        List<Object> out = new ArrayList<>();
        for (DelegationToken token : tokens) {
            out.add(describe(token));
        }
        return out;
    }

    private static List<String> tokenIds(List<DelegationToken> tokens) {
        List<String> ids = new ArrayList<>();
        for (DelegationToken token : tokens) {
            ids.add(token.tokenInfo().tokenId());
        }
        return ids;
    }

    // -- plumbing -----------------------------------------------------------------------------

    private interface Body {
        Object run() throws Exception;
    }

    /** Run {@code body} as check {@code name} (its line shows {@code detail} of the value); its value. */
    private static <T> T step(String name, Callable<T> body, Function<T, Object> detail) {
        List<T> value = new ArrayList<>(1);
        check(name, () -> {
            value.add(body.call());
            return detail.apply(value.get(0));
        });
        return value.get(0);
    }

    /** Run one check: print its line; on failure print why and exit 1. */
    private static void check(String name, Body body) {
        Object detail;
        try {
            detail = body.run();
        } catch (Throwable e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            Map<String, Object> why = obj("exception", cause.getClass().getName(),
                    "message", String.valueOf(cause.getMessage()));
            if (cause.getCause() != null) {
                why.put("cause", cause.getCause().getClass().getName() + ": " + cause.getCause().getMessage());
            }
            System.out.println("check " + name + " FAIL " + json(why));
            System.out.flush();
            System.exit(1);
            return;
        }
        System.out.println("check " + name + " ok " + json(detail));
        System.out.flush();
    }

    private static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(BOUND_MS, TimeUnit.MILLISECONDS);
    }

    /** The exception {@code call} fails with (unwrapped from ExecutionException); AssertionError
     * if it succeeds. */
    private static Throwable refused(Callable<?> call) throws Exception {
        try {
            call.call();
        } catch (ExecutionException e) {
            return e.getCause();
        }
        throw new AssertionError("not refused");
    }

    private static void expect(Throwable error, Class<? extends Throwable> kind) {
        if (!kind.isInstance(error)) {
            throw new AssertionError("expected " + kind.getName() + ", got " + error, error);
        }
    }

    private static void same(String what, Object expected, Object actual) {
        if (!expected.equals(actual)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    /** {@code attempt}'s value once it stops failing, within BOUND_MS; else its last failure. */
    private static <T> T eventually(String what, Callable<T> attempt) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(BOUND_MS);
        while (true) {
            try {
                return attempt.call();
            } catch (Exception | AssertionError e) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError(what + ": not within " + BOUND_MS + " ms", e);
                }
            }
            Thread.sleep(RETRY_MS);
        }
    }

    private static KafkaPrincipal user(String name) {
        return new KafkaPrincipal(KafkaPrincipal.USER_TYPE, name);
    }

    private static List<Integer> nodeIds(Collection<Node> nodes) {
        List<Integer> ids = new ArrayList<>();
        for (Node node : nodes) {
            ids.add(node.id());
        }
        ids.sort(null);
        return ids;
    }

    private static String b64(byte[] bytes) {
        return Base64.getEncoder().encodeToString(bytes);
    }

    private static String requireEnv(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            System.err.println("TokenMatrix: " + name + " is not set");
            System.exit(2);
        }
        return value;
    }

    /** An AutoCloseable Admin whose close is bounded. */
    private static final class Closing implements AutoCloseable {
        final Admin it;

        Closing(Admin it) {
            this.it = it;
        }

        @Override
        public void close() {
            it.close(java.time.Duration.ofSeconds(5));
        }
    }

    // -- a minimal JSON writer ----------------------------------------------------------------

    private static Map<String, Object> obj(Object... keysAndValues) {
        Map<String, Object> map = new LinkedHashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            map.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        return map;
    }

    private static String json(Object value) {
        StringBuilder out = new StringBuilder();
        writeJson(out, value);
        return out.toString();
    }

    private static void writeJson(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof Map<?, ?> map) {
            out.append('{');
            String sep = "";
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                out.append(sep);
                writeJson(out, String.valueOf(entry.getKey()));
                out.append(':');
                writeJson(out, entry.getValue());
                sep = ",";
            }
            out.append('}');
        } else if (value instanceof Collection<?> items) {
            out.append('[');
            String sep = "";
            for (Object item : items) {
                out.append(sep);
                writeJson(out, item);
                sep = ",";
            }
            out.append(']');
        } else {
            out.append('"');
            for (char c : value.toString().toCharArray()) {
                switch (c) {
                    case '"' -> out.append("\\\"");
                    case '\\' -> out.append("\\\\");
                    case '\n' -> out.append("\\n");
                    case '\r' -> out.append("\\r");
                    case '\t' -> out.append("\\t");
                    default -> {
                        if (c < 0x20) {
                            out.append(String.format("\\u%04x", (int) c));
                        } else {
                            out.append(c);
                        }
                    }
                }
            }
            out.append('"');
        }
    }
}
