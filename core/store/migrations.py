"""The schema, as an ordered list of migrations.

Each entry is `(version, sql)` or `(version, function)`: a function migrates data that SQL cannot (pickles,
JSON fields), given the open connection. `Store` applies every entry newer than the file's
`PRAGMA user_version`, each in its own transaction together with the version bump, so a crash mid-migration
leaves the previous version intact. Adding a table later is one appended tuple; never edit an entry that has
shipped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from kinetic_tui.core.store.module_moves import rewrite_module_paths

Migration = str | Callable[[sqlite3.Connection], None]

MIGRATIONS: list[tuple[int, Migration]] = [
    (
        1,
        """
        CREATE TABLE training_jobs (
            name   TEXT PRIMARY KEY,
            status TEXT NOT NULL,
            record TEXT NOT NULL
        );
        CREATE TABLE tuning_studies (
            name   TEXT PRIMARY KEY,
            config TEXT NOT NULL,
            best   INTEGER
        );
        CREATE TABLE tuning_trials (
            study           TEXT NOT NULL REFERENCES tuning_studies(name) ON DELETE CASCADE,
            trial_id        INTEGER NOT NULL,
            record          TEXT NOT NULL,
            PRIMARY KEY (study, trial_id)
        );
        CREATE TABLE model_versions (
            group_name    TEXT NOT NULL,
            version       INTEGER NOT NULL,
            artifact_hash TEXT NOT NULL,
            metrics       TEXT NOT NULL,
            source        TEXT,
            -- no stage column: the last transition is the single source of truth for a version's stage
            PRIMARY KEY (group_name, version)
        );
        CREATE TABLE model_transitions (
            seq        INTEGER PRIMARY KEY,  -- rows are never deleted, so rowids only grow
            group_name TEXT NOT NULL,
            version    INTEGER NOT NULL,
            from_stage TEXT NOT NULL,
            to_stage   TEXT NOT NULL,
            at         NOT NULL,
            FOREIGN KEY (group_name, version) REFERENCES model_versions(group_name, version)
        );
        CREATE TABLE endpoints (
            name   TEXT PRIMARY KEY,
            record TEXT NOT NULL
        );
        CREATE TABLE scaling_events (
            endpoint       TEXT NOT NULL REFERENCES endpoints(name) ON DELETE CASCADE,
            seq            INTEGER NOT NULL,
            tick,
            concurrency    NOT NULL,
            desired        INTEGER NOT NULL,
            instance_count INTEGER NOT NULL,
            action         TEXT NOT NULL,
            PRIMARY KEY (endpoint, seq)
        );
        CREATE TABLE multimodel_endpoints (
            name              TEXT PRIMARY KEY,
            max_loaded_models INTEGER NOT NULL,
            loaded            TEXT NOT NULL,
            hits              INTEGER NOT NULL,
            misses            INTEGER NOT NULL
        );
        CREATE TABLE multimodel_models (
            endpoint TEXT NOT NULL REFERENCES multimodel_endpoints(name) ON DELETE CASCADE,
            name     TEXT NOT NULL,
            model    BLOB NOT NULL,
            PRIMARY KEY (endpoint, name)
        );
        CREATE TABLE multimodel_events (
            endpoint TEXT NOT NULL REFERENCES multimodel_endpoints(name) ON DELETE CASCADE,
            kind     TEXT NOT NULL CHECK (kind IN ('load', 'evict')),
            seq      INTEGER NOT NULL,
            model    TEXT NOT NULL,
            PRIMARY KEY (endpoint, kind, seq)
        );
        CREATE TABLE pipelines (
            name           TEXT PRIMARY KEY,
            ref            TEXT NOT NULL,
            default_params TEXT NOT NULL
        );
        CREATE TABLE pipeline_runs (
            pipeline TEXT NOT NULL REFERENCES pipelines(name) ON DELETE CASCADE,
            number   INTEGER NOT NULL,
            record   TEXT NOT NULL,
            PRIMARY KEY (pipeline, number)
        );
        CREATE TABLE step_cache (
            key     TEXT PRIMARY KEY,
            outputs TEXT NOT NULL
        );
    """,
    ),
    (
        2,
        """
        -- the local backend: pools of (emulated) accelerator nodes and the jobs placed on them
        CREATE TABLE settings (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        CREATE TABLE pools (
            name        TEXT PRIMARY KEY,
            accelerator TEXT NOT NULL,
            nodes       INTEGER NOT NULL CHECK (nodes >= 1),
            spot        INTEGER NOT NULL,
            created_at  REAL NOT NULL
        );
        CREATE TABLE jobs (
            seq         INTEGER PRIMARY KEY AUTOINCREMENT,  -- submission order: the queue order
            job_id      TEXT NOT NULL UNIQUE,
            backend     TEXT NOT NULL,
            pool        TEXT,
            nodes       INTEGER NOT NULL,
            status      TEXT NOT NULL,
            phase       TEXT,
            detail      TEXT,
            group_id    TEXT,
            created_at  REAL NOT NULL,
            started_at  REAL,
            finished_at REAL,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            hosts       TEXT,           -- JSON list of HostProcess while launched
            handle      TEXT NOT NULL,  -- JSON JobHandle record (also handle.json in the bucket)
            launch      TEXT NOT NULL   -- JSON: what the scheduler needs to start it
        );
        CREATE INDEX jobs_by_pool_status ON jobs (pool, status);
        CREATE INDEX jobs_by_group ON jobs (group_id);
        CREATE TABLE job_groups (
            group_id       TEXT PRIMARY KEY,
            max_concurrent INTEGER,
            created_at     REAL NOT NULL
        );
        CREATE TABLE volume_locks (
            path   TEXT PRIMARY KEY,
            job_id TEXT NOT NULL
        );
    """,
    ),
    (
        3,
        """
        -- console training runs (core/training/service.py): what a TrainingJob record does not carry
        CREATE TABLE training_runs (
            name  TEXT PRIMARY KEY REFERENCES training_jobs(name) ON DELETE CASCADE,
            pool  TEXT NOT NULL,
            study TEXT,           -- the tuning study this training is a trial of, if any
            meta  TEXT NOT NULL   -- JSON: step, checkpoints {bucket, uri, prefix}, job_ids, times, last_metric
        );
        CREATE INDEX training_runs_by_pool ON training_runs (pool);
        -- no foreign key: TuningRepo.save replaces the tuning_studies row, which would cascade here
        CREATE TABLE tuning_runs (
            name TEXT PRIMARY KEY,
            pool TEXT NOT NULL,
            step TEXT
        );
    """,
    ),
    (
        4,
        """
        -- GKE profiles: the desired accelerator node pools of each cluster (core/backends/gke/pools.py); the Pulumi
        -- stack is converged to these rows by `kinetic-tui up` / `pool add|remove`
        CREATE TABLE gke_pools (
            project     TEXT NOT NULL,
            cluster     TEXT NOT NULL,
            name        TEXT NOT NULL,
            accelerator TEXT NOT NULL,  -- canonical accelerator text (format_accelerator)
            spot        INTEGER NOT NULL,
            min_nodes   INTEGER NOT NULL,
            max_nodes   INTEGER NOT NULL,
            created_at  REAL NOT NULL,
            PRIMARY KEY (project, cluster, name),
            UNIQUE (project, cluster, accelerator, spot)
        );
    """,
    ),
    (
        5,
        """
        -- map lanes (core/backends/local/lanes.py): one runner process on one node works through a chunk of a
        -- batch's inputs; each input keeps its own jobs row, its log range and its result range
        CREATE TABLE lanes (
            lane_id    TEXT PRIMARY KEY,
            pool       TEXT NOT NULL,
            group_id   TEXT NOT NULL,
            dir        TEXT NOT NULL,
            hosts      TEXT,              -- JSON list of one HostProcess once launched
            started_at REAL NOT NULL,
            progress   INTEGER NOT NULL DEFAULT 0,  -- bytes of progress.jsonl already applied to jobs
            ended_at   REAL
        );
        CREATE INDEX lanes_by_pool ON lanes (pool, ended_at);
        ALTER TABLE jobs ADD COLUMN lane TEXT;         -- the lane an input is assigned to, while it is
        ALTER TABLE jobs ADD COLUMN log_start INTEGER; -- its bytes in the lane's log
        ALTER TABLE jobs ADD COLUMN log_end INTEGER;
        ALTER TABLE jobs ADD COLUMN result_at INTEGER; -- its result pickle in the lane's results file
        ALTER TABLE jobs ADD COLUMN result_size INTEGER;
        CREATE INDEX jobs_by_lane ON jobs (lane);
    """,
    ),
    # the one `kinetic_tui` namespace: stored references to the old top-level `core`/`infra`/`runner` modules
    (6, rewrite_module_paths),
    (
        7,
        """
        -- GKE node pools may consume a capacity reservation (`pool add --reservation`); NULL: none
        ALTER TABLE gke_pools ADD COLUMN reservation TEXT;
    """,
    ),
    (
        8,
        """
        -- the snapshot digest of a study's step project, packaged when it started: every trial ships it
        -- (NULL: no step, an installed one, or a study started before steps were packaged at start)
        ALTER TABLE tuning_runs ADD COLUMN code TEXT;
        -- a study's trials are read from their trainings (training_runs.study) whenever it is looked at
        CREATE INDEX training_runs_by_study ON training_runs (study);
    """,
    ),
    (
        9,
        """
        -- runs whose steps are jobs: the run's own state beside its record, one row per step state
        ALTER TABLE pipeline_runs ADD COLUMN status TEXT;  -- NULL: a run recorded whole, before steps were jobs
        CREATE INDEX pipeline_runs_by_status ON pipeline_runs (status);
        CREATE TABLE pipeline_steps (
            pipeline TEXT NOT NULL,
            number   INTEGER NOT NULL,
            step     TEXT NOT NULL,
            status   TEXT NOT NULL,
            job_id   TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            result   TEXT NOT NULL,  -- JSON: outputs, cache_key, duration, error
            PRIMARY KEY (pipeline, number, step),
            FOREIGN KEY (pipeline, number) REFERENCES pipeline_runs(pipeline, number) ON DELETE CASCADE
        );
        -- the content-addressed artifact store (core/artifacts.py) and what keeps each artifact alive
        CREATE TABLE artifacts (
            digest     TEXT PRIMARY KEY,
            created_at REAL NOT NULL
        );
        CREATE TABLE artifact_refs (
            digest TEXT NOT NULL,
            kind   TEXT NOT NULL CHECK (kind IN ('cache', 'run', 'model')),
            holder TEXT NOT NULL,
            PRIMARY KEY (digest, kind, holder)
        );
        CREATE INDEX artifact_refs_by_holder ON artifact_refs (kind, holder);
    """,
    ),
    (
        10,
        """
        -- what a model version serves: its trained state (an artifact) and its predict entry point
        CREATE TABLE model_serving (
            model_group TEXT NOT NULL,
            version     INTEGER NOT NULL,
            artifact    TEXT NOT NULL,  -- digest of the final training state in the artifact store
            predict     TEXT,           -- MODULE:FUNC, NULL: the built-in predict of the built-in step
            code        TEXT,           -- digest of the predict's project archive in the artifact store
            PRIMARY KEY (model_group, version)
        );
        -- endpoints that serve: the whole configuration, whether it should run, and its router
        CREATE TABLE endpoint_serving (
            name   TEXT PRIMARY KEY,
            config TEXT NOT NULL,   -- JSON: the EndpointConfig record
            wanted TEXT NOT NULL CHECK (wanted IN ('running', 'stopped')),
            router TEXT             -- JSON: pid, port of the live router; NULL when none
        );
        CREATE TABLE serving_instances (
            endpoint TEXT NOT NULL,
            instance TEXT NOT NULL,  -- the backend job id that runs it
            state    TEXT NOT NULL CHECK (state IN ('starting', 'ready', 'draining')),
            url      TEXT,
            pid      INTEGER,
            started_at REAL NOT NULL,
            PRIMARY KEY (endpoint, instance)
        );
        -- what serving did beside scaling: instances started, replaced, stopped; holds; model loads
        CREATE TABLE serving_events (
            endpoint TEXT NOT NULL,
            seq      INTEGER NOT NULL,
            at       REAL NOT NULL,
            kind     TEXT NOT NULL,
            detail   TEXT NOT NULL,  -- JSON
            PRIMARY KEY (endpoint, seq)
        );
    """,
    ),
    (
        11,
        """
        -- a long history stays cheap: the active jobs (queue, settling, polls) and the oldest finished ones
        -- (`jobs prune --older-than`) are found through an index instead of a scan of every job
        CREATE INDEX jobs_by_status ON jobs (status);
        CREATE INDEX jobs_by_finished ON jobs (finished_at);
        CREATE INDEX lanes_by_end ON lanes (ended_at);
        CREATE INDEX lanes_by_group ON lanes (group_id);
    """,
    ),
    (
        12,
        """
        -- what `submit` offers: every MODULE:FUNC submitted by reference here, and the submissions saved by name
        CREATE TABLE submitted_functions (
            ref      TEXT PRIMARY KEY,
            last_run REAL NOT NULL
        );
        CREATE TABLE saved_functions (
            name        TEXT PRIMARY KEY,
            ref         TEXT NOT NULL,
            accelerator TEXT,            -- NULL: the function's own
            args        TEXT NOT NULL,   -- JSON list
            kwargs      TEXT NOT NULL,   -- JSON object
            saved_at    REAL NOT NULL
        );
    """,
    ),
    (
        13,
        """
        -- a map's first lanes are sized from how long its function's inputs took in its last batch (lanes.py)
        ALTER TABLE job_groups ADD COLUMN func TEXT;  -- MODULE:QUALNAME of the mapped function
        CREATE TABLE input_timings (
            func         TEXT PRIMARY KEY,
            mean_seconds REAL NOT NULL,
            measured_at  REAL NOT NULL
        );
    """,
    ),
]
