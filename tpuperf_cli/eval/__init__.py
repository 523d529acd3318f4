"""Evaluation: accuracy metrics (metrics.py, pure numpy), the analytical
roofline baseline (baseline.py), paper-style tables (report.py) and plots
(plot.py). `tpuperf eval` and `tpuperf baseline` are thin commands over these.
"""
