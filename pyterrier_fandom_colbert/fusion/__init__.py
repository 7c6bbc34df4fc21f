"""Fusion of rankings: pure score functions (``maths``), transformers (``LinearFusion``, ``RRF``, ``Normalise``,
``Hybrid``), weight tuning (``tuning``) and experiments whose fusions share their inputs (``experiment``).

Importing this package imports pandas and PyTerrier, not torch. See docs/fusion.md.
"""
from .experiment import Experiment, RunOnce, share_inputs
from .hybrid import DEFAULT_WEIGHT, Hybrid
from .transformers import RRF, Fusion, LinearFusion, Normalise
from .tuning import FusionTuning, plot_fusion_curve, tune_fusion, weight_grid

__all__ = ["DEFAULT_WEIGHT", "RRF", "Experiment", "Fusion", "FusionTuning", "Hybrid", "LinearFusion", "Normalise",
           "RunOnce", "plot_fusion_curve", "share_inputs", "tune_fusion", "weight_grid"]
