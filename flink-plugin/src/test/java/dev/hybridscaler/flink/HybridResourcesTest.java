package dev.hybridscaler.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static dev.hybridscaler.flink.ResourcesJson.entry;
import static dev.hybridscaler.flink.ResourcesJson.json;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.runtime.clusterframework.types.ResourceProfile;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.DataStreamUtils;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

/** The key's parsing and the grouping rules, on job graphs built without a cluster. */
class HybridResourcesTest {

    private static final String KEY = HybridResources.OPERATOR_RESOURCES.key();

    /** Each kind of bad value; the message names the key, the uid if any, and the fault. */
    @ParameterizedTest(name = "{0}")
    @CsvSource(
            delimiter = '|',
            value = {
                "not an object      | [1, 2]                                                           | : it must be a JSON object keyed by operator uid",
                "JSON null          | null                                                             | : it must be a JSON object keyed by operator uid",
                "broken JSON        | {\"a\":                                                          | : it is not valid JSON",
                "text after object  | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1}}} | : it is not valid JSON",
                "entry not object   | {\"counter\": 3}                                                 | for operator uid \"counter\": must be an object",
                "unknown field      | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1,\"memMb\":1}} | for operator uid \"counter\": unknown field \"memMb\"",
                "missing cpu        | {\"counter\": {\"taskHeapMb\":64,\"managedMemoryMb\":1}}          | for operator uid \"counter\": cpuCores must be a number > 0, got null",
                "zero cpu           | {\"counter\": {\"cpuCores\":0,\"taskHeapMb\":64,\"managedMemoryMb\":1}} | for operator uid \"counter\": cpuCores must be a number > 0, got 0",
                "negative cpu       | {\"counter\": {\"cpuCores\":-0.5,\"taskHeapMb\":64,\"managedMemoryMb\":1}} | for operator uid \"counter\": cpuCores must be a number > 0, got -0.5",
                "cpu as string      | {\"counter\": {\"cpuCores\":\"1\",\"taskHeapMb\":64,\"managedMemoryMb\":1}} | for operator uid \"counter\": cpuCores must be a number > 0, got \"1\"",
                "missing heap       | {\"counter\": {\"cpuCores\":1,\"managedMemoryMb\":1}}            | for operator uid \"counter\": taskHeapMb must be an integer >= 1, got null",
                "zero heap          | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":0,\"managedMemoryMb\":1}} | for operator uid \"counter\": taskHeapMb must be an integer >= 1, got 0",
                "fractional heap    | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64.5,\"managedMemoryMb\":1}} | for operator uid \"counter\": taskHeapMb must be an integer >= 1, got 64.5",
                "heap as string     | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":\"64\",\"managedMemoryMb\":1}} | for operator uid \"counter\": taskHeapMb must be an integer >= 1, got \"64\"",
                "missing managed    | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64}}                 | for operator uid \"counter\": managedMemoryMb must be an integer >= 0, got null",
                "fractional managed | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1.5}} | for operator uid \"counter\": managedMemoryMb must be an integer >= 0, got 1.5",
                "negative managed   | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":-1}} | for operator uid \"counter\": managedMemoryMb must be an integer >= 0, got -1",
                "managed beyond int | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":3000000000}} | for operator uid \"counter\": managedMemoryMb must be an integer >= 0, got 3000000000",
                "group not a string | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1,\"slotSharingGroup\":7}} | for operator uid \"counter\": slotSharingGroup must be a non-blank string of at most 256 printable characters, got 7",
                "group null         | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1,\"slotSharingGroup\":null}} | for operator uid \"counter\": slotSharingGroup must be a non-blank string of at most 256 printable characters, got null",
                "group empty        | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1,\"slotSharingGroup\":\"\"}} | for operator uid \"counter\": slotSharingGroup must be a non-blank string of at most 256 printable characters, got \"\"",
                "group blank        | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1,\"slotSharingGroup\":\"  \"}} | for operator uid \"counter\": slotSharingGroup must be a non-blank string of at most 256 printable characters, got \"  \"",
                "group control char | {\"counter\": {\"cpuCores\":1,\"taskHeapMb\":64,\"managedMemoryMb\":1,\"slotSharingGroup\":\"a\\nb\"}} | for operator uid \"counter\": slotSharingGroup must be a non-blank string of at most 256 printable characters, got \"a\\nb\"",
            })
    void invalidValuesFailAtJobStartNamingKeyAndUid(String why, String value, String expected) {
        StreamExecutionEnvironment env = counterJob(value);
        IllegalConfigurationException e =
                assertThrows(IllegalConfigurationException.class, () -> HybridResources.apply(env));
        assertTrue(e.getMessage().startsWith("Invalid value of " + KEY), e.getMessage());
        assertTrue(e.getMessage().contains(expected), e.getMessage());
    }

    @Test
    void groupNameLongerThanTheBoundFailsWithoutEchoingIt() {
        String name = "g".repeat(HybridResources.MAX_GROUP_NAME_LENGTH);
        HybridResources.apply(counterJob(json(entry("counter", 1, 64, 1, name))));
        IllegalConfigurationException e = assertThrows(IllegalConfigurationException.class,
                () -> HybridResources.apply(counterJob(json(entry("counter", 1, 64, 1, name + "g")))));
        assertTrue(e.getMessage().endsWith("printable characters, got a value of 257 characters"),
                e.getMessage());
    }

    @Test
    void membersOfAGroupWithDifferentSlotsFailNamingKeyGroupAndUids() {
        String value = json(entry("gen", 0.5, 64, 96, "shared"), entry("key-map", 0.5, 64, 96, "shared"),
                entry("counter", 0.5, 64, 128, "shared"));
        IllegalConfigurationException e = assertThrows(IllegalConfigurationException.class,
                () -> HybridResources.apply(counterJob(value)));
        assertEquals("Invalid value of " + KEY + ": it gives slot sharing group \"shared\" different"
                + " resources: every operator uid in a group must describe the same slot, got"
                + " \"gen\" {cpuCores 0.5, taskHeapMb 64, managedMemoryMb 96},"
                + " \"key-map\" {cpuCores 0.5, taskHeapMb 64, managedMemoryMb 96},"
                + " \"counter\" {cpuCores 0.5, taskHeapMb 64, managedMemoryMb 128}", e.getMessage());
    }

    @Test
    void chainsNamingOneGroupShareItsSlotAndKeepTheirChains() {
        // The source chain and the counter chain in one group: Flink puts subtask i of both in
        // one slot of the group's size; the vertices (chains and ids) stay those of the plain job.
        String value = json(entry("gen", 0.5, 64, 96, "shared"), entry("counter", 0.5, 64, 96, "shared"));
        StreamExecutionEnvironment env = counterJob(value);
        HybridResources.Applied applied = HybridResources.apply(env);
        JobGraph graph = env.getStreamGraph().getJobGraph();

        assertEquals(vertexNames(plainGraph()), vertexNames(graph));
        assertEquals(1, applied.groups().size());
        HybridResources.Group group = applied.groups().get(0);
        assertEquals("hybridscaler-group:shared", group.name());
        assertEquals(new OperatorResources(0.5, 64, 96, "shared"), group.resources());
        assertEquals(List.of(CounterJob.SOURCE, CounterJob.KEY_MAP, CounterJob.COUNTER,
                CounterJob.FORMAT, CounterJob.SINK), group.operatorNames());
        Set<Object> groups = new java.util.HashSet<>();
        for (JobVertex v : graph.getVertices()) {
            groups.add(v.getSlotSharingGroup());
            var profile = v.getSlotSharingGroup().getResourceProfile();
            assertEquals(96, profile.getManagedMemory().getMebiBytes(), v.getName());
            assertEquals(0.5, profile.getCpuCores().getValue().doubleValue(), 1e-9);
        }
        assertEquals(1, groups.size(), "both vertices in one Flink slot sharing group");
    }

    @Test
    void operatorInAnotherGroupThanItsChainIsNotChainedToIt() {
        // Flink never chains across slot sharing groups: the sink becomes a vertex of its own.
        String value = json(entry("counter", 0.5, 64, 96, "state"), entry("format", 0.5, 64, 96, "state"),
                entry("sink", 0.5, 64, 96, "out"));
        StreamExecutionEnvironment env = counterJob(value);
        Map<String, List<String>> members = members(HybridResources.apply(env));
        assertEquals(List.of(CounterJob.COUNTER, CounterJob.FORMAT),
                members.get("hybridscaler-group:state"));
        assertEquals(List.of(CounterJob.SINK), members.get("hybridscaler-group:out"));
        assertEquals(3, env.getStreamGraph().getJobGraph().getNumberOfVertices());
    }

    @Test
    void aGroupNameNeverMergesWithAUidsOwnGroup() {
        // Entry "counter" without a group and entry "gen" in a group named "counter": two groups.
        String value = json(entry("gen", 0.25, 32, 0, "counter"), entry("counter", 0.5, 64, 96));
        Map<String, List<String>> members = members(HybridResources.apply(counterJob(value)));
        assertEquals(List.of(CounterJob.SOURCE, CounterJob.KEY_MAP),
                members.get("hybridscaler-group:counter"));
        assertEquals(List.of(CounterJob.COUNTER, CounterJob.FORMAT, CounterJob.SINK),
                members.get("hybridscaler:counter"));
    }

    @Test
    void operatorUidsArePublishedNextToTheAuthorsJobParameters() {
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(new Configuration());
        env.getConfig().setGlobalJobParameters(new ExecutionConfig.GlobalJobParameters() {
            @Override
            public Map<String, String> toMap() {
                return Map.of("input", "s3://bucket");
            }
        });
        CounterJob.build(env);
        HybridResources.apply(env);
        Map<String, String> params = env.getConfig().getGlobalJobParameters().toMap();
        assertEquals("s3://bucket", params.get("input"));
        assertEquals("gen,key-map,counter,format,sink", params.get(HybridResources.OPERATOR_UIDS));
    }

    @Test
    void absentOrBlankKeyLeavesTheJobUntouched() {
        String untouched = shape(authorGroupJob(new Configuration(), false));
        assertEquals(untouched, shape(authorGroupJob(new Configuration(), true)));
        assertEquals(untouched, shape(authorGroupJob(config("  "), true)));
    }

    @Test
    void unnamedChainKeepsTheGroupTheAuthorGaveIt() {
        // Only the counter is named: the source chain keeps the author's group "mine" whole,
        // instead of its map falling back to "default" and leaving the source's chain.
        StreamGraph graph = authorGroupJob(config(json(entry("counter", 0.5, 64, 96))), true);
        Map<String, String> groups = new HashMap<>();
        graph.getStreamNodes().forEach(n -> groups.put(n.getOperatorName(), n.getSlotSharingGroup()));
        assertEquals("mine", groups.get("Source: gen"));
        assertEquals("mine", groups.get("key-map"));
        assertEquals("hybridscaler:counter", groups.get("counter"));
        assertEquals(vertexNames(authorGroupJob(new Configuration(), false).getJobGraph()),
                vertexNames(graph.getJobGraph()));
    }

    @Test
    void statefulChainGetsItsOwnGroupAndStatelessChainsTheirEntries() {
        String value = json(entry("key-map", 0.25, 32, 0), entry("counter", 0.5, 64, 96),
                entry("gone", 1, 64, 1));
        StreamExecutionEnvironment env = counterJob(value);
        Map<JobVertexID, String> before = vertexNames(plainGraph());

        HybridResources.Applied applied = HybridResources.apply(env);
        JobGraph graph = env.getStreamGraph().getJobGraph();

        // Same vertices (ids and chains) as without the plugin: chains are kept.
        assertEquals(before, vertexNames(graph));
        assertEquals(Set.of("gone"), applied.unmatchedUids());
        Map<String, HybridResources.Group> groups = applied.groups().stream()
                .collect(Collectors.toMap(HybridResources.Group::name, g -> g));
        assertEquals(2, groups.size());
        HybridResources.Group counter = groups.get("hybridscaler:counter");
        assertEquals(new OperatorResources(0.5, 64, 96), counter.resources());
        // The stateless format map and the sink writer are chained to the counter: same group.
        assertEquals(List.of(CounterJob.COUNTER, CounterJob.FORMAT, CounterJob.SINK),
                counter.operatorNames());
        assertEquals(List.of(CounterJob.SOURCE, CounterJob.KEY_MAP),
                groups.get("hybridscaler:key-map").operatorNames());

        for (JobVertex v : graph.getVertices()) {
            var profile = v.getSlotSharingGroup().getResourceProfile();
            if (v.getName().startsWith(CounterJob.COUNTER)) {
                assertEquals(96, profile.getManagedMemory().getMebiBytes());
                assertEquals(64, profile.getTaskHeapMemory().getMebiBytes());
                assertEquals(0.5, profile.getCpuCores().getValue().doubleValue(), 1e-9);
            } else {
                assertEquals(0, profile.getManagedMemory().getBytes(), v.getName());
            }
        }
    }

    @Test
    void unnamedChainIsPinnedToTheDefaultGroupInsteadOfInheritingANamedOne() {
        // Only the source chain is named; the keyed counter downstream would otherwise inherit it.
        String value = json(entry("gen", 0.25, 32, 0));
        StreamExecutionEnvironment env = counterJob(value);
        HybridResources.apply(env);
        JobGraph graph = env.getStreamGraph().getJobGraph();
        for (JobVertex v : graph.getVertices()) {
            boolean named = v.getName().startsWith("Source");
            assertEquals(named, !v.getSlotSharingGroup().getResourceProfile().equals(
                    ResourceProfile.UNKNOWN),
                    v.getName());
        }
    }

    @Test
    void operatorNamedWithOtherValuesThanItsChainStartsItsOwnGroup() {
        // The controller names whole vertices: different values mean Flink did not chain them.
        String value = json(entry("counter", 0.5, 64, 96), entry("format", 0.5, 64, 96),
                entry("sink", 0.5, 64, 0));
        StreamExecutionEnvironment env = counterJob(value);
        Map<String, List<String>> members = members(HybridResources.apply(env));
        assertEquals(List.of(CounterJob.COUNTER, CounterJob.FORMAT),
                members.get("hybridscaler:counter"));
        assertEquals(List.of(CounterJob.SINK), members.get("hybridscaler:sink"));
        JobGraph graph = env.getStreamGraph().getJobGraph();
        assertEquals(3, graph.getNumberOfVertices(), "the sink is no longer chained");
    }

    @Test
    void keyedOperatorOnAReinterpretedKeyedStreamStaysChained() {
        // reinterpretAsKeyedStream is a forward edge: Flink chains "b" to "a", one vertex.
        String value = json(entry("a", 1, 64, 32), entry("b", 1, 64, 32));
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(config(value));
        KeySelector<Long, Long> key = x -> x;
        DataStream<Long> a = env.fromSequence(0, 10).uid("gen").keyBy(key)
                .reduce(Long::sum).uid("a").name("a");
        DataStreamUtils.reinterpretAsKeyedStream(a, key).reduce(Long::sum).uid("b").name("b")
                .sinkTo(new DiscardingSink<>()).uid("sink");
        assertEquals(List.of("a", "b", "Sink"), members(HybridResources.apply(env))
                .get("hybridscaler:a"));
        assertEquals(2, env.getStreamGraph().getJobGraph().getNumberOfVertices());
    }

    @Test
    void operatorAfterRebalanceStartsANewChainAndUnionJoinsNothing() {
        String value = json(entry("a", 1, 16, 0), entry("after-rebalance", 2, 16, 0),
                entry("union", 3, 16, 0));
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(config(value));
        DataStream<Long> a = env.fromSequence(0, 10).uid("a").name("a");
        DataStream<Long> b = env.fromSequence(0, 10).uid("b").name("b");
        a.rebalance().map(identity()).uid("after-rebalance").name("after-rebalance")
                .sinkTo(new DiscardingSink<>()).uid("sink-1");
        a.union(b).map(identity()).uid("union").name("union")
                .sinkTo(new DiscardingSink<>()).uid("sink-2");
        Map<String, List<String>> members = members(HybridResources.apply(env));
        assertEquals(List.of("a"), members.get("hybridscaler:a"));
        assertEquals("after-rebalance", members.get("hybridscaler:after-rebalance").get(0));
        assertEquals("union", members.get("hybridscaler:union").get(0));
        assertFalse(members.get("hybridscaler:union").contains("b"));
    }

    @Test
    void vertexIdIsMurmur3OfTheChainHeadsUid() {
        // docs/metrics.md: the controller may compute task_id from the head's uid; these are
        // test vectors for it (seen as task_id in a real scrape of this job).
        Map<String, String> expected = Map.of(
                "counter", CounterJob.COUNTER_VERTEX_ID,
                "gen", "6bf01baa9d2ca23a3ef7ce311722523d");
        Map<String, String> byHead = new HashMap<>();
        for (JobVertex v : plainGraph().getVertices()) {
            byHead.put(v.getName().startsWith("Source") ? "gen" : "counter", v.getID().toHexString());
        }
        // = Murmur3 x64 128, seed 0, of the uid's UTF-8 bytes: Python's
        // mmh3.hash_bytes(uid.encode(), 0).hex() gives the same strings.
        assertEquals(expected, byHead);
    }

    /** The counter job in the author's own group "mine", with or without the plugin. */
    private static StreamGraph authorGroupJob(Configuration conf, boolean applyPlugin) {
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        env.fromSequence(0, 10).uid("gen").name("gen").slotSharingGroup("mine")
                .map(identity()).uid("key-map").name("key-map")
                .keyBy(x -> x).reduce(Long::sum).uid("counter").name("counter")
                .sinkTo(new DiscardingSink<>()).uid("sink").name("sink");
        if (applyPlugin) {
            HybridResources.apply(env);
        }
        return env.getStreamGraph();
    }

    /** Operators with their groups, and vertices with theirs, members and resources. */
    private static String shape(StreamGraph streamGraph) {
        List<String> lines = new ArrayList<>();
        for (StreamNode n : streamGraph.getStreamNodes()) {
            lines.add(n.getOperatorName() + " p=" + n.getParallelism() + " in " + n.getSlotSharingGroup());
        }
        for (JobVertex v : streamGraph.getJobGraph().getVertices()) {
            var group = v.getSlotSharingGroup();
            lines.add(v.getID() + " " + v.getName() + " p=" + v.getParallelism() + " shares with "
                    + group.getJobVertexIds().stream().map(Object::toString).sorted().toList()
                    + " " + group.getResourceProfile());
        }
        lines.sort(null);
        return String.join("\n", lines);
    }

    /** Group name → names of the operators in it. */
    private static Map<String, List<String>> members(HybridResources.Applied applied) {
        return applied.groups().stream().collect(
                Collectors.toMap(HybridResources.Group::name, HybridResources.Group::operatorNames));
    }

    private static MapFunction<Long, Long> identity() {
        return x -> x;
    }

    private static JobGraph plainGraph() {
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(new Configuration());
        CounterJob.build(env);
        return env.getStreamGraph().getJobGraph();
    }

    private static Map<JobVertexID, String> vertexNames(JobGraph graph) {
        Map<JobVertexID, String> out = new HashMap<>();
        graph.getVertices().forEach(v -> out.put(v.getID(), v.getName()));
        return out;
    }

    private static StreamExecutionEnvironment counterJob(String value) {
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(config(value));
        CounterJob.build(env);
        return env;
    }

    static Configuration config(String value) {
        Configuration conf = new Configuration();
        conf.set(HybridResources.OPERATOR_RESOURCES, value);
        return conf;
    }
}
