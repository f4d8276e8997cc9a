"""tune profile: the application under the PMPI profiler (profile), the profile's JSON
Schema (schema), where its ranks ran and how far apart they entered each call (arrival),
and which arrival pattern a tune replays for a group (replay)."""
