"""Evaluation: the analytical roofline baseline (baseline.py), paper-style
tables (report.py), plots (plot.py) and a trained model's predictions
(predictors.py), over the accuracy metrics of tpuperf_cli.metrics (shared
with the training loop's validation). `tpuperf eval` and `tpuperf baseline`
are thin commands over these.
"""
