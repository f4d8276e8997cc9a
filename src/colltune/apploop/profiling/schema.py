"""The JSON Schema of a profile (what `tune profile` writes, docs/profile.md) and the check
every reader runs before using one: a profile may come from another user, so its fields are
checked for type and range (a rank count of 0, text where a time goes, a collective name
that is markup), never trusted. jsonschema owns the checking."""

from __future__ import annotations

from typing import Any

from colltune.collectives import DATATYPES
from colltune.tuner.sequential import VERDICTS

_NAME = {"type": "string", "pattern": r"^[a-z][a-z_]{0,39}$"}  # an MPI collective's name
_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**62}
_POSITIVE = {"type": "integer", "minimum": 1, "maximum": 2**31}
_SECONDS = {"type": "number", "minimum": 0, "maximum": 1e9}
_SPREAD = {"type": "object", "required": ["mean", "max"],
           "properties": {"mean": _SECONDS, "max": _SECONDS}}
# text is one line without control characters: a profile's text reaches terminals, and a
# line break in it could fake a line of colltune's own (`error: ... run: curl ...|sh`)
_TEXT = {"type": "string", "maxLength": 4096, "pattern": r"^[^\x00-\x1f\x7f]*$"}

_LAYOUT = {"type": "string", "pattern": r"^[0-9]{1,7}x[0-9]{1,7}$"}
_ARRIVAL = {
    "type": ["object", "null"],
    "required": ["calls", "spread_s", "late_ranks", "delays_s"],
    "properties": {
        "calls": _COUNT,
        "spread_s": {"type": "object", "required": ["median", "p90", "max"],
                     "properties": {"median": _SECONDS, "p90": _SECONDS, "max": _SECONDS}},
        "call_s": _SECONDS, "after_last_s": _SECONDS,
        "late_ranks": {"type": "array", "maxItems": 64, "items": {
            "type": "object", "required": ["world_rank", "mean_delay_s"],
            "properties": {"rank": _COUNT, "world_rank": _COUNT, "mean_delay_s": _SECONDS,
                           "last_share": {"type": "number", "minimum": 0, "maximum": 1}}}},
        # per kept call, each communicator rank's delay after the first to enter
        # (each row as long as the group's communicator: apploop/profiling/replay.py checks
        # what a schema cannot, before a replay)
        "delays_s": {"type": "array", "maxItems": 1024,
                     "items": {"type": "array", "items": _SECONDS, "minItems": 1,
                               "maxItems": 1 << 20}},
        "layout": {"anyOf": [_LAYOUT, {"type": "null"}]},
        "layouts": {"type": "object", "propertyNames": _LAYOUT,
                    "additionalProperties": _COUNT},
    },
}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema", "version", "mpi", "ranks", "wall_s", "collective_s", "entries"],
    "properties": {
        "schema": {"const": "colltune-profile"},
        "version": {"type": "integer", "minimum": 1},
        "colltune": _TEXT, "created": _TEXT, "host": _TEXT,
        "command": {"type": "array", "items": _TEXT, "maxItems": 10_000},
        "cwd": _TEXT,
        "mpi": {
            "type": "object", "required": ["name", "version", "prefix"],
            "properties": {"key": _TEXT, "name": _TEXT, "version": _TEXT, "prefix": _TEXT,
                           "library": _TEXT, "library_file": _TEXT,
                           "backend": {"type": "string", "pattern": r"^[a-z0-9_]{1,20}$"}},
        },
        "ranks": _POSITIVE,
        "layout": {"type": ["object", "null"], "required": ["nodes", "ppn", "hosts"],
                   "properties": {"nodes": _POSITIVE, "ppn": _POSITIVE,
                                  "hosts": {"type": "array", "items": _TEXT,
                                            "maxItems": 1 << 20}}},
        "clock": {"type": ["object", "null"], "required": ["synced", "error_s", "drift_s"],
                  "properties": {"synced": {"type": "boolean"}, "error_s": _SECONDS,
                                 "drift_s": _SECONDS, "method": _TEXT}},
        "arrivals_dropped": _COUNT,
        "wall_s": _SPREAD, "collective_s": _SPREAD, "p2p_s": _SPREAD,
        "run_s": _SECONDS,
        "dropped_calls": _COUNT,
        "spawned_processes": _COUNT,
        # the CPUs a rank may run on (its binding), the distinct counts over the ranks
        "cpus_per_rank": {"type": "array", "items": {"type": "integer"}, "maxItems": 64},
        "settings": {"type": "object", "additionalProperties": {
            "type": "array", "items": {"type": ["string", "null"], "maxLength": 4096,
                                    "pattern": r"^[^\x00-\x1f\x7f]*$"}}},
        "entries": {
            "type": "array", "maxItems": 100_000,
            "items": {
                "type": "object",
                "required": ["collective", "comm_size", "size", "calls", "ranks", "time_s",
                             "share"],
                "properties": {
                    "collective": _NAME, "comm_size": _POSITIVE, "size": _COUNT,
                    "lookup_size": {"type": ["integer", "null"]},
                    "tuned_by_colltune": {"type": "boolean"},
                    "calls": _COUNT, "ranks": _POSITIVE,
                    "bytes_per_call": {"type": "number", "minimum": 0},
                    "time_s": _SPREAD, "longest_call_s": _SECONDS,
                    "share": {"type": "number", "minimum": 0, "maximum": 1e6},
                    "algorithm": {"type": ["string", "null"], "maxLength": 200,
                                  "pattern": r"^[^\x00-\x1f\x7f]*$"},
                    # the first calls one by one (slowest rank), and their time in all
                    "first_s": {"type": "array", "items": _SECONDS, "maxItems": 64},
                    "first_total_s": _SECONDS,
                    # where the calls changed level, if they did (tune profile reports it)
                    "warmup": {"type": ["object", "null"]},
                    "arrival": _ARRIVAL,
                    # what a reduction's calls summed, as the kernel can time it
                    "datatype": {"enum": [*DATATYPES, "other", "mixed"]},
                },
            },
        },
        "nonblocking": {"type": "object", "propertyNames": _NAME,
                        "additionalProperties": _COUNT},
    },
}


# what `tune verify --app --json` writes, as `tune report --app-verify` reads it
_RUNS = {"type": "array", "items": _SECONDS, "maxItems": 100_000}
VERIFY_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["measures", "pairs", "rules"],
    "properties": {
        "pairs": _POSITIVE, "rules": _TEXT,
        "measures": {"type": "object", "propertyNames": _NAME, "minProperties": 1,
                     "additionalProperties": {
                         "type": "object",
                         "required": ["default_s", "tuned_s", "ratio", "p_value", "verdict"],
                         "properties": {"default_s": _RUNS, "tuned_s": _RUNS,
                                        "ratio": {"type": "number", "minimum": 0},
                                        "p_value": {"type": ["number", "null"]},
                                        "verdict": {"enum": list(VERDICTS)},
                                        # the verdict's power, and why it is inconclusive
                                        "could_see": {"type": ["number", "null"],
                                                      "minimum": 0},
                                        "reason": _TEXT}}},
    },
}


def problem(doc: object, schema: dict[str, Any] = SCHEMA) -> str | None:
    """What is wrong with a profile (or another schema's document), as one line (where,
    and why), or None."""
    import jsonschema

    err = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(doc))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "the top level"
    return f"{where}: {err.message[:160]}"
