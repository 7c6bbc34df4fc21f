#!/usr/bin/env bash
# Prepare .gpu/ (git-ignored through .git/info/exclude) for a lent GPU machine whose image has torch and
# transformers but not this package's other dependencies, and which reaches no network:
#   .gpu/whl/     wheels (CPython 3.12, manylinux) of the packages that image lacks
#   .gpu/minilm/  all-MiniLM-L6-v2 in fp16 (45 MB; loaded in fp32)
#   .gpu/squad/   the SQuAD split (xz) and the full training set (bz2), from ../shared/data
# Then send it with the device tool: carry [".gpu"], command `bash scripts/gpu/train_full_squad.sh`.
# The tree that travels is limited to 64 MiB: move the two large tracked weight files aside for that call
# (the default checkpoint's backbone/model.safetensors, reader/default/reader.safetensors) and put them back.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=../shared/data
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo "/.gpu/" >> .git/info/exclude; }
mkdir -p .gpu/whl .gpu/minilm .gpu/squad
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu/whl \
  beautifulsoup4 soupsieve deprecated dill lz4 more-itertools pytrec_eval-terrier ir_datasets ir_measures \
  pyterrier python-terrier PyStemmer "npids>=0.1.3,<0.2"
.venv/bin/python - <<'PY'
import shutil
from pathlib import Path
from safetensors.torch import load_file, save_file
from pyterrier_fandom_colbert.model.config import default_backbone
src, dst = Path(default_backbone()), Path(".gpu/minilm")
for f in src.iterdir():
    if f.suffix in (".json", ".txt"):
        shutil.copy(f, dst / f.name)
weights = load_file(src / "model.safetensors")
save_file({k: v.half().contiguous() for k, v in weights.items()}, dst / "model.safetensors", metadata={"format": "pt"})
PY
xz -9 -c "$DATA/squad-v1.1-split/train-v1.1.json" > .gpu/squad/train-v1.1.json.xz
xz -9 -c "$DATA/squad-v1.1-split/dev-v1.1.json" > .gpu/squad/dev-v1.1.json.xz
cp "$DATA/squad-v1.1-train/train-v1.1-rebuilt.json.bz2" .gpu/squad/
du -sh .gpu
