#!/usr/bin/env bash
# The checks a lent GPU machine is for, as one script under 10 minutes (issue 30 item 5):
#   1. benchmarks/gpu.py: the core on CUDA, N up to 10M in fp16/bf16, against the copy bandwidth
#      (exits at once, saying so, where torch sees no CUDA device);
#   2. benchmarks.service at 1 and 32 clients on the same index, the server on CUDA and on the
#      CPU in turn: the service's q/s on the GPU against the CPU's;
#   3. benchmarks.batch_floor on the same index and devices: a batch of B = 1, 32 and 256
#      searches in one process against its floor (the encoder and one attend per dense head);
#   4. benchmarks.key_dtype on the same index and devices: float16 and bfloat16 keys against
#      float32 (top 10s that differ, the largest weight error, q/s at B = 1 and 32, key bytes).
# Without a GPU step 1 says so and step 2 runs its CPU half. Results go to $OUT (default
# benchmarks/results/device): gpu.json, gpu.txt, service-<device>.json, batch-<device>-<B>.json,
# key-dtype-<device>.txt. (The core at N = 1M and 10M, B = 1, 16 and 256, in each dtype: step 1.)
#
#   bash benchmarks/device_check.sh                     # the shared catalog, else the demo one
#   CATALOG=indexer/data/demo_books.jsonl SECONDS_PER_CELL=3 bash benchmarks/device_check.sh
#   SKIP_GPU=1 bash benchmarks/device_check.sh          # step 2 only
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-benchmarks/results/device}"
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
SECONDS_PER_CELL="${SECONDS_PER_CELL:-5}"
CATALOG="${CATALOG:-../shared/data/books.jsonl}"
[ -f "$CATALOG" ] || CATALOG=indexer/data/demo_books.jsonl
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4

if [ -z "${SKIP_GPU:-}" ]; then
    echo "== 1. benchmarks/gpu.py (at most 5 min)"
    timeout 300 "$PY" benchmarks/gpu.py --json-file "$OUT/gpu.json" | tee "$OUT/gpu.txt"
fi

DEVICES=cpu
if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    DEVICES="cuda cpu"
fi
DB="$OUT/index.db"
echo "== 2. $CATALOG indexed into $DB, then benchmarks.service on: $DEVICES"
# indexed on the fastest device there is (a GPU embeds the shared catalog in seconds)
ATTEND_DEVICE="${DEVICES%% *}" timeout 240 "$PY" -c \
    "import sys; from service.launch import main; sys.argv[0] = 'attend'; sys.exit(main())" \
    index "$CATALOG" --database-url "sqlite:///$DB" || exit 1
for device in $DEVICES; do
    timeout 150 "$PY" -m benchmarks.service --database-url "sqlite:///$DB" --clients 1 32 \
        --seconds "$SECONDS_PER_CELL" --env "ATTEND_DEVICE=$device" --json \
        > "$OUT/service-$device.json" || echo "benchmarks.service on $device failed"
    "$PY" - "$OUT/service-$device.json" "$device" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in rows:
    print(f"{sys.argv[2]}: {r['mode']} {r['clients']} clients {r['qps']:.1f} q/s p50 {r['p50_ms']:.1f} ms")
EOF
done

echo "== 3. benchmarks.batch_floor on: $DEVICES"
for device in $DEVICES; do
    for B in 1 32 256; do
        ATTEND_DEVICE="$device" timeout 120 "$PY" -m benchmarks.batch_floor \
            --database-url "sqlite:///$DB" --batch "$B" --rounds 3 --json \
            > "$OUT/batch-$device-$B.json" || echo "benchmarks.batch_floor on $device, B = $B failed"
        "$PY" -c "import json, sys; r = json.load(open(sys.argv[1])); print(f\"{sys.argv[2]}: B = {r['B']} batch {r['batch_qps']:.1f} q/s, floor {r['floor_qps']:.1f}, batch/floor {r['batch_over_floor']:.2f}\")" \
            "$OUT/batch-$device-$B.json" "$device" || true
    done
done

echo "== 4. benchmarks.key_dtype on: $DEVICES"
for device in $DEVICES; do
    ATTEND_DEVICE="$device" timeout 150 "$PY" -m benchmarks.key_dtype \
        --database-url "sqlite:///$DB" --rounds 2 | tee "$OUT/key-dtype-$device.txt" \
        || echo "benchmarks.key_dtype on $device failed"
done
