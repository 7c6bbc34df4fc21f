"""A BERT backbone for inference read straight from its ``config.json`` and ``model.safetensors``, without
transformers' model classes.

Importing ``transformers.BertModel`` costs about 2 s of CPU (transformers' modelling machinery, its kernel hub
integration and torch's compiler stack), more than the rest of a cold ``pfc search``. For searching, the package
never runs transformers' forward pass on a BERT backbone: :mod:`.fast_bert` computes it from the weights. This
module builds just the modules that hold those weights, under the same names, so that :mod:`.fast_bert` runs on
it unchanged and the state dict (hence the encoder's fingerprint) is the one ``BertModel`` would have.

:func:`load` returns None for anything it does not cover exactly (another model type, relative position
embeddings, another activation, a decoder, weights not in one ``model.safetensors``, unexpected or missing
tensors); the caller then loads the backbone with transformers as before. The backbone is for evaluation only:
no dropout, no training, no saving (``ColBERT.from_pretrained(..., inference_only=True)``).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Union

import torch
from torch import nn

WEIGHTS = "model.safetensors"
#: tensors of a BertModel checkpoint that inference does not use
_UNUSED_PREFIXES = ("pooler.", "embeddings.position_ids", "embeddings.token_type_ids")


class _Module(nn.Module):
    """An attribute bag of submodules (so that the parameter names are BertModel's)."""

    def __init__(self, /, **children: nn.Module):
        super().__init__()
        for name, child in children.items():
            self.add_module(name, child)


def _layer(hidden: int, intermediate: int, eps: float) -> nn.Module:
    return _Module(
        attention=_Module(self=_Module(query=nn.Linear(hidden, hidden), key=nn.Linear(hidden, hidden),
                                       value=nn.Linear(hidden, hidden)),
                          output=_Module(dense=nn.Linear(hidden, hidden), LayerNorm=nn.LayerNorm(hidden, eps=eps))),
        intermediate=_Module(dense=nn.Linear(hidden, intermediate)),
        output=_Module(dense=nn.Linear(intermediate, hidden), LayerNorm=nn.LayerNorm(hidden, eps=eps)))


class LightBert(nn.Module):
    """BERT's embeddings and encoder layers as plain modules, with BertModel's parameter names; ``config`` holds
    the ``config.json`` values (attribute access, as a transformers config)."""

    def __init__(self, config: SimpleNamespace):
        super().__init__()
        self.config = config
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.embeddings = _Module(word_embeddings=nn.Embedding(config.vocab_size, hidden),
                                  position_embeddings=nn.Embedding(config.max_position_embeddings, hidden),
                                  token_type_embeddings=nn.Embedding(config.type_vocab_size, hidden),
                                  LayerNorm=nn.LayerNorm(hidden, eps=eps))
        self.encoder = _Module(layer=nn.ModuleList(_layer(hidden, config.intermediate_size, eps)
                                                   for _ in range(config.num_hidden_layers)))

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings  # type: ignore[return-value]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("LightBert holds weights for fast_bert.forward only; load the backbone with transformers "
                        "to train it or run transformers' forward pass")


def _covered(values: dict) -> bool:
    return (values.get("model_type") == "bert" and values.get("hidden_act") == "gelu"
            and values.get("position_embedding_type", "absolute") in (None, "absolute")
            and not values.get("is_decoder", False) and not values.get("add_cross_attention", False)
            and all(isinstance(values.get(k), int) for k in (
                "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                "max_position_embeddings", "type_vocab_size")))


def load(folder: Union[str, Path]) -> Optional[LightBert]:
    """The BERT backbone in ``folder`` as a :class:`LightBert` in fp32, or None when this module does not cover
    it exactly (module notes). Damaged weights raise as transformers' loader would (the caller names the file)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config_path, weights = folder / "config.json", folder / WEIGHTS
    if not config_path.is_file() or not weights.is_file():
        return None
    values = json.loads(config_path.read_text(encoding="utf-8"))
    if not isinstance(values, dict) or not _covered(values):
        return None
    values.setdefault("layer_norm_eps", 1e-12)
    model = LightBert(SimpleNamespace(**values))
    state = {name: tensor for name, tensor in load_file(str(weights)).items()
             if not name.startswith(_UNUSED_PREFIXES)}
    expected = model.state_dict()
    if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in expected):
        return None  # another layout (a prefixed or a task model): transformers knows how to read it
    with torch.no_grad():
        model.load_state_dict({name: tensor.float() for name, tensor in state.items()})
    return model.eval()
