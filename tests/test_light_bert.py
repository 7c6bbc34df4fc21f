"""The light BERT backbone (inference without transformers' model classes) against transformers' BertModel: same
vectors, same fingerprint, and transformers' loader for everything it does not cover."""
import json
import shutil
import subprocess
import sys

import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model import light_bert

TEXTS = ["who founded the Lanternwright guild?", "salt barges of Quellmoor", "a"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_bert_dir):
    out = tmp_path_factory.mktemp("light") / "ckpt"
    pfc.ColBERT.from_pretrained(tiny_bert_dir).save_pretrained(out)
    return out


def test_light_backbone_encodes_exactly_as_bertmodel(checkpoint):
    light = pfc.ColBERT.from_pretrained(checkpoint, inference_only=True)
    full = pfc.ColBERT.from_pretrained(checkpoint)
    assert type(light.model.backbone) is light_bert.LightBert and light.model.fast_inference
    assert type(full.model.backbone).__name__ == "BertModel"
    assert light.fingerprint() == full.fingerprint()  # same tensors under the same names
    for a, b in zip(light.encode_queries(TEXTS), full.encode_queries(TEXTS)):
        assert torch.equal(a, b)
    for a, b in zip(light.encode_docs(TEXTS), full.encode_docs(TEXTS)):
        assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    # and against transformers' own forward pass (not fast_bert): the arithmetic is BertModel's
    ids = torch.tensor([[101, 2040, 2179, 102, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    with torch.no_grad():
        reference = full.model.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        from pyterrier_fandom_colbert.model import fast_bert

        got = fast_bert.forward(light.model.backbone, ids, mask)
    assert torch.allclose(got[0, :4], reference[0, :4], atol=1e-5)
    with pytest.raises(TypeError, match=r"fast_bert\.forward only"):
        light.model.backbone(input_ids=ids)


@pytest.mark.parametrize("change", [{"position_embedding_type": "relative_key"}, {"hidden_act": "relu"},
                                    {"model_type": "roberta"}, {"is_decoder": True}, None])
def test_what_the_light_loader_does_not_cover_is_left_to_transformers(checkpoint, tmp_path, change):
    backbone = tmp_path / "backbone"
    shutil.copytree(checkpoint / "backbone", backbone)
    if change is None:  # weights stored under another layout (a task model's "bert." prefix)
        from safetensors.torch import load_file, save_file

        weights = load_file(str(backbone / "model.safetensors"))
        save_file({f"bert.{k}": v for k, v in weights.items()}, str(backbone / "model.safetensors"))
    else:
        config = json.loads((backbone / "config.json").read_text())
        (backbone / "config.json").write_text(json.dumps({**config, **change}))
    assert light_bert.load(backbone) is None
    assert light_bert.load(checkpoint / "backbone") is not None


def test_a_roberta_checkpoint_loads_through_transformers(tmp_path, tiny_roberta_dir):
    pfc.ColBERT.from_pretrained(tiny_roberta_dir).save_pretrained(tmp_path / "ckpt")
    colbert = pfc.ColBERT.from_pretrained(tmp_path / "ckpt", inference_only=True)
    assert type(colbert.model.backbone).__name__ == "RobertaModel"


def test_loading_for_search_never_imports_transformers_model_classes(checkpoint):
    code = ("import sys, pyterrier_fandom_colbert as pfc\n"
            f"c = pfc.ColBERT.from_pretrained({str(checkpoint)!r}, inference_only=True)\n"
            "c.encode_queries(['x'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('transformers.models.bert.modeling')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
