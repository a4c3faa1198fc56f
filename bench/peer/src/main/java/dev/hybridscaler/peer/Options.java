package dev.hybridscaler.peer;

import org.apache.flink.autoscaler.config.AutoScalerOptions;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.FallbackKey;

import java.lang.reflect.Modifier;
import java.util.Set;
import java.util.TreeSet;

/**
 * The job.autoscaler.* keys this flink-autoscaler release knows. Upstream silently ignores an
 * unknown key, so a key of another release (1.11 renamed target.utilization to
 * utilization.target) would quietly fall back to the default; we refuse it, naming it.
 */
final class Options {
    static final Set<String> KNOWN = known();

    private Options() {}

    static void check(String key, String path) {
        if (key.startsWith("job.autoscaler.") && !KNOWN.contains(key)) {
            throw new Json.InputError(path, "flink-autoscaler 1.10.0 has no option " + key
                    + " (it would be ignored); known: " + KNOWN);
        }
    }

    private static Set<String> known() {
        var out = new TreeSet<String>();
        for (var field : AutoScalerOptions.class.getFields()) {
            if (!Modifier.isStatic(field.getModifiers())
                    || !ConfigOption.class.isAssignableFrom(field.getType())) {
                continue;
            }
            try {
                var option = (ConfigOption<?>) field.get(null);
                out.add(option.key());
                for (FallbackKey k : option.fallbackKeys()) {
                    out.add(k.getKey());
                }
            } catch (IllegalAccessException e) {
                throw new IllegalStateException(e);
            }
        }
        return out;
    }
}
