package dev.hybridscaler.flink.resize;

import org.apache.flink.configuration.ReadableConfig;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Executors;

/**
 * The controller's way in: a small HTTP endpoint on each TaskManager, authenticated with a shared
 * secret (a file, e.g. a mounted Kubernetes Secret), sent as {@code Authorization: Bearer <token>}.
 *
 * <ul>
 *   <li>{@code GET /v1/slots}: the slots' caches as booked and as read through the shim, the
 *       budget, and whether resizing works here.
 *   <li>{@code POST /v1/resize} {@code {"targets": [{"jobId", "task", "subtask"?, "cacheBytes",
 *       "writeBufferBytes"?}]}}: all or nothing; 409 with the reason when refused.
 *   <li>{@code PUT /v1/budget} {@code {"budgetBytes": n | null}}: memory the controller grants
 *       this TaskManager's caches (unreserved managed memory, or a pod grown in place).
 * </ul>
 */
final class ControlServer {
    private static final Logger LOG = LoggerFactory.getLogger(ControlServer.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int MAX_BODY = 64 * 1024;
    private static final Set<String> TARGET_FIELDS =
            Set.of("jobId", "task", "subtask", "cacheBytes", "writeBufferBytes");
    private static ReadableConfig settings;
    private static boolean started;

    private final ResizeAgent agent;
    private final byte[] token;

    private ControlServer(ResizeAgent agent, byte[] token) {
        this.agent = agent;
        this.token = token;
    }

    /** Keeps the first configuration the state backend was created with in this JVM. */
    static synchronized void configure(ReadableConfig config) {
        if (settings == null) {
            settings = config;
        }
    }

    /**
     * Starts the endpoint once, when the first slot's RocksDB memory is created: only
     * TaskManagers do that (a JobManager loads the state backend too, but holds no slot).
     */
    static synchronized void startOnce(ResizeAgent agent) {
        if (started || settings == null) {
            return;
        }
        started = true;
        ReadableConfig config = settings;
        String tokenFile = config.get(ResizableRocksDBStateBackendFactory.TOKEN_FILE);
        if (tokenFile == null || tokenFile.isBlank()) {
            LOG.warn("hybridscaler resize: no {} set: the resize endpoint is not started",
                    ResizableRocksDBStateBackendFactory.TOKEN_FILE.key());
            return;
        }
        byte[] token;
        try {
            token = Files.readString(Path.of(tokenFile)).strip().getBytes(StandardCharsets.UTF_8);
        } catch (IOException e) {
            LOG.error("hybridscaler resize: cannot read the token file {}: {}; endpoint not started",
                    tokenFile, e.toString());
            return;
        }
        if (token.length < 16) {
            LOG.error("hybridscaler resize: the token in {} is shorter than 16 bytes; endpoint not started",
                    tokenFile);
            return;
        }
        String host = config.get(ResizableRocksDBStateBackendFactory.BIND_ADDRESS);
        int port = config.get(ResizableRocksDBStateBackendFactory.PORT);
        try {
            HttpServer server = serve(agent, token, new InetSocketAddress(host, port));
            LOG.info("hybridscaler resize: endpoint on {}:{}", host, server.getAddress().getPort());
        } catch (IOException | RuntimeException e) {
            LOG.error("hybridscaler resize: cannot bind {}:{}: {}; endpoint not started", host, port,
                    e.toString());
        }
    }

    /** The endpoint for {@code agent} on {@code address}, started; one request at a time. */
    static HttpServer serve(ResizeAgent agent, byte[] token, InetSocketAddress address)
            throws IOException {
        HttpServer server = HttpServer.create(address, 16);
        ControlServer handler = new ControlServer(agent, token);
        server.createContext("/v1/", handler::handle);
        server.setExecutor(Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "hybridscaler-resize-endpoint");
            t.setDaemon(true);
            return t;
        }));
        server.start();
        return server;
    }

    private void handle(HttpExchange ex) throws IOException {
        try (ex) {
            route(ex); // answers every request, a bug with a 500, before the close
        }
    }

    private void route(HttpExchange ex) throws IOException {
        try {
            if (!authorized(ex.getRequestHeaders().getFirst("Authorization"))) {
                reply(ex, 401, error("unauthorized"));
                return;
            }
            String route = ex.getRequestMethod() + " " + ex.getRequestURI().getPath();
            switch (route) {
                case "GET /v1/slots":
                    reply(ex, 200, state());
                    break;
                case "POST /v1/resize":
                    resize(ex);
                    break;
                case "PUT /v1/budget":
                    budget(ex);
                    break;
                default:
                    reply(ex, 404, error("no such route"));
            }
        } catch (RuntimeException e) {
            // A bug here must not look like a network fault to the controller: it gets a 500
            // (the details stay in this log), unless the reply had already begun.
            LOG.error("hybridscaler resize: request failed", e);
            try {
                reply(ex, 500, error("internal error; the TaskManager's log has the details"));
            } catch (IOException | RuntimeException replyFailed) {
                LOG.debug("hybridscaler resize: no 500 sent: {}", replyFailed.toString());
            }
        }
    }

    private boolean authorized(String header) {
        if (header == null || !header.startsWith("Bearer ")) {
            return false;
        }
        byte[] given = header.substring("Bearer ".length()).strip().getBytes(StandardCharsets.UTF_8);
        return MessageDigest.isEqual(given, token); // constant time
    }

    private ObjectNode state() {
        ObjectNode out = JSON.createObjectNode();
        String disabled = agent.disabledReason();
        out.put("enabled", disabled == null);
        out.put("disabledReason", disabled);
        out.put("budgetBytes", agent.budgetBytes());
        out.put("resizes", agent.resizeCount());
        out.set("slots", views(agent.slots()));
        return out;
    }

    private void resize(HttpExchange ex) throws IOException {
        List<ResizeAgent.Target> targets = new ArrayList<>();
        try {
            JsonNode body = body(ex);
            JsonNode list = body.get("targets");
            if (list == null || !list.isArray()) {
                throw new IllegalArgumentException("the body needs a 'targets' array");
            }
            for (JsonNode t : list) {
                targets.add(target(t));
            }
        } catch (IllegalArgumentException e) {
            reply(ex, 400, error(e.getMessage()));
            return;
        }
        try {
            ObjectNode out = JSON.createObjectNode();
            out.set("slots", views(agent.resize(targets)));
            reply(ex, 200, out);
        } catch (ResizeAgent.Refused e) {
            reply(ex, 409, error(e.getMessage()));
        }
    }

    private void budget(HttpExchange ex) throws IOException {
        try {
            JsonNode b = body(ex).get("budgetBytes");
            if (b == null || !(b.isNull() || b.isIntegralNumber())) {
                throw new IllegalArgumentException("budgetBytes must be an integer or null");
            }
            agent.grantBudget(b.isNull() ? null : b.asLong());
            reply(ex, 200, state());
        } catch (IllegalArgumentException e) {
            reply(ex, 400, error(e.getMessage()));
        } catch (ResizeAgent.Refused e) {
            reply(ex, 409, error(e.getMessage()));
        }
    }

    private static ResizeAgent.Target target(JsonNode t) {
        if (!t.isObject()) {
            throw new IllegalArgumentException("each target must be an object");
        }
        for (Iterator<String> it = t.fieldNames(); it.hasNext(); ) {
            String f = it.next();
            if (!TARGET_FIELDS.contains(f)) {
                throw new IllegalArgumentException("unknown target field '" + printable(f) + "'");
            }
        }
        JsonNode job = t.get("jobId");
        JsonNode task = t.get("task");
        JsonNode subtask = t.get("subtask");
        JsonNode cache = t.get("cacheBytes");
        JsonNode wb = t.get("writeBufferBytes");
        if (job == null || !job.isTextual() || !job.asText().matches("[0-9a-f]{32}")) {
            throw new IllegalArgumentException("jobId must be a 32-digit hex Flink job id");
        }
        if (task == null || !task.isTextual() || task.asText().isEmpty()) {
            throw new IllegalArgumentException("task must be a non-empty string");
        }
        if (subtask != null && !(subtask.isIntegralNumber() && subtask.asLong() >= 0)) {
            throw new IllegalArgumentException("subtask must be an integer >= 0");
        }
        if (cache == null || !cache.isIntegralNumber()) {
            throw new IllegalArgumentException("cacheBytes must be an integer");
        }
        if (wb != null && !wb.isIntegralNumber()) {
            throw new IllegalArgumentException("writeBufferBytes must be an integer");
        }
        return new ResizeAgent.Target(job.asText(), task.asText(),
                subtask == null ? null : subtask.asInt(), cache.asLong(), wb == null ? null : wb.asLong());
    }

    private static JsonNode body(HttpExchange ex) throws IOException {
        try (InputStream in = ex.getRequestBody()) {
            byte[] raw = in.readNBytes(MAX_BODY + 1);
            if (raw.length > MAX_BODY) {
                throw new IllegalArgumentException("body larger than " + MAX_BODY + " bytes");
            }
            JsonNode node;
            try {
                node = JSON.readTree(raw);
            } catch (IOException e) {
                throw new IllegalArgumentException("the body is not JSON");
            }
            if (node == null || !node.isObject()) {
                throw new IllegalArgumentException("the body must be a JSON object");
            }
            return node;
        }
    }

    private static ArrayNode views(List<ResizeAgent.SlotView> slots) {
        ArrayNode out = JSON.createArrayNode();
        for (ResizeAgent.SlotView s : slots) {
            ObjectNode o = out.addObject();
            o.put("id", s.id());
            o.put("jobId", s.jobId());
            o.put("task", s.task());
            o.put("subtask", s.subtask());
            o.put("parallelism", s.parallelism());
            o.put("attempt", s.attempt());
            o.put("cacheBytes", s.cacheBytes());
            o.put("observedCacheBytes", s.observedCacheBytes());
            o.put("writeBufferBytes", s.writeBufferBytes());
            o.put("observedWriteBufferBytes", s.observedWriteBufferBytes());
        }
        return out;
    }

    /** Field names come from the caller: never echo more than a short, printable prefix. */
    private static String printable(String s) {
        String p = s.replaceAll("[^A-Za-z0-9_-]", "?");
        return p.length() > 32 ? p.substring(0, 32) + "…" : p;
    }

    private static ObjectNode error(String message) {
        ObjectNode o = JSON.createObjectNode();
        o.put("error", message);
        return o;
    }

    private static void reply(HttpExchange ex, int status, JsonNode body) throws IOException {
        byte[] bytes = JSON.writeValueAsBytes(body);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(bytes);
        }
    }
}
