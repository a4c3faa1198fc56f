#!/usr/bin/env bash
# README's test command (`make test`), and what .ci/run calls: installs what is
# missing, then lints, type-checks and runs every test, unit and end-to-end,
# Python and Java. Any failure, or a pytest run that collected no test, fails.
#   test.sh        everything
#   test.sh lint   ruff and mypy only
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"

section() { printf "\n==> %s (at %dm%02ds)\n" "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

section "bootstrap"
if [ "$what" = lint ]; then bash scripts/bootstrap.sh python; else bash scripts/bootstrap.sh all; fi
PY=.venv/bin

if [ "$what" != lint ]; then
  # The kind tier's node image (Go builds of the kubelet and friends, a debootstrap):
  # minutes on a fresh machine, seconds once cached. Built niced in the background
  # while Maven and the first tests run; the tier's own `kind.sh up` waits for it
  # (a lock) and, if it failed, builds again and reports why.
  mkdir -p out
  setsid nice -n 19 bash e2e/scripts/kind.sh node-image > out/node-image.log 2>&1 &
  node_image_pid=$!
  # An early failure must not leave the build running (its own process group); only
  # while it is still our running job, so a recycled PID is never signalled.
  trap 'jobs -rp | grep -qx "$node_image_pid" && kill -- "-$node_image_pid" 2>/dev/null; true' EXIT
fi

section "ruff"
$PY/ruff check .
section "mypy (strict on policies/ and packer/)"
$PY/mypy policies packer controller simulator e2e bench
[ "$what" = lint ] && exit 0

if [ -f flink-plugin/pom.xml ]; then
  section "flink-plugin (Maven, real Flink MiniCluster)"
  # install: the real-Flink e2e job (flink-job/) depends on the plugin's jar.
  mvn -B -q -f flink-plugin/pom.xml install
  section "flink-plugin on Flink 2.2 with ForSt (MiniCluster)"
  # Only the ForSt tests, and `package`, not `install`: ~/.m2 keeps the 1.20 build; the
  # 2.x jar in target-flink2/ is what a 2.2 cluster of the e2e runs.
  mvn -B -q -f flink-plugin/pom.xml -P flink-2 package -Dtest='ForSt*Test' \
    -Dsurefire.failIfNoSpecifiedTests=false
fi
if [ -f flink-job/pom.xml ]; then
  section "flink-job on Flink 2.2 (AsyncStateJob on ForSt: state survives a restore)"
  # Its 2.x build (target-flink2/): the e2e's ForSt clusters run it.
  mvn -B -q -f flink-job/pom.xml -P flink-2 package -Dtest='AsyncStateJobTest' \
    -Dsurefire.failIfNoSpecifiedTests=false
  section "flink-job (Maven: the real-Flink e2e job and its cluster classpath)"
  mvn -B -q -f flink-job/pom.xml package
fi

if [ -f bench/peer/pom.xml ]; then
  # Upstream's flink-autoscaler, wired for the peer bench and the DS2 conformance test
  # (tests/policies use bench/peer/target/classpath.txt, written by `package`).
  section "bench/peer (Maven, upstream flink-autoscaler)"
  mvn -B -q -f bench/peer/pom.xml verify
fi

section "pytest (unit, integration and e2e)"
set +e
$PY/pytest --durations=15
rc=$?
wait "$node_image_pid" 2>/dev/null
trap - EXIT
set -e
# (no line after pytest's: its closing line is the run's verdict; pytest prints its own time)
if [ $rc -eq 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
exit $rc
