/* collonline's files: each rank's schedule and rank 0's evidence (what collonline.c says
 * of them), written only into a private directory of its user, each file created anew and
 * renamed into place once whole (docs/security.md). */
#define _GNU_SOURCE /* O_NOFOLLOW under -std=c99; dladdr, dl_iterate_phdr */
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/mpiobjects.h"
#include "online.h"

/* a file of this rank's in `dir`, as the profiler writes its records (docs/security.md):
 * only into a real directory of this user that no one else may write, created anew as
 * NAME.tmp (never a link followed) and renamed onto NAME once whole, so a reader sees whole
 * files only: the one replaced is this rank's own earlier one, in a directory no one else
 * can write. NULL, said, otherwise; `tmp` gets the path */
FILE *create_private(const char *dir, const char *name, char *tmp, size_t n)
{
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()
        || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        fprintf(stderr, "colltune online: %s is not a private directory of this user; "
                        "nothing written\n", dir);
        return NULL;
    }
    snprintf(tmp, n, "%s/%s.tmp", dir, name);
    unlink(tmp); /* a run killed while writing left it */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd < 0) {
        fprintf(stderr, "colltune online: cannot create %s; nothing written there\n", tmp);
        return NULL;
    }
    return fdopen(fd, "w");
}

/* `tmp`, closed, becomes the file it was written for (its name without ".tmp") */
void publish(FILE *f, const char *tmp)
{
    char path[4200];
    size_t n = strlen(tmp) - 4;
    int bad = fclose(f) != 0;
    snprintf(path, sizeof path, "%.*s", (int)n, tmp);
    if (bad || rename(tmp, path) != 0)
        fprintf(stderr, "colltune online: cannot write %s\n", path);
}

static void write_group(FILE *ev, FILE *sc, comm_st *s, int c, int b, group_t *g)
{
    int ncand = P.ncand[c];
    fprintf(sc, "%d.%d %d %s %d %lld %llx", s->lead, s->lead_seq, s->size, NAMES[c], b,
            g->calls, g->digest);
    for (int k = 0; k < ncand; k++)
        fprintf(sc, " %lld", g->used[k]);
    fprintf(sc, "\n");
    if (!ev)
        return;
    fprintf(ev, "{\"collective\": \"%s\", \"comm_size\": %d, \"nodes\": %d, \"ppn\": %d, "
                "\"comm\": %d, \"bytes\": %lld, \"calls\": %lld, \"explored\": %s, "
                "\"kept\": %d, \"configs\": [",
            NAMES[c], s->size, s->nodes, s->ppn, s->seq, g->bytes, g->calls,
            g->slot ? "true" : "false", P.cand[c][g->current].id);
    for (int k = 0; k < ncand; k++) {
        int n = g->n[k] < KEEP ? g->n[k] : KEEP;
        fprintf(ev, "%s{\"id\": %d, \"calls\": %lld, \"prior\": %d, \"dropped\": %s, "
                    "\"pruned\": %s, \"wrong\": %s, \"halved\": %s, \"unfit\": %s, "
                    "\"times_s\": [",
                k ? ", " : "", P.cand[c][k].id, g->used[k], g->pn[k],
                g->dropped[k] ? "true" : "false",
                g->pruned[k] ? "true" : "false", g->wrong[k] ? "true" : "false",
                g->halved[k] ? "true" : "false", g->unfit[k] ? "true" : "false");
        for (int i = 0; i < n; i++)
            fprintf(ev, "%s%.9g", i ? ", " : "", g->t[k][i]);
        fprintf(ev, "]}");
    }
    fprintf(ev, "]}\n");
}

/* this rank's schedule, and its communicators' evidence where it is their rank 0; the
 * times are the batches already reduced (at the end: all of them) */
void write_files(int partial)
{
    static int broken; /* said once: a directory that will not take them */
    char name[64], tsc[4200], tev[4200], host[256] = "";
    int wr, ws;
    if (broken)
        return;
    PMPI_Comm_rank(MPI_COMM_WORLD, &wr);
    PMPI_Comm_size(MPI_COMM_WORLD, &ws);
    snprintf(name, sizeof name, "schedule.%d", wr);
    FILE *sc = create_private(P.dir, name, tsc, sizeof tsc), *ev = NULL;
    for (comm_st *s = g_comms; s && sc; s = s->next)
        if (s->rank == 0) {
            snprintf(name, sizeof name, "evidence.%d", wr);
            ev = create_private(P.dir, name, tev, sizeof tev);
            break;
        }
    if (!sc) {
        broken = 1;
        return;
    }
    gethostname(host, sizeof host - 1);
    fprintf(sc, "host %s world %d overhead %.6f%s\n", host, ws, g_overhead,
            partial ? " partial" : "");
    for (comm_st *s = g_comms; s; s = s->next)
        for (int c = 0; c < N_OCOLL; c++)
            for (int b = 0; b < NBUCKET; b++)
                if (s->g[c][b])
                    write_group(s->rank == 0 ? ev : NULL, sc, s, c, b, s->g[c][b]);
    if (ev)
        publish(ev, tev);
    publish(sc, tsc);
}

/* This process is world rank `rank` of the job, and the only one: `rank.RANK` created
 * anew (never replaced) names it. A process that finds it made by another (a program a
 * rank started before its MPI_Init, with the layer still in its environment, calling
 * MPI_Init as a singleton) is not one of the job's ranks: it leaves `foreign.PID`, which
 * makes tune online refuse the run, and stays inert. 0: inert. */
int claim_rank(int rank)
{
    char path[4200], host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(path, sizeof path, "%s/rank.%d", g_dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        dprintf(fd, "%s %ld\n", host, (long)getpid());
        close(fd);
        return 1;
    }
    snprintf(path, sizeof path, "%s/foreign.%ld", g_dir, (long)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        dprintf(fd, "%s %ld world rank %d\n", host, (long)getpid(), rank);
        close(fd);
    }
    fprintf(stderr, "colltune online: a process on %s (pid %ld) that is not one of the job's "
                    "ranks loaded the layer as world rank %d: it explores nothing\n", host,
            (long)getpid(), rank);
    return 0;
}

/* what this rank runs on, for tune online's proof that the ranks ran the installation it
 * tunes (as the kernel's and the profiler's: core/toolchain.library_problem):
 * library.RANK, one JSON line, the library's words cleaned as the profiler cleans them */
void write_library(void)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], file[4096], objects[8192], tmp[4200], name[64];
    int len = 0, rank = 0;
    Dl_info info;
    PMPI_Get_library_version(lib, &len);
    lib[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = 0;
    snprintf(file, sizeof file, "%s", dladdr((void *)PMPI_Init, &info) && info.dli_fname
                                          ? info.dli_fname : "");
    json_clean(lib);
    json_clean(file);
    mpi_objects(objects, sizeof objects);
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    snprintf(name, sizeof name, "library.%d", rank);
    FILE *f = create_private(P.dir, name, tmp, sizeof tmp);
    if (!f)
        return;
    fprintf(f, "{\"library\": \"%.200s\", \"library_file\": \"%s\", "
               "\"library_objects\": %s}\n", lib, file, objects);
    publish(f, tmp);
}
