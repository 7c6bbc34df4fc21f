"""The other library's side of check_formats.py: run inside the separate environment that script makes.

    python check_formats_peer.py {colbert-ai|pylate} MODEL_FOLDER TEXTS_JSON OUT_NPZ [SAVE_FOLDER]

Loads MODEL_FOLDER with colbert-ai's ``Checkpoint`` or PyLate's ``models.ColBERT``, encodes the queries and
documents of TEXTS_JSON (``{"queries": [...], "documents": [...]}``) with that library's own encoder, scores every
(query, document) pair with its own MaxSim function (on the padded batch, as the library scores a batch, and on
each document alone), and writes the vectors, the documents' kept token ids and the
scores to OUT_NPZ. With SAVE_FOLDER, the library also saves the loaded model there with its own writer
(colbert-ai's ``Checkpoint.save``, PyLate's ``ColBERT.save``), for the other direction of the check. Uses only
the libraries' public APIs; nothing of this package is imported here.
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


def pylate(folder, queries, documents):
    from pylate import models
    from pylate.scores import colbert_scores

    model = models.ColBERT(model_name_or_path=folder, device="cpu")
    q = [torch.as_tensor(v).float() for v in model.encode(queries, is_query=True, batch_size=32)]
    # output_value=None: every position with PyLate's own mask (skiplist and padding), so the kept token ids
    # come with the vectors; the vectors are those of the default output, which is the same rows
    raw = model.encode(documents, is_query=False, batch_size=32, output_value=None)
    masks = [torch.as_tensor(m).bool() for m in raw["masks"]]
    docs = [torch.as_tensor(v).float()[m] for v, m in zip(raw["token_embeddings"], masks)]
    doc_ids = [torch.as_tensor(i)[m].numpy() for i, m in zip(raw["input_ids"], masks)]
    q_pad, q_mask = _pad(q)
    d_pad, d_mask = _pad(docs)
    scores = colbert_scores(q_pad, d_pad, queries_mask=q_mask.float(), documents_mask=d_mask.float(),
                            backend="torch")
    alone = torch.cat([colbert_scores(q_pad, d[None], queries_mask=q_mask.float(), backend="torch") for d in docs],
                      dim=1)
    return model, q, docs, doc_ids, scores, alone


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
    np.savez(out, q=torch.cat(q).numpy(), q_len=np.array([len(v) for v in q]),
             d=torch.cat(docs).numpy(), d_len=np.array([len(v) for v in docs]),
             d_ids=np.concatenate(doc_ids).astype(np.int64), d_ids_len=np.array([len(i) for i in doc_ids]),
             scores=scores.float().numpy(), scores_unpadded=alone.float().numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main())
