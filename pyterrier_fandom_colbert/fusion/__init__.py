"""Fusion of rankings: pure score functions (``maths``), transformers (``LinearFusion``, ``RRF``, ``Normalise``,
``Hybrid``), weight tuning (``tuning``) and experiments whose fusions share their inputs (``experiment``).

Importing this package imports pandas and PyTerrier, not torch. See docs/fusion.md.
"""
from .experiment import Experiment, RunOnce, share_inputs
from .hybrid import DEFAULT_WEIGHT, Hybrid
from .transformers import RRF, Fusion, LinearFusion, Normalise
from .tuning import FusionTuning, plot_fusion_curve, tune_fusion, weight_grid

__all__ = ["Fusion", "LinearFusion", "RRF", "Normalise", "Hybrid", "DEFAULT_WEIGHT", "FusionTuning", "tune_fusion",
           "weight_grid", "plot_fusion_curve", "Experiment", "RunOnce", "share_inputs"]
