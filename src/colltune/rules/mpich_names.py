"""MPICH's names: the variables that select and parameterise its algorithms, and the
tuning file's leaf parameters (what MPICH's files and profiles are written in)."""

from __future__ import annotations

from colltune.core.catalog import CHUNK, RADIX

JSON_VAR = "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"


def _topo(coll: str) -> list[tuple[str, str]]:
    return [(f"topo_{k}", f"MPIR_CVAR_{coll}_TOPO_{k.upper()}")
            for k in ("overhead", "diff_groups", "diff_switches", "same_switches")]


# Tuning-file leaves whose algorithm takes parameters: MPICH allocates the container without
# initialising it (MPL_malloc) and sets only the parameters the file names, so every one of
# them must be written, with the value the forcing variable ran with (MPICH 5.0.2 aborts in
# MPI_Init with "Invalid tree type (21952)" for a bare MPIR_Bcast_intra_tree leaf).
PARAMS: dict[str, list[tuple[str, str]]] = {
    "MPIR_Bcast_intra_tree": [("tree_type", "MPIR_CVAR_BCAST_TREE_TYPE"),
                              ("k", "MPIR_CVAR_BCAST_TREE_KVAL"),
                              ("is_non_blocking", "MPIR_CVAR_BCAST_IS_NON_BLOCKING"),
                              *_topo("BCAST")],
    "MPIR_Bcast_intra_pipelined_tree": [
        ("tree_type", "MPIR_CVAR_BCAST_TREE_TYPE"), ("k", "MPIR_CVAR_BCAST_TREE_KVAL"),
        ("is_non_blocking", "MPIR_CVAR_BCAST_IS_NON_BLOCKING"),
        ("chunk_size", "MPIR_CVAR_BCAST_TREE_PIPELINE_CHUNK_SIZE"),
        ("recv_pre_posted", "MPIR_CVAR_BCAST_RECV_PRE_POST")],
    "MPIR_Allreduce_intra_tree": [
        ("buffer_per_child", "MPIR_CVAR_ALLREDUCE_TREE_BUFFER_PER_CHILD"),
        ("k", "MPIR_CVAR_ALLREDUCE_TREE_KVAL"), ("tree_type", "MPIR_CVAR_ALLREDUCE_TREE_TYPE"),
        ("chunk_size", "MPIR_CVAR_ALLREDUCE_TREE_PIPELINE_CHUNK_SIZE"), *_topo("ALLREDUCE")],
    "MPIR_Allreduce_intra_recursive_multiplying": [
        ("k", "MPIR_CVAR_ALLREDUCE_RECURSIVE_MULTIPLYING_KVAL")],
    "MPIR_Allreduce_intra_recexch": [
        ("k", "MPIR_CVAR_ALLREDUCE_RECEXCH_KVAL"),
        ("single_phase_recv", "MPIR_CVAR_ALLREDUCE_RECEXCH_SINGLE_PHASE_RECV")],
    "MPIR_Allreduce_intra_k_reduce_scatter_allgather": [
        ("k", "MPIR_CVAR_ALLREDUCE_RECEXCH_KVAL"),
        ("single_phase_recv", "MPIR_CVAR_ALLREDUCE_RECEXCH_SINGLE_PHASE_RECV")],
    "MPIR_Allgather_intra_k_brucks": [("k", "MPIR_CVAR_ALLGATHER_BRUCKS_KVAL")],
    "MPIR_Allgather_intra_recexch_doubling": [
        ("k", "MPIR_CVAR_ALLGATHER_RECEXCH_KVAL"),
        ("single_phase_recv", "MPIR_CVAR_ALLGATHER_RECEXCH_SINGLE_PHASE_RECV")],
    "MPIR_Allgather_intra_recexch_halving": [
        ("k", "MPIR_CVAR_ALLGATHER_RECEXCH_KVAL"),
        ("single_phase_recv", "MPIR_CVAR_ALLGATHER_RECEXCH_SINGLE_PHASE_RECV")],
    "MPIR_Alltoall_intra_k_brucks": [("k", "MPIR_CVAR_ALLTOALL_BRUCKS_KVAL")],
    "MPIR_Barrier_intra_k_dissemination": [("k", "MPIR_CVAR_BARRIER_DISSEM_KVAL")],
    "MPIR_Barrier_intra_recexch": [("k", "MPIR_CVAR_BARRIER_RECEXCH_KVAL")],
}


# leaf parameters that are searched: the radix k and the pipeline chunk size; the others
# keep their launch values
KNOBS = {"k": RADIX, "chunk_size": CHUNK}


def algorithm_var(coll: str) -> str:
    return f"MPIR_CVAR_{coll.upper()}_INTRA_ALGORITHM"


def device_var(coll: str) -> str:
    return f"MPIR_CVAR_{coll.upper()}_DEVICE_COLLECTIVE"
