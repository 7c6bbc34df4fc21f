"""Make a reader folder from what scripts/gpu/train_reader.sh sends back: a folder with ``reader_config.json``,
``training.json`` and ``reader16.safetensors`` (the reader's own weights in fp16, for the trip).

    python scripts/gpu/unpack_reader.py PACKED_FOLDER OUT_FOLDER

The weights are widened to float32 and the folder is written with ``save_reader`` (manifest and checksums), so it
loads like any trained reader; its base must be the one its config records (checked by digest).
"""
import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from pyterrier_fandom_colbert.reader.config import ReaderConfig
from pyterrier_fandom_colbert.reader.network import ReaderModel, base_digest, load_base, save_reader


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("packed", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args()
    config = ReaderConfig.from_dict(json.loads((args.packed / "reader_config.json").read_text()))
    if base_digest(config.base) != config.base_digest:
        raise SystemExit(f"{args.packed}: trained over another base than {config.base} (digest differs)")
    base, _ = load_base(config.base)
    model = ReaderModel(base, config)
    state = {k: v.float() for k, v in load_file(str(args.packed / "reader16.safetensors")).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    own_missing = [k for k in missing if not k.startswith("base.")]
    if own_missing or unexpected:
        raise SystemExit(f"{args.packed}: weights do not fit the config (missing {own_missing[:3]}, "
                         f"unexpected {unexpected[:3]})")
    training = json.loads((args.packed / "training.json").read_text())
    training["weights_widened_from"] = "float16"
    print(save_reader(model.eval(), args.out, extra={"training.json": training}))


if __name__ == "__main__":
    with torch.no_grad():
        main()
