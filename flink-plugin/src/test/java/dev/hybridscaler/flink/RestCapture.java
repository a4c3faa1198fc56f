package dev.hybridscaler.flink;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;

/**
 * What the golden recorders share: Flink REST answers saved unmodified into a directory, their
 * HTTP statuses kept for {@code statuses.json}, and the polls that wait for a job.
 */
final class RestCapture {
    static final ObjectMapper JSON = new ObjectMapper();
    private final HttpClient http =
            HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    private final Map<String, Integer> statuses = new TreeMap<>();
    private final Path out;
    private final URI rest;

    RestCapture(Path out, URI rest) {
        this.out = out;
        this.rest = rest;
    }

    /** {@code -Dgolden.dir}, created if missing; {@code example} says what to set it to. */
    static Path goldenDir(String example) throws IOException {
        String dir = System.getProperty("golden.dir");
        if (dir == null) {
            throw new IllegalStateException("set -Dgolden.dir=" + example);
        }
        return Files.createDirectories(Path.of(dir));
    }

    /** Sends {@code path} and saves the body unmodified as {@code file}; returns it as JSON. */
    JsonNode save(String file, String method, String path, String body)
            throws IOException, InterruptedException {
        HttpRequest.Builder request = HttpRequest.newBuilder(rest.resolve(path))
                .timeout(Duration.ofSeconds(30));
        if ("PUT".equals(method)) {
            request.header("Content-Type", "application/json")
                    .PUT(HttpRequest.BodyPublishers.ofString(body));
        }
        HttpResponse<String> response = http.send(request.build(),
                HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
        Files.writeString(out.resolve(file), response.body());
        statuses.put(file, response.statusCode());
        return response.body().isEmpty() ? JSON.createObjectNode() : JSON.readTree(response.body());
    }

    /** {@code statuses.json}: each saved file's HTTP status. */
    void writeStatuses() throws IOException {
        Files.writeString(out.resolve("statuses.json"),
                JSON.writerWithDefaultPrettyPrinter().writeValueAsString(statuses) + "\n");
    }

    /** The body of any URI (the reporter's /metrics). */
    String body(URI uri) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(uri).build(), HttpResponse.BodyHandlers.ofString())
                .body();
    }

    /** {@code path} as JSON, or an empty object if it cannot be read (for polls). */
    JsonNode get(String path) {
        try {
            return JSON.readTree(body(rest.resolve(path)));
        } catch (IOException e) {
            return JSON.createObjectNode();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return JSON.createObjectNode();
        }
    }

    /** Records the vertex's subtasks counted in, as the REST metric store has them. */
    double counted(String jid, String vertex) {
        JsonNode sum = get("/v1/jobs/" + jid + "/vertices/" + vertex
                + "/subtasks/metrics?get=numRecordsIn&agg=sum").path(0).path("sum");
        return sum.isNumber() ? sum.asDouble() : 0;
    }

    String state(String jid) {
        return get("/v1/jobs/" + jid).path("state").asText();
    }
}
