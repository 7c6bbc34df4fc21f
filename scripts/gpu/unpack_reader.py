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

from pyterrier_fandom_colbert.reader.config import CONFIG_FILE, ReaderConfig
from pyterrier_fandom_colbert.reader.network import reader_from_state, save_reader

PACKED_WEIGHTS = "reader16.safetensors"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("packed", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args()
    config_file, weights_file = args.packed / CONFIG_FILE, args.packed / PACKED_WEIGHTS
    model = reader_from_state(ReaderConfig.load_json(config_file),
                              lambda: {k: v.float() for k, v in load_file(str(weights_file)).items()},
                              config_file, weights_file)
    training = json.loads((args.packed / "training.json").read_text())
    training["weights_widened_from"] = "float16"
    print(save_reader(model, args.out, extra={"training.json": training}))


if __name__ == "__main__":
    with torch.no_grad():
        main()
