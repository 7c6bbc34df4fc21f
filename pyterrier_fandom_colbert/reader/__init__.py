"""The extractive reader: the answer's span in a passage, with a calibrated confidence (``pfc.Reader``)."""
from .calibration import ReaderCalibration
from .config import ReaderConfig

__all__ = ["ReaderCalibration", "ReaderConfig"]
