"""The SQLite store: every measurement with its full context, the source for decisions."""

from colltune.store.db import Store
from colltune.store.records import (
    Context,
    Measurement,
    ModelFit,
    default_db_path,
    timing_of,
)

__all__ = ["Context", "Measurement", "ModelFit", "Store", "default_db_path", "timing_of"]
