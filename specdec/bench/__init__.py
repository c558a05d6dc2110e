"""Measurements printed by the CLI, never timed tests: the interleaved benchmark against the
target alone and transformers' assisted generation (`run`, `contenders`, `report`, `chart`), and
the app's own timings (`app_timing`). The bench may time the app; nothing below imports it.
"""
