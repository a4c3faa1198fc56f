"""One URL parser and one deadline per call (controller.adapters.dial), against real
loopback servers that trickle, answer 200 MB, or sit beside the allowed one waiting
to be reached by a URL trick. Counts, not timings: how many requests reached a server,
how many bytes it got to write."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.adapters import dial
from controller.adapters.flink_rest import FlinkRest
from controller.adapters.outbound import Breakers, deadline
from controller.adapters.prometheus import Prometheus
from controller.operator import handlers
from controller.operator.settings import RUNTIME
from controller.ports import FlinkRestError, MetricsError
from e2e.pki import make_pki

from .netfaults import Answering, Streaming

EMPTY = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
MIB = 2**20


@pytest.fixture
def allowed_and_victim(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Answering, Answering]]:
    """The one allowed Prometheus (127.0.0.1) and a victim on 127.0.0.2 nothing may reach."""
    allowed, victim = Answering(200, EMPTY), Answering(200, EMPTY, host="127.0.0.2")
    monkeypatch.setattr(RUNTIME, "allowed_prometheus",
                        [allowed.url.removeprefix("http://")])
    monkeypatch.setattr(RUNTIME, "prometheus_url", "http://prometheus.monitoring.svc:9090")
    handlers._allowed.cache_clear()
    handlers._prometheus.cache_clear()
    yield allowed, victim
    handlers._allowed.cache_clear()
    handlers._prometheus.cache_clear()
    allowed.close()
    victim.close()


def tricks(allowed: str, victim: str) -> list[str]:
    """URLs that name the allowed host:port to one parser and the victim to another,
    or the victim in a form a naive check does not recognise (20 of them)."""
    a = allowed.removeprefix("http://")
    v = victim.removeprefix("http://")
    port = v.rsplit(":", 1)[1]
    return [
        f"http://{v}\\@{a}",  # urllib3 reads the host before the backslash
        f"http://{v}@{a}",
        f"http://{a}@{v}",
        f"http://user:password@{a}",  # credentials in the URL
        f"http://{v}#@{a}",
        f"http://{v}?@{a}",
        f"http://{a}%40{v}",
        f"http://%31%32%37.0.0.2:{port}",
        f"http://2130706434:{port}",  # 127.0.0.2 as one number
        f"http://0x7f.0.0.2:{port}",
        f"http://0177.0.0.2:{port}",
        f"http://127.2:{port}",
        f"http://[::ffff:127.0.0.2]:{port}",
        f"http://{a}\\\\@{v}",
        f"HTTP://{v}",
        f"http://{v}\t@{a}",
        f"http://{v}/..;@{a}",
        f"http://127.0.0.2.:{port}",
        f"http://127.000.000.002:{port}",
        f"http:\\\\{v}",
    ]


def test_no_url_trick_reaches_a_host_outside_the_allow_list(
        allowed_and_victim: tuple[Answering, Answering]) -> None:
    allowed, victim = allowed_and_victim
    forms = tricks(allowed.url, victim.url)
    assert len(forms) == 20
    for url in forms:
        metrics = handlers._metrics(url)
        try:
            metrics.operator_ids("0" * 32, 0.0)
        except MetricsError as e:
            assert "spec.metrics.prometheusUrl" in str(e), url
    assert victim.requests == 0
    # The allowed URL itself works, built from the same parse.
    handlers._metrics(allowed.url).operator_ids("0" * 32, 0.0)
    assert allowed.requests >= 1


@pytest.mark.parametrize("url", [
    "http://u:p@prom:9090", "http://prom:9090\\x", "http://%70rom:9090", "http://127.1:9090",
    "http://0x7f000001:9090", "http://2130706433", "http://0177.0.0.1", "http://[0:0::1]",
    "http://[::ffff:7f00:1]", "http://Prom:9090", "http://prom:99999", "http://prom/../x",
    "http://prom?x=1", "ftp://prom", "http://prom:0",
])
def test_ambiguous_urls_are_refused_naming_the_field(url: str) -> None:
    with pytest.raises(dial.UrlRefused, match=r"^spec\.metrics\.prometheusUrl"):
        dial.parse_url(url, "spec.metrics.prometheusUrl")


def test_canonical_urls_parse_into_the_parts_the_request_uses() -> None:
    assert dial.parse_url("https://prom.monitoring.svc:9443/thanos/", "f") == dial.Url(
        "https", "prom.monitoring.svc", 9443, "/thanos")
    assert dial.parse_url("http://[::1]", "f") == dial.Url("http", "::1", 80, "")
    assert dial.parse_url("http://10.0.0.1:9090", "f").endpoint == "http://10.0.0.1:9090"


def test_a_trickling_prometheus_is_cut_off_at_the_deadline() -> None:
    # One byte every 50 ms forever: each read is quick, the whole answer never comes.
    server = Streaming(b" ", total=10**9, every_s=0.05)
    try:
        with deadline(2.0), pytest.raises(MetricsError, match="did not answer within") as e:
            Prometheus(server.url, breakers=Breakers()).query("up", 0)
        assert e.value.kind == "timeout"
        assert server.requests == 1 and server.finished == 0
        # At most ~1 s of trickle was read: the call ended at its deadline, not per read.
        assert server.sent < 100
    finally:
        server.close()


def test_a_trickling_prometheus_over_tls_is_cut_off_at_the_deadline(tmp_path: Path) -> None:
    # The TLS socket keeps the call's deadline too (it wraps the deadline-kept one).
    make_pki(tmp_path)
    server = Streaming(b" ", total=10**9, every_s=0.05,
                       tls=(tmp_path / "apiserver.crt", tmp_path / "apiserver.key"))
    try:
        with deadline(2.0), pytest.raises(MetricsError, match="did not answer within") as e:
            Prometheus(server.url, ca_file=str(tmp_path / "ca.crt"),
                       breakers=Breakers()).query("up", 0)
        assert e.value.kind == "timeout"
        assert server.requests == 1 and server.finished == 0 and server.sent < 100
    finally:
        server.close()


@pytest.mark.parametrize("length", [True, False])
def test_a_200_mb_answer_is_dropped_while_streaming(length: bool) -> None:
    server = Streaming(b"x" * MIB, total=200 * MIB, length=length)
    try:
        with deadline(30.0), pytest.raises(MetricsError, match="more than 8 MiB") as e:
            Prometheus(server.url, breakers=Breakers()).query("up", 0)
        assert e.value.kind == "too-large"
        assert server.finished == 0
        # With a Content-Length nothing is read; without, reading stops past the limit
        # (the server got a few socket buffers further).
        assert server.sent < 40 * MIB
    finally:
        server.close()


def test_an_answer_cut_short_of_its_length_is_not_an_answer() -> None:
    # A whole, valid body, but the peer announced more and closed: read() ends on b"".
    server = Streaming(EMPTY, total=len(EMPTY), announced=len(EMPTY) + 100)
    try:
        with deadline(10.0), pytest.raises(MetricsError, match="unreachable") as e:
            Prometheus(server.url, breakers=Breakers()).query("up", 0)
        assert e.value.kind == "unreachable"
        assert server.requests == 1
    finally:
        server.close()


def test_a_large_job_graph_is_the_jobmanagers_fault() -> None:
    server = Streaming(b"x" * MIB, total=200 * MIB)
    try:
        with deadline(30.0), pytest.raises(FlinkRestError, match="more than 4 MiB") as e:
            FlinkRest(server.url, breakers=Breakers(), proxy=None).job()
        assert e.value.kind == "too-large"
    finally:
        server.close()


def test_stop_all_ends_calls_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dial, "_STOPPED", threading.Event())
    server = Streaming(b" ", total=10**9, every_s=0.05)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            with deadline(600.0):
                Prometheus(server.url, timeout_s=600, breakers=Breakers()).query("up", 0)
        except BaseException as e:
            errors.append(e)

    caller = threading.Thread(target=call)
    try:
        caller.start()
        while server.sent < 3:  # the call is reading
            threading.Event().wait(0.01)
        dial.stop_all()
        caller.join(timeout=60)
        assert not caller.is_alive()
        assert [type(e) for e in errors] == [dial.Stopping]
        with pytest.raises(dial.Stopping, match="stopping"):
            Prometheus(server.url, breakers=Breakers()).query("up", 0)
        assert server.requests == 1
    finally:
        server.close()


# Answers of one kind of value each, the shapes a parse's memory depends on (the
# constants of dial.parsed_bytes were measured on these).
def _answers(size: int) -> dict[str, bytes]:
    def array(items: list[str]) -> bytes:
        return ("[" + ",".join(items) + "]").encode()

    series = ('{"metric":{"task_id":"%032x","subtask_index":"%d"},'
              '"value":[1764480000.123,"0.%d"]}')
    return {
        "empty lists": array(["[]"] * (size // 3)),
        "empty objects": array(["{}"] * (size // 3)),
        "nested lists": array(["[[1]]"] * (size // 6)),
        "one-letter strings": array(['"a"'] * (size // 4)),
        "distinct strings": array([f'"{i}"' for i in range(size // 9)]),
        "escaped strings": array([f'"\\u{i % 5000 + 256:04x}{i}"' for i in range(size // 14)]),
        "floats": array([f"{i}.5" for i in range(size // 9)]),
        "small ints": array(["1"] * (size // 2)),
        "big ints": array([str(10**30 + i) for i in range(size // 32)]),
        "one large object": ("{" + ",".join(f'"{i}":1' for i in range(size // 10))
                             + "}").encode(),
        "small objects": array([f'{{"a":{i}}}' for i in range(size // 12)]),
        "literals": array(["null", "true"] * (size // 10)),
        # Distinct short keys: the parser's key memo and each object's table grow too.
        "one-key objects, distinct keys": array([f'{{"{i:x}":0}}' for i in range(size // 11)]),
        "one long string": ('["' + "x" * size + '"]').encode(),
        # One character past the BMP widens the decoded text and the string to 4 bytes
        # a character; one past Latin-1 to 2; an escaped one widens the string only.
        "one long string, one emoji": ('["' + "x" * size + '\U0001F600"]').encode(),
        "one long string, one Greek letter": ('["' + "x" * size + '\u03bb"]').encode(),
        "one long string, one escape": ('["' + "x" * size + '\\ud83d\\ude00"]').encode(),
        "a Prometheus vector": (
            '{"status":"success","data":{"resultType":"vector","result":['
            + ",".join(series % (i, i, i) for i in range(size // 100)) + "]}}").encode(),
    }


@pytest.mark.parametrize("size", [256 * 1024, 900_005])  # the second past a table's doubling
@pytest.mark.parametrize("kind", list(_answers(64)))
def test_the_memory_a_json_answer_takes_is_bounded_before_it_is_parsed(
        kind: str, size: int) -> None:
    import subprocess
    import sys

    # Measured in a process of its own: tracemalloc counts every thread's allocations,
    # and in the full run other tests' server threads added ~0.45 MB to a 1 MB peak.
    raw = _answers(size)[kind]
    measure = ("import json, sys, tracemalloc; raw = sys.stdin.buffer.read(); "
               "tracemalloc.start(); parsed = json.loads(raw); "
               "print(tracemalloc.get_traced_memory()[1] if parsed is not None else -1)")
    done = subprocess.run([sys.executable, "-c", measure], input=raw, capture_output=True,
                          check=True, timeout=60)
    peak = int(done.stdout)
    assert peak > 0
    assert peak <= dial.parsed_bytes(raw), (kind, peak, dial.parsed_bytes(raw))


def test_an_answer_too_costly_to_parse_is_dropped_unparsed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 8 MiB of `[[1]],…` (within Prometheus's byte limit) would take about 250 MiB parsed.
    raw = _answers(8 * MIB)["nested lists"]

    def never(*_: object, **__: object) -> None:
        raise AssertionError("parsed")

    monkeypatch.setattr("controller.adapters.dial.json.loads", never)
    with pytest.raises(dial.CallFailed, match="more than 160 MiB to read") as e:
        dial.decode_json(raw, "Prometheus (spec.metrics.prometheusUrl)",
                         dial.PARSED_PER_BYTE * 8 * MIB)
    assert e.value.kind == "too-large"
    assert "[[1]]" not in str(e.value)


def _range_answer(vertices: int, parallelism: int, points: int = 25) -> bytes:
    """The controller's own combined range query answered (controller.adapters.promql),
    whole-second timestamps and "0" values: the densest answer it reads."""
    from controller.adapters.prometheus import SUBTASK_SIGNALS, TASK_SIGNALS

    values = ",".join(f'[{1764480000 + 5 * t},"0"]' for t in range(points))
    series = []
    for v in range(vertices):
        task = f"{v * 7919:032x}"
        labels = [{"hybridscaler_part": name, "task_id": task} for name in TASK_SIGNALS]
        labels += [{"hybridscaler_part": name, "subtask_index": str(i), "task_id": task}
                   for name in SUBTASK_SIGNALS for i in range(parallelism)]
        series += [f'{{"metric":{json.dumps(m, separators=(",", ":"))},"values":[{values}]}}'
                   for m in labels]
    return ('{"status":"success","data":{"resultType":"matrix","result":['
            + ",".join(series) + "]}}").encode()


def test_the_controllers_own_answers_up_to_the_byte_limit_are_read() -> None:
    # The controller's largest job (200 vertices) at 30 tasks each, near Prometheus's
    # 8 MiB; an instant vector of 20,000 series.
    raw = _range_answer(200, 30)
    assert 7 * MIB < len(raw) <= 8 * MIB
    assert dial.parsed_bytes(raw) <= dial.PARSED_PER_BYTE * 8 * MIB
    answer = dial.decode_json(raw, "Prometheus", dial.PARSED_PER_BYTE * 8 * MIB)
    assert len(answer["data"]["result"]) > 5_000
    vector = _answers(2_000_000)["a Prometheus vector"]
    assert dial.parsed_bytes(vector) <= dial.PARSED_PER_BYTE * len(vector)


def test_an_answer_nested_too_deep_is_malformed_not_an_internal_error() -> None:
    server = Answering(200, b"[" * 100_000 + b"]" * 100_000)
    try:
        with deadline(10.0), pytest.raises(MetricsError, match="did not answer JSON") as e:
            Prometheus(server.url, breakers=Breakers()).query("up", 0)
        assert e.value.kind == "malformed"
    finally:
        server.close()


@pytest.mark.parametrize("reader", ["prometheus", "flink"])
def test_a_hostile_json_answer_is_refused_by_every_reader(reader: str) -> None:
    server = Answering(200, _answers(int(3.9 * MIB))["empty objects"])  # both byte limits
    try:
        with deadline(10.0), pytest.raises((MetricsError, FlinkRestError),
                                           match="to read; the answer was dropped") as e:
            if reader == "prometheus":
                Prometheus(server.url, breakers=Breakers()).query("up", 0)
            else:
                FlinkRest(server.url, breakers=Breakers(), proxy=None).job()
        assert getattr(e.value, "kind", None) == "too-large" and "{}" not in str(e.value)
        assert str(e.value).startswith("Prometheus (" if reader == "prometheus"
                                       else "Flink REST (")
    finally:
        server.close()
