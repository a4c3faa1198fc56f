#!/usr/bin/env bash
# The Justin paper's Figure 4 at this machine's scale, on real RocksDB through Flink
# (flink-plugin/src/test/java/dev/hybridscaler/flink/RocksDbFig4.java). Not part of CI.
# Prints a table and writes bench/results/rocksdb-fig4.json. The twin's fit
# (bench/calibrate_fig4.py) is tested against that file: use --out for experiments,
# and refit after replacing it.
# Options pass through, defaults in brackets:
#   --keys [150000] --value-bytes [1000] --memory-mb [32,64,128,256] --parallelism [1,2]
#   --workloads [read,write,update] --warmup-s [5] --measure-s [10] --out [bench/results/rocksdb-fig4.json]
#   --conf key=value,...   extra Flink settings, e.g. state.backend.rocksdb.memory.partitioned-index-filters=true
# The default run takes about 8 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
pom=flink-plugin/pom.xml
cp=flink-plugin/target/test-classpath.txt
nice mvn -B -q -f "$pom" test-compile
nice mvn -B -q -f "$pom" dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile=target/test-classpath.txt
opens=()
for p in java.util java.lang java.net java.io java.nio sun.nio.ch java.lang.reflect java.text java.time \
         java.util.concurrent java.util.concurrent.atomic java.util.concurrent.locks; do
  opens+=("--add-opens=java.base/$p=ALL-UNNAMED")
done
exec java -Xmx2g "${opens[@]}" \
  -cp "flink-plugin/target/classes:flink-plugin/target/test-classes:$(cat "$cp")" \
  dev.hybridscaler.flink.RocksDbFig4 "$@"
