"""Fusion of rankings: pure score functions (``maths``), transformers (``LinearFusion``, ``RRF``, ``Normalise``,
``Hybrid``) and weight tuning (``tuning``).

Importing this package imports pandas and PyTerrier, not torch. See docs/fusion.md.
"""
from .hybrid import DEFAULT_WEIGHT, Hybrid
from .transformers import RRF, Fusion, LinearFusion, Normalise
from .tuning import FusionTuning, plot_fusion_curve, tune_fusion, weight_grid

__all__ = ["DEFAULT_WEIGHT", "RRF", "Fusion", "FusionTuning", "Hybrid", "LinearFusion", "Normalise",
           "plot_fusion_curve", "tune_fusion", "weight_grid"]
