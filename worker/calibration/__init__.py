"""Calibration in the worker: labels from the label stream into the ledger (``intake``),
figures per question, provider and model (``figures``), and the calibrated thresholds
jobs may ask for (``thresholds``). The statistics themselves are ``shared.calibration``."""

from worker.calibration.figures import GroupReport, group_reports, scored
from worker.calibration.intake import consumer_name, store_label_stream
from worker.calibration.thresholds import ThresholdBook

__all__ = [
    "GroupReport",
    "ThresholdBook",
    "consumer_name",
    "group_reports",
    "scored",
    "store_label_stream",
]
