package dev.hybridscaler.peer;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

/** Reading our JSON with errors that name the field, as the project's house rules ask. */
final class Json {
    static final ObjectMapper MAPPER = new ObjectMapper();

    private Json() {}

    /** A bad input: the message names the field (a JSON path like windows[2].vertices.x). */
    static final class InputError extends IllegalArgumentException {
        InputError(String path, String what) {
            super(path + ": " + what);
        }
    }

    static JsonNode field(JsonNode node, String path, String name) {
        if (node == null || !node.isObject()) {
            throw new InputError(path, "must be an object");
        }
        JsonNode value = node.get(name);
        if (value == null || value.isNull()) {
            throw new InputError(join(path, name), "missing");
        }
        return value;
    }

    static String text(JsonNode node, String path, String name) {
        JsonNode value = field(node, path, name);
        if (!value.isTextual() || value.asText().isEmpty()) {
            throw new InputError(join(path, name), "must be a non-empty string, got " + value);
        }
        return value.asText();
    }

    static double number(JsonNode node, String path, String name) {
        JsonNode value = field(node, path, name);
        if (!value.isNumber() || !Double.isFinite(value.asDouble())) {
            throw new InputError(join(path, name), "must be a finite number, got " + value);
        }
        return value.asDouble();
    }

    /** A number, or NaN when the field is absent or null. */
    static double optionalNumber(JsonNode node, String path, String name) {
        JsonNode value = node.get(name);
        if (value == null || value.isNull()) {
            return Double.NaN;
        }
        return number(node, path, name);
    }

    static int integer(JsonNode node, String path, String name, int least) {
        JsonNode value = field(node, path, name);
        if (!value.isIntegralNumber() || !value.canConvertToInt() || value.asInt() < least) {
            throw new InputError(join(path, name), "must be an integer >= " + least + ", got " + value);
        }
        return value.asInt();
    }

    static String join(String path, String name) {
        return path.isEmpty() ? name : path + "." + name;
    }

    /** JSON has no NaN or infinity: those become null. */
    static void putNumber(ObjectNode node, String name, double value) {
        if (Double.isFinite(value)) {
            node.put(name, value);
        } else {
            node.putNull(name);
        }
    }
}
