#!/usr/bin/env bash
# RocksDbFig4 on Flink 2.2 with ForSt (flink-plugin/src/test-flink2/java/dev/hybridscaler/flink/ForStFig4.java):
# one keyed operator, read/write/update, several managed-memory sizes, a local directory as the
# "remote" primary store behind a fixed local file cache. Not part of CI. Writes
# bench/results/forst-fig4.json, which bench/calibrate_forst.py fits the twin's ForSt engine to.
# Options pass through, defaults in brackets:
#   --keys [100000] --value-bytes [1000] --memory-mb [16,64,256] --file-cache [32mb]
#   --runs [async:read,async:update,async:write,sync:read]  (mode:workload[:16|64])
#   --warmup-s [5] --measure-s [10] --out [bench/results/forst-fig4.json]
set -euo pipefail
cd "$(dirname "$0")/.."
pom=flink-plugin/pom.xml
cp=flink-plugin/target-flink2/test-classpath.txt
nice mvn -B -q -f "$pom" -P flink-2 test-compile
nice mvn -B -q -f "$pom" -P flink-2 dependency:build-classpath -Dmdep.includeScope=test \
  -Dmdep.outputFile=target-flink2/test-classpath.txt
opens=()
for p in java.util java.lang java.net java.io java.nio sun.nio.ch java.lang.reflect java.text java.time \
         java.util.concurrent java.util.concurrent.atomic java.util.concurrent.locks; do
  opens+=("--add-opens=java.base/$p=ALL-UNNAMED")
done
exec java -Xmx2g "${opens[@]}" \
  -cp "flink-plugin/target-flink2/classes:flink-plugin/target-flink2/test-classes:$(cat "$cp")" \
  dev.hybridscaler.flink.ForStFig4 "$@"
