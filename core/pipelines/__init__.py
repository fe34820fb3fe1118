"""Pipeline runs as real work: each executing step is a job, the run is driven by the workspace supervisor.

`runs` starts, waits for, resumes and cancels runs (what a client does); `driver` advances every Running run
one round at a time (the supervisor's `PipelineRuns` duty); `step_job` is what a step's job runs. The rules
of a run (edges, Kahn order, the value-keyed cache, the skip cascade) are the pure engine's.
"""
