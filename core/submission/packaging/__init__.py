"""Job packaging: the package root, context.zip with plan.json, payload.pkl, environment capture.

One module per concern: `root` (which directory ships), `plan` (plan.json), `archive` (context.zip and its
cache), `by_value` (project modules pickled by value), `payload` (payload.pkl and batches), `env`
(captured variables). The names below are the ones the submission path and the public API use.
"""

from kinetic_tui.core.submission.packaging.archive import DEFAULT_EXCLUDED, build_context_zip, cached_context_zip
from kinetic_tui.core.submission.packaging.env import SensitiveEnvWarning, capture_env
from kinetic_tui.core.submission.packaging.payload import PayloadError, build_batch, build_payload, client_fingerprint
from kinetic_tui.core.submission.packaging.plan import PLAN_ARCNAME, make_plan
from kinetic_tui.core.submission.packaging.root import ROOT_MARKERS, find_package_root, is_installed, module_root

__all__ = [
    "DEFAULT_EXCLUDED",
    "PLAN_ARCNAME",
    "ROOT_MARKERS",
    "PayloadError",
    "SensitiveEnvWarning",
    "build_batch",
    "build_context_zip",
    "build_payload",
    "cached_context_zip",
    "capture_env",
    "client_fingerprint",
    "find_package_root",
    "is_installed",
    "make_plan",
    "module_root",
]
