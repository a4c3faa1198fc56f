package dev.hybridscaler.flink;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.operators.SlotSharingGroup;
import org.apache.flink.api.dag.Transformation;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.core.memory.ManagedMemoryUseCase;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.transformations.PartitionTransformation;
import org.apache.flink.streaming.api.transformations.SideOutputTransformation;
import org.apache.flink.streaming.api.transformations.UnionTransformation;
import org.apache.flink.streaming.runtime.partitioner.ForwardPartitioner;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.JsonProcessingException;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * Makes Flink honour the per-operator CPU, heap and managed memory that the hybrid scaler writes
 * into the job's configuration. Call {@link #apply(StreamExecutionEnvironment)} once, after the
 * pipeline is built and before {@code execute()}.
 *
 * <p>Flink has no per-operator memory; it has per-slot-sharing-group resources (fine-grained
 * resource management, honoured by the default scheduler). So each predicted operator chain
 * (JobVertex) that the configuration names gets its own slot-sharing group with those resources.
 * The rules, in docs/flink-plugin.md:
 *
 * <ul>
 *   <li>A chain starts at a source, after a keyBy/rebalance/other repartitioning (not after a
 *       forward one), and at an operator with several inputs. Any other operator joins the chain
 *       of its only input, so applying the plugin does not break a chain Flink would have built,
 *       and JobVertex ids (which the controller keys parallelism by) stay what they were.
 *   <li>A chain whose operators' uids are named in the configuration becomes group {@code
 *       hybridscaler:<uid>} with that entry's resources; a stateless chain named with {@code
 *       managedMemoryMb: 0} therefore holds no managed memory. An operator named with other values
 *       than the chain it would join starts a group of its own: the controller names whole
 *       JobVertices, so Flink did not chain the two (e.g. a forward edge across parallelisms).
 *   <li>Entries with the same {@code slotSharingGroup} name put their chains in one group
 *       {@code hybridscaler-group:<name>}: Flink then runs one subtask of each of those chains in
 *       one slot of the entries' (identical) resources, and chains with a different group never
 *       chain to them.
 *   <li>A chain named by none of its uids keeps the group it had (Flink's "default" unless the
 *       author chose one) and Flink's default slot size.
 * </ul>
 */
public final class HybridResources {

    /** The configuration key the controller writes; JSON keyed by operator uid. */
    public static final ConfigOption<String> OPERATOR_RESOURCES =
            ConfigOptions.key("hybridscaler.operator-resources")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "JSON object: operator uid -> {cpuCores, taskHeapMb, managedMemoryMb,"
                                    + " optional slotSharingGroup} for one slot of that"
                                    + " operator's slot-sharing group.");

    /**
     * The global job parameter (REST {@code /jobs/<jid>/config} → {@code user-config}) listing
     * the job's operator uids, comma-separated, so the controller can map vertex ids to uids.
     */
    public static final String OPERATOR_UIDS = "hybridscaler.operator-uids";

    /** Prefix of the slot-sharing groups this class creates for one chain (then the uid). */
    public static final String GROUP_PREFIX = "hybridscaler:";

    /** Prefix of the groups named by {@code slotSharingGroup} (then that name). */
    public static final String NAMED_GROUP_PREFIX = "hybridscaler-group:";

    /** The longest {@code slotSharingGroup} name, in characters (as long as an operator uid). */
    public static final int MAX_GROUP_NAME_LENGTH = 256;

    private static final Logger LOG = LoggerFactory.getLogger(HybridResources.class);
    private static final String DEFAULT_GROUP = "default";
    /** Rejects text after the object: a value with one brace too many is not silently cut. */
    private static final ObjectMapper JSON =
            new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
    private static final List<String> FIELDS =
            List.of("cpuCores", "taskHeapMb", "managedMemoryMb", "slotSharingGroup");

    private HybridResources() {}

    /** What {@link #apply} did: the groups it made, and configured uids that match no operator. */
    public record Applied(List<Group> groups, Set<String> unmatchedUids) {
        public static final Applied NOTHING = new Applied(List.of(), Set.of());
    }

    /**
     * One slot-sharing group: its predicted chains' operators and the resources of one slot.
     */
    public record Group(String name, OperatorResources resources, List<String> operatorNames) {}

    /** Reads {@code hybridscaler.operator-resources} from the environment's configuration. */
    public static Applied apply(StreamExecutionEnvironment env) {
        return apply(env, env.getConfiguration());
    }

    /**
     * Assigns slot-sharing groups from {@code config}; leaves the job untouched when the key is
     * absent or blank.
     *
     * @throws IllegalConfigurationException when the value is not valid; the message names the key
     *     and the operator uid
     */
    public static Applied apply(StreamExecutionEnvironment env, ReadableConfig config) {
        publishUids(env);
        String value = config.get(OPERATOR_RESOURCES);
        if (value == null || value.isBlank()) {
            return Applied.NOTHING;
        }
        Map<String, OperatorResources> wanted = parse(value);
        Applied applied = assign(env.getTransformations(), wanted);
        for (Group g : applied.groups()) {
            LOG.info("{}: group {} {} for {}", OPERATOR_RESOURCES.key(), g.name(), g.resources(),
                    g.operatorNames());
        }
        if (!applied.unmatchedUids().isEmpty()) {
            // A stale entry (e.g. after an operator was removed) must not stop the job.
            LOG.warn("{}: no operator has uid {}; those entries are ignored",
                    OPERATOR_RESOURCES.key(), applied.unmatchedUids());
        }
        return applied;
    }

    /**
     * Adds {@link #OPERATOR_UIDS} to the job's global parameters (keeping the author's), also when
     * no resources are configured: the controller needs the uids before it writes any.
     */
    private static void publishUids(StreamExecutionEnvironment env) {
        Set<String> uids = new LinkedHashSet<>();
        for (Transformation<?> t : physicalTransformations(env.getTransformations()).values()) {
            if (t.getUid() == null) {
                continue;
            }
            if (t.getUid().contains(",")) {
                LOG.warn("{}: uid \"{}\" contains a comma and is not published",
                        OPERATOR_UIDS, t.getUid());
            } else {
                uids.add(t.getUid());
            }
        }
        Map<String, String> params =
                new LinkedHashMap<>(env.getConfig().getGlobalJobParameters().toMap());
        params.put(OPERATOR_UIDS, String.join(",", uids));
        env.getConfig().setGlobalJobParameters(new ExecutionConfig.GlobalJobParameters() {
            private static final long serialVersionUID = 1L;

            @Override
            public Map<String, String> toMap() {
                return params;
            }
        });
    }

    /**
     * Parses the JSON value of {@link #OPERATOR_RESOURCES}.
     *
     * @throws IllegalConfigurationException naming the key, and the uid and field at fault
     */
    public static Map<String, OperatorResources> parse(String value) {
        JsonNode root;
        try {
            root = JSON.readTree(value);
        } catch (JsonProcessingException e) {
            throw invalid("is not valid JSON: " + e.getOriginalMessage());
        }
        if (root == null || !root.isObject()) {
            throw invalid("must be a JSON object keyed by operator uid");
        }
        Map<String, OperatorResources> out = new LinkedHashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            out.put(e.getKey(), parseEntry(e.getKey(), e.getValue()));
        }
        checkGroupsAgree(out);
        return out;
    }

    /** Every entry naming one group describes the same slot; else the job fails, naming all. */
    private static void checkGroupsAgree(Map<String, OperatorResources> entries) {
        Map<String, Map<String, OperatorResources>> byGroup = new LinkedHashMap<>();
        entries.forEach((uid, r) -> {
            if (r.slotSharingGroup() != null) {
                byGroup.computeIfAbsent(r.slotSharingGroup(), g -> new LinkedHashMap<>()).put(uid, r);
            }
        });
        byGroup.forEach((group, members) -> {
            OperatorResources first = members.values().iterator().next();
            if (members.values().stream().allMatch(first::sameSlot)) {
                return;
            }
            List<String> described = new ArrayList<>();
            members.forEach((uid, r) -> described.add("\"" + uid + "\" " + r.slot()));
            throw invalid("gives slot sharing group \"" + group + "\" different resources:"
                    + " every operator uid in a group must describe the same slot, got "
                    + String.join(", ", described));
        });
    }

    private static OperatorResources parseEntry(String uid, JsonNode node) {
        if (!node.isObject()) {
            throw invalid(uid, "must be an object with " + FIELDS);
        }
        for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
            String field = it.next();
            if (!FIELDS.contains(field)) {
                throw invalid(uid, "unknown field \"" + field + "\" (known: " + FIELDS + ")");
            }
        }
        JsonNode cpu = node.get("cpuCores");
        if (cpu == null || !cpu.isNumber() || !Double.isFinite(cpu.doubleValue())
                || cpu.doubleValue() <= 0) {
            throw invalid(uid, "cpuCores must be a number > 0, got " + cpu);
        }
        int heap = integer(uid, node, "taskHeapMb", 1);
        int managed = integer(uid, node, "managedMemoryMb", 0);
        return new OperatorResources(cpu.doubleValue(), heap, managed, groupName(uid, node));
    }

    /** The optional {@code slotSharingGroup}: non-blank, bounded, printable text. */
    private static String groupName(String uid, JsonNode node) {
        JsonNode v = node.get("slotSharingGroup");
        if (v == null) {
            return null;
        }
        String rule = "slotSharingGroup must be a non-blank string of at most "
                + MAX_GROUP_NAME_LENGTH + " printable characters, got ";
        if (!v.isTextual()) {
            throw invalid(uid, rule + v);
        }
        String name = v.textValue();
        if (name.isBlank() || name.codePointCount(0, name.length()) > MAX_GROUP_NAME_LENGTH
                || !name.codePoints().allMatch(HybridResources::printable)) {
            // Abbreviated: the name itself may be huge or hold line breaks.
            throw invalid(uid, rule + (name.length() > 40 ? "a value of " + name.length()
                    + " characters" : v.toString()));
        }
        return name;
    }

    private static boolean printable(int c) {
        int type = Character.getType(c);
        return !Character.isISOControl(c) && type != Character.FORMAT
                && type != Character.UNASSIGNED && type != Character.SURROGATE
                && type != Character.LINE_SEPARATOR && type != Character.PARAGRAPH_SEPARATOR;
    }

    private static int integer(String uid, JsonNode node, String field, int min) {
        JsonNode v = node.get(field);
        if (v == null || !v.isNumber() || !v.canConvertToExactIntegral()
                || !v.canConvertToInt() || v.intValue() < min) {
            throw invalid(uid, field + " must be an integer >= " + min + ", got " + v);
        }
        return v.intValue();
    }

    private static IllegalConfigurationException invalid(String what) {
        return new IllegalConfigurationException(
                "Invalid value of " + OPERATOR_RESOURCES.key() + ": it " + what);
    }

    private static IllegalConfigurationException invalid(String uid, String what) {
        return new IllegalConfigurationException(
                "Invalid value of " + OPERATOR_RESOURCES.key() + " for operator uid \"" + uid
                        + "\": " + what);
    }

    /** Groups the transformations into predicted chains and sets their slot-sharing groups. */
    static Applied assign(List<Transformation<?>> sinks, Map<String, OperatorResources> wanted) {
        Collection<Transformation<?>> operators = physicalTransformations(sinks).values();
        Map<Integer, String> groupWithoutPlugin = groupsFlinkWouldChoose(operators);
        Map<String, Group> groups = new LinkedHashMap<>();
        for (Chain chain : predictChains(operators, wanted)) {
            if (chain.resources == null) {
                // Pin the group it had: Flink would otherwise let it inherit a named input's group.
                chain.members.stream().filter(t -> t.getSlotSharingGroup().isEmpty())
                        .forEach(t -> t.setSlotSharingGroup(groupWithoutPlugin.get(t.getId())));
            } else {
                Group g = giveGroup(chain);
                // Chains of one named group: one Group listing all their operators.
                groups.merge(g.name(), g, (a, b) -> new Group(a.name(), a.resources(),
                        concat(a.operatorNames(), b.operatorNames())));
            }
        }
        Set<String> unmatched = new LinkedHashSet<>(wanted.keySet());
        operators.forEach(t -> unmatched.remove(t.getUid()));
        return new Applied(List.copyOf(groups.values()), Set.copyOf(unmatched));
    }

    /** {@code operators} in id order, so every input comes before its consumers. */
    private static List<Chain> predictChains(Collection<Transformation<?>> operators,
                                             Map<String, OperatorResources> wanted) {
        Map<Integer, Chain> chainOf = new HashMap<>();
        List<Chain> chains = new ArrayList<>();
        for (Transformation<?> t : operators) {
            List<Input> inputs = inputsOf(t);
            OperatorResources own = t.getUid() == null ? null : wanted.get(t.getUid());
            Chain chain = null;
            if (inputs.size() == 1 && inputs.get(0).direct()) {
                chain = chainOf.get(inputs.get(0).physical().getId());
                if (own != null && chain.resources != null && !own.equals(chain.resources)) {
                    // The controller writes one value per JobVertex: different values mean Flink
                    // did not chain these two (e.g. different parallelism), so neither do we.
                    // Another slotSharingGroup is a different value: Flink never chains
                    // across groups.
                    chain = null;
                }
            }
            if (chain == null) {
                chain = new Chain();
                chains.add(chain);
            }
            if (own != null && chain.resources == null) {
                chain.owner = t.getUid();
                chain.resources = own;
            }
            chain.members.add(t);
            chainOf.put(t.getId(), chain);
        }
        return chains;
    }

    private static List<String> concat(List<String> a, List<String> b) {
        List<String> out = new ArrayList<>(a);
        out.addAll(b);
        return List.copyOf(out);
    }

    /** The chain's own group, or the named group its entry gives it. */
    private static Group giveGroup(Chain chain) {
        String named = chain.resources.slotSharingGroup();
        SlotSharingGroup group = chain.resources.toSlotSharingGroup(
                named == null ? GROUP_PREFIX + chain.owner : NAMED_GROUP_PREFIX + named);
        List<String> names = new ArrayList<>();
        for (Transformation<?> t : chain.members) {
            t.setSlotSharingGroup(group);
            names.add(t.getName());
        }
        if (chain.resources.managedMemoryMb() == 0
                && chain.members.stream().anyMatch(HybridResources::isStateful)) {
            LOG.warn("{}: uid {} has keyed state but managedMemoryMb 0",
                    OPERATOR_RESOURCES.key(), chain.owner);
        }
        return new Group(group.getName(), chain.resources, List.copyOf(names));
    }

    /**
     * The group Flink's StreamGraphGenerator gives each operator (in id order): its own, else the
     * one all its inputs share, else {@code default}.
     */
    private static Map<Integer, String> groupsFlinkWouldChoose(
            Collection<Transformation<?>> operators) {
        Map<Integer, String> groupOf = new HashMap<>();
        for (Transformation<?> t : operators) {
            Set<String> inherited = new HashSet<>();
            inputsOf(t).forEach(in -> inherited.add(groupOf.get(in.physical().getId())));
            String group = t.getSlotSharingGroup().map(SlotSharingGroup::getName)
                    .orElse(inherited.size() == 1 ? inherited.iterator().next() : DEFAULT_GROUP);
            groupOf.put(t.getId(), group);
        }
        return groupOf;
    }

    private static List<Input> inputsOf(Transformation<?> t) {
        List<Input> inputs = new ArrayList<>();
        t.getInputs().forEach(in -> collectInputs(in, true, inputs));
        return inputs;
    }

    /** A predicted operator chain and the entry that names it, if any. */
    private static final class Chain {
        final List<Transformation<?>> members = new ArrayList<>();
        String owner;
        OperatorResources resources;
    }

    private record Input(Transformation<?> physical, boolean direct) {}

    /**
     * Follows virtual nodes to the physical inputs; any repartitioning but a forward one (forward(),
     * reinterpretAsKeyedStream) makes the edge indirect.
     */
    private static void collectInputs(Transformation<?> t, boolean direct, List<Input> out) {
        if (t instanceof PartitionTransformation<?> p) {
            boolean forward = p.getPartitioner() instanceof ForwardPartitioner;
            t.getInputs().forEach(in -> collectInputs(in, direct && forward, out));
        } else if (t instanceof UnionTransformation || t instanceof SideOutputTransformation) {
            t.getInputs().forEach(in -> collectInputs(in, direct, out));
        } else {
            out.add(new Input(t, direct));
        }
    }

    private static boolean isVirtual(Transformation<?> t) {
        return t instanceof PartitionTransformation
                || t instanceof UnionTransformation
                || t instanceof SideOutputTransformation;
    }

    /** Keyed operators declare the state backend's slot-scoped use of managed memory. */
    private static boolean isStateful(Transformation<?> t) {
        return t.getManagedMemorySlotScopeUseCases().contains(ManagedMemoryUseCase.STATE_BACKEND);
    }

    private static Map<Integer, Transformation<?>> physicalTransformations(
            List<Transformation<?>> sinks) {
        Map<Integer, Transformation<?>> byId = new TreeMap<>();
        Deque<Transformation<?>> todo = new ArrayDeque<>(sinks);
        Set<Integer> seen = new HashSet<>();
        while (!todo.isEmpty()) {
            Transformation<?> t = todo.pop();
            if (!seen.add(t.getId())) {
                continue;
            }
            if (!isVirtual(t)) {
                byId.put(t.getId(), t);
            }
            todo.addAll(t.getInputs());
        }
        return byId;
    }
}
