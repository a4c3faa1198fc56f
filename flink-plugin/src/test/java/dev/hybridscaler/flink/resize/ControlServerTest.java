package dev.hybridscaler.flink.resize;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.rocksdb.RocksDB;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

/**
 * The resize endpoint over real HTTP, with the agent's native calls replaced by the recording
 * port of ResizeAgentTest: authentication, routes, the answers to bad bodies and refusals, and a
 * bug answered with a 500 instead of a dropped connection.
 */
class ControlServerTest {
    private static final String TOKEN = "0123456789abcdef-secret";
    private static final long MIB = 1024 * 1024;
    private static final String JOB = "0123456789abcdef0123456789abcdef";

    private final HttpClient client = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(5)).build();
    private ResizeAgentTest.Recording ops;
    private HttpServer server;

    @BeforeAll
    static void rocksdb() {
        RocksDB.loadLibrary();
    }

    @BeforeEach
    void start() throws Exception {
        ops = new ResizeAgentTest.Recording();
        ResizeAgent agent = new ResizeAgent(ops);
        ResizeAgentTest.slot(agent, ops, "a", 0, 80, 16);
        server = ControlServer.serve(agent, TOKEN.getBytes(StandardCharsets.UTF_8),
                new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
    }

    @AfterEach
    void stop() {
        server.stop(0);
    }

    private HttpResponse<String> call(String method, String path, String body, String token)
            throws Exception {
        HttpRequest.Builder r = HttpRequest.newBuilder(URI.create(
                        "http://127.0.0.1:" + server.getAddress().getPort() + path))
                .timeout(Duration.ofSeconds(10))
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofString(body));
        if (token != null) {
            r.header("Authorization", "Bearer " + token);
        }
        return client.send(r.build(), HttpResponse.BodyHandlers.ofString());
    }

    private HttpResponse<String> call(String method, String path, String body) throws Exception {
        return call(method, path, body, TOKEN);
    }

    @Test
    void onlyTheTokenGetsIn() throws Exception {
        assertEquals(401, call("GET", "/v1/slots", null, null).statusCode());
        assertEquals(401, call("GET", "/v1/slots", null, "wrong-token-of-some-length").statusCode());
        HttpResponse<String> ok = call("GET", "/v1/slots", null);
        assertEquals(200, ok.statusCode());
        assertTrue(ok.body().contains("\"task\":\"a\""), ok.body());
        assertEquals(404, call("GET", "/v1/nothing", null).statusCode());
    }

    @Test
    void aResizeMovesTheCacheAndARefusalSaysWhy() throws Exception {
        String grow = "{\"targets\":[{\"jobId\":\"" + JOB + "\",\"task\":\"a\",\"subtask\":0,"
                + "\"cacheBytes\":" + 200 * MIB + "}]}";
        HttpResponse<String> refused = call("POST", "/v1/resize", grow);
        assertEquals(409, refused.statusCode());
        assertTrue(refused.body().contains("budget"), refused.body());
        String shrink = grow.replace(String.valueOf(200 * MIB), String.valueOf(40 * MIB));
        assertEquals(200, call("POST", "/v1/resize", shrink).statusCode());
        assertTrue(ops.calls.contains("cache a0 40"), ops.calls.toString());
    }

    @Test
    void badBodiesAreRefusedWithoutEchoingThem() throws Exception {
        HttpResponse<String> notJson = call("POST", "/v1/resize", "{nope");
        assertEquals(400, notJson.statusCode());
        String hostile = "{\"targets\":[{\"<script>" + "x".repeat(100) + "\":1}]}";
        HttpResponse<String> unknown = call("POST", "/v1/resize", hostile);
        assertEquals(400, unknown.statusCode());
        assertFalse(unknown.body().contains("<script>"), unknown.body());
        assertFalse(unknown.body().contains("x".repeat(40)), unknown.body());
        assertEquals(400, call("PUT", "/v1/budget", "{\"budgetBytes\":\"lots\"}").statusCode());
    }

    @Test
    void aBugIsAnsweredWithA500AndTheEndpointServesOn() throws Exception {
        ops.onRead = new IllegalStateException("native handle 0x7f00 is gone");
        HttpResponse<String> failed = call("GET", "/v1/slots", null);
        assertEquals(500, failed.statusCode());
        assertFalse(failed.body().contains("0x7f00"), "the details stay in the TaskManager's log");
        ops.onRead = null;
        assertEquals(200, call("GET", "/v1/slots", null).statusCode());
    }
}
