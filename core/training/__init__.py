"""Console training runs: training jobs and tuning studies as real jobs on pools .

`kinetic_tui.core.training.service` is the public entry (`TrainingService`); this package holds its parts.
"""
