#!/usr/bin/env bash
# Run on a lent GPU machine, from the repository root, with .gpu/ carried (scripts/gpu/bundle.sh; .gpu/minilm is
# not needed and may stay behind): the extractive reader trained from its base (the default checkpoint's
# backbone, frozen lower 2 layers) on the full SQuAD training set plus 30,000 made-up "key: value" questions,
# three settings side by side on the one GPU (RUNS below). Move reader/default/reader.safetensors aside for the
# call (the tree that travels is limited to 64 MiB); the base backbone must travel (the reader records its
# digest). Everything comes back under $OUT: per run its log.jsonl and a tar of its config, training record and
# fp16 weights in 15 MiB parts with its SHA-256 (`cat reader-R.tar.part* > reader-R.tar`; scripts/gpu/unpack_reader.py
# makes a reader folder of it). Stops in time for a 560 s call.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
mkdir -p /tmp/data /tmp/runs
bunzip2 -c .gpu/squad/train-v1.1-rebuilt.json.bz2 > /tmp/data/full.json
BUDGET=${BUDGET:-560}
left() { echo $((BUDGET - SECONDS)); }
RUNS=${RUNS:-"e2:2:1e-4:32 e2hi:2:2e-4:32 e3b64:3:1.5e-4:64"}   # name:epochs:learning rate:batch size
for r in $RUNS; do
  IFS=: read -r name epochs lr batch <<< "$r"
  timeout $(( $(left) - 110 )) python3 -m pyterrier_fandom_colbert.training.cli reader --train /tmp/data/full.json \
    --out "/tmp/runs/$name" --frozen-layers 2 --epochs "$epochs" --lr "$lr" --batch-size "$batch" --fact-lines 30000 --threads 4 \
    --device cuda > "/tmp/runs/$name.out" 2>&1 &
done
wait
echo "training done at ${SECONDS}s"
for r in $RUNS; do
  name=${r%%:*}
  cp "/tmp/runs/$name/log.jsonl" "$OUT/$name.log.jsonl" 2>/dev/null; tail -n 2 "/tmp/runs/$name.out"
  [ -d "/tmp/runs/$name/reader" ] || python3 -m pyterrier_fandom_colbert.training.cli reader --out "/tmp/runs/$name" --export
  python3 - "$name" <<'PY' || continue
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst = Path("/tmp/runs") / sys.argv[1] / "reader", Path("/tmp/pack") / sys.argv[1]
dst.mkdir(parents=True, exist_ok=True)
save_file({k: v.half().contiguous() for k, v in load_file(str(src / "reader.safetensors")).items()},
          str(dst / "reader16.safetensors"))
for name in ("reader_config.json", "training.json"):
    shutil.copy(src / name, dst / name)
PY
  tar -C /tmp/pack -cf "/tmp/reader-$name.tar" "$name" && (cd /tmp && sha256sum "reader-$name.tar" > "$OUT/reader-$name.tar.sha256")
  split -b 15M -d "/tmp/reader-$name.tar" "$OUT/reader-$name.tar.part"
done
tail -n 1 "$OUT"/*.log.jsonl
