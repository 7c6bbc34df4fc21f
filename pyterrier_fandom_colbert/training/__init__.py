"""Training ColBERT checkpoints: examples (:mod:`.examples`), losses (:mod:`.losses`), the loop (:mod:`.trainer`),
dev evaluation (:mod:`.evaluation`), the distillation teacher (:mod:`.teacher`), self-supervised pairs from
unlabeled wiki passages (:mod:`.selfsup`) and the ``pfc-train`` command (:mod:`.cli`).

    from pyterrier_fandom_colbert import ColBERT
    from pyterrier_fandom_colbert.training import PRESETS, Trainer, load_collection

    train = load_collection("train-v1.1.json")          # SQuAD JSON or an ir_datasets id
    dev = load_collection("dev-v1.1.json")
    colbert = ColBERT.from_pretrained(config=ColBERTConfig())   # fresh, over all-MiniLM-L6-v2
    result = Trainer(colbert, PRESETS["fresh"], train, "runs/squad", dev=dev, verbose=True).train()
    best = ColBERT.from_pretrained("runs/squad/best")

Names load on first use (torch is imported only by the trainer and losses).
"""
from ..lazy import lazy_attributes

_LAZY = {
    "QAData": "examples", "QPP": "examples", "QQP": "examples", "QPPSource": "examples", "QQPSource": "examples",
    "FixedSource": "examples", "from_irds": "examples", "load_collection": "examples", "docpair_examples": "examples",
    "tfidf_rankings": "examples", "collate": "examples",
    "SelfSupConfig": "selfsup", "selfsup_collection": "selfsup", "selfsup_from_irds": "selfsup",
    "TrainConfig": "trainer", "PRESETS": "trainer", "Trainer": "trainer", "TrainResult": "trainer",
    "evaluate": "evaluation", "ranking_metrics": "evaluation", "BiEncoderTeacher": "teacher",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = list(_LAZY)
