#!/usr/bin/env bash
# Run on a lent GPU machine, from the repository root, with .gpu/ carried (scripts/gpu/bundle.sh): ColBERT's
# recipe over the protocol's train part plus the full SQuAD training set (EPOCHS, default 2), chosen on the
# selection part; then whole-build figures on the GPU and on 16 and 8 host cores. Everything comes back under
# $OUT: the best checkpoint in fp16 as a tar in 15 MiB parts with its SHA-256 (join with `cat ckpt.tar.part*`),
# train.log and bench.log. The steps stop in time for a 570 s call.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
EPOCHS=${EPOCHS:-2}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
mkdir -p /tmp/data /tmp/export
xz -dc .gpu/squad/train-v1.1.json.xz > /tmp/data/train-v1.1.json
xz -dc .gpu/squad/dev-v1.1.json.xz > /tmp/data/dev-v1.1.json
bunzip2 -c .gpu/squad/train-v1.1-rebuilt.json.bz2 > /tmp/data/full.json
left() { echo $((570 - SECONDS)); }
timeout $(( $(left) - 120 )) python3 pipelines/train_default.py --data /tmp/data --init .gpu/minilm \
  --dataset /tmp/data/full.json --epochs "$EPOCHS" --eval-every 300 --out /tmp/runs/full -v > "$OUT/train.log" 2>&1
echo "training rc $? at ${SECONDS}s"; grep -a -E "reference|dev RR|trained|total wall|Error" "$OUT/train.log" | tail -6
python3 - <<'PY' || exit 1
import shutil
from pathlib import Path
from pyterrier_fandom_colbert import ColBERT
run, dst = Path("/tmp/runs/full"), Path("/tmp/export/full-squad")
ColBERT.from_pretrained(run / "best", device="cpu").save_pretrained(dst, dtype="float16")
for name in ("train_config.json", "history.json", "result.json"):
    shutil.copy(run / name, dst.parent / name)
PY
tar -C /tmp/export -cf /tmp/ckpt.tar . && (cd /tmp && sha256sum ckpt.tar > "$OUT/ckpt.tar.sha256")
split -b 15M -d /tmp/ckpt.tar "$OUT/ckpt.tar.part"
bench() {  # bench LIMIT_S ARGS...: one device_build.py run, skipped when too little time is left
  local t; t=$(( $(left) < $1 ? $(left) : $1 )); shift
  if [ "$t" -le 20 ]; then echo "skipped: $*"; return; fi
  timeout "$t" python3 benchmarks/device_build.py --squad /tmp/data/full.json --checkpoint /tmp/export/full-squad "$@" \
    2>&1 | tail -n 1 >> "$OUT/bench.log"
}
bench 100 --passages 18896 --device cuda --threads 16 --batch-size 256
bench 60 --passages 3000 --device cpu --threads 16
bench 70 --passages 3000 --device cpu --threads 8
cat "$OUT/bench.log"
