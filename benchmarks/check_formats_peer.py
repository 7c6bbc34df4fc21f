"""The other library's side of check_formats.py: run inside the separate environment that script makes.

    python check_formats_peer.py {colbert-ai|pylate} MODEL_FOLDER TEXTS_JSON OUT_NPZ [SAVE_FOLDER]

Loads MODEL_FOLDER with colbert-ai's ``Checkpoint`` or PyLate's ``models.ColBERT``, encodes the queries and
documents of TEXTS_JSON (``{"queries": [...], "documents": [...]}``) with that library's own encoder, scores every
(query, document) pair with its own MaxSim function (on the padded batch, as the library scores a batch, and on
each document alone), and writes the vectors, the documents' kept token ids, the scores and what the library
read (its version, its skiplist's size, query expansion) to OUT_NPZ. With SAVE_FOLDER, the library also saves
the loaded model there with its own writer (colbert-ai's ``Checkpoint.save``, PyLate's ``ColBERT.save``), for
the other direction of the check. Uses only the libraries' public APIs; nothing of this package is imported
here. Works with PyLate 1.2 to 1.6, whose scoring functions differ in their signatures.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch


def _pad(vectors):
    """Zero-padded ``[n, L, d]`` and its ``[n, L]`` mask from a list of ``[L_i, d]`` tensors."""
    width = max(v.shape[0] for v in vectors)
    out = torch.zeros(len(vectors), width, vectors[0].shape[1])
    mask = torch.zeros(len(vectors), width, dtype=torch.bool)
    for i, v in enumerate(vectors):
        out[i, :v.shape[0]] = v
        mask[i, :v.shape[0]] = True
    return out, mask


def colbert_ai(folder, queries, documents):
    from colbert.infra import ColBERTConfig
    from colbert.modeling.checkpoint import Checkpoint
    from colbert.modeling.colbert import colbert_score

    ckpt = Checkpoint(folder, colbert_config=ColBERTConfig(), verbose=0)
    if not ckpt.colbert_config.mask_punctuation:
        ckpt.skiplist = {}  # colbert-ai 0.2.x defines its skiplist only when mask_punctuation is on
    q = ckpt.queryFromText(queries, bsize=32, to_cpu=True).float()            # [n_q, query_maxlen, dim]
    # keep_dims=False: the scored vectors per document (to_cpu=True fails on that list in colbert-ai 0.2.22)
    docs = ckpt.docFromText(documents, bsize=32, keep_dims=False)[0]
    docs = [d.float() for d in docs]
    ids, attention = ckpt.doc_tokenizer.tensorize(documents)
    keep = torch.tensor(ckpt.mask(ids, skiplist=ckpt.skiplist)) & attention.bool()
    doc_ids = [row[k].numpy() for row, k in zip(ids.cpu(), keep.cpu())]
    d_pad, d_mask = _pad(docs)
    scores = torch.stack([colbert_score(q[i:i + 1], d_pad, d_mask, config=ckpt.colbert_config)
                          for i in range(len(queries))])
    alone = torch.stack([colbert_score(q, d[None].expand(len(q), -1, -1).contiguous(),
                                       torch.ones(len(q), len(d), dtype=torch.bool), config=ckpt.colbert_config)
                         for d in docs], dim=1)
    return ckpt, list(q), docs, doc_ids, scores, alone


def _pylate_scores(colbert_scores, q_pad, q_mask, d_pad, d_mask):
    """PyLate's own batch MaxSim, through whichever signature the installed release has (1.2 masks documents
    only; 1.3 adds the query mask; 1.5 the backend)."""
    for kwargs in (dict(queries_mask=q_mask.float(), documents_mask=d_mask.float(), backend="torch"),
                   dict(queries_mask=q_mask.float(), documents_mask=d_mask.float()),
                   dict(mask=d_mask.float())):
        try:
            return colbert_scores(q_pad, d_pad, **kwargs)
        except TypeError:
            continue
    raise RuntimeError("no known pylate.scores.colbert_scores signature")


def pylate(folder, queries, documents):
    from pylate import models
    from pylate.scores import colbert_scores

    model = models.ColBERT(model_name_or_path=folder, device="cpu")
    q = [torch.as_tensor(v).float() for v in model.encode(queries, is_query=True, batch_size=32)]
    docs = [torch.as_tensor(v).float() for v in model.encode(documents, is_query=False, batch_size=32)]
    # the kept token ids, as every release's encoder keeps them: attended positions whose id is not skiplisted
    skip = {int(i) for i in model.skiplist}
    doc_ids = []
    for text in documents:
        features = model.tokenize([text], is_query=False)
        ids, attended = features["input_ids"][0], features["attention_mask"][0].bool()
        doc_ids.append(ids[attended & torch.tensor([int(i) not in skip for i in ids])].numpy())
    q_pad, q_mask = _pad(q)
    d_pad, d_mask = _pad(docs)
    scores = _pylate_scores(colbert_scores, q_pad, q_mask, d_pad, d_mask)
    alone = torch.cat([_pylate_scores(colbert_scores, q_pad, q_mask, d[None], torch.ones(1, len(d), dtype=torch.bool))
                       for d in docs], dim=1)
    return model, q, docs, doc_ids, scores, alone


def read_settings(library, model) -> dict:
    """What the library read from the folder, in its own terms."""
    from importlib.metadata import version

    if library == "colbert-ai":
        c = model.colbert_config
        return {"library": f"colbert-ai {version('colbert-ai')}", "transformers": version("transformers"),
                "mask_punctuation": c.mask_punctuation, "skipped_ids": len(model.skiplist),
                "attend_to_mask_tokens": c.attend_to_mask_tokens, "similarity": c.similarity,
                "pad_token": model.raw_tokenizer.pad_token if hasattr(model, "raw_tokenizer") else None}
    return {"library": f"pylate {version('pylate')}", "sentence_transformers": version("sentence-transformers"),
            "transformers": version("transformers"), "skipped_ids": len(set(model.skiplist)),
            "do_query_expansion": getattr(model, "do_query_expansion", "absent (always expands)"),
            "attend_to_expansion_tokens": model.attend_to_expansion_tokens}


def main() -> int:
    library, folder, texts_path, out = sys.argv[1:5]
    torch.set_num_threads(int(os.environ.get("CHECK_THREADS", "2")))
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    run = {"colbert-ai": colbert_ai, "pylate": pylate}[library]
    with torch.inference_mode():
        model, q, docs, doc_ids, scores, alone = run(folder, texts["queries"], texts["documents"])
    if len(sys.argv) > 5:
        model.save(sys.argv[5])
    np.savez(out, info=np.array(json.dumps(read_settings(library, model))),
             q=torch.cat(q).numpy(), q_len=np.array([len(v) for v in q]),
             d=torch.cat(docs).numpy(), d_len=np.array([len(v) for v in docs]),
             d_ids=np.concatenate(doc_ids).astype(np.int64), d_ids_len=np.array([len(i) for i in doc_ids]),
             scores=scores.float().numpy(), scores_unpadded=alone.float().numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main())
