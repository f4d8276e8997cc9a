/* The MPI libraries a process loaded, for the tuner's proof that its ranks ran the
 * installation's own (core/toolchain.library_problem): every loaded object whose file name
 * is an MPI library's (libmpi.so.40, libmpi.so.12, libmpich.so.12, libmpi_abi.so), by its
 * real path. The file defining MPI_Init alone is not enough: a libmpi.so.40 that loads the
 * real library by path (an ELF filter, or a dlopen) leaves MPI_Init the real library's
 * while its own code runs in every rank; it is among these. Include after defining
 * _GNU_SOURCE (dl_iterate_phdr). */
#ifndef COLLTUNE_MPIOBJECTS_H
#define COLLTUNE_MPIOBJECTS_H

#include <ctype.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

/* lib(mpi|mpich|mpi_abi).so(.N)*, as core/toolchain.is_mpi_library reads a name */
static int mpi_library_name(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    if (strncmp(b, "lib", 3))
        return 0;
    b += 3;
    if (!strncmp(b, "mpi_abi", 7))
        b += 7;
    else if (!strncmp(b, "mpich", 5))
        b += 5;
    else if (!strncmp(b, "mpi", 3))
        b += 3;
    else
        return 0;
    if (strncmp(b, ".so", 3))
        return 0;
    for (b += 3; *b == '.'; ) {
        if (!isdigit((unsigned char)*++b))
            return 0;
        while (isdigit((unsigned char)*b))
            b++;
    }
    return *b == '\0';
}

/* text made safe for a JSON string as the tuner reads it: every byte outside printable
 * ASCII, and quotes and backslashes, as a space (a library's words, a path) */
static inline void json_clean(char *s)
{
    for (; *s; s++)
        if (*s < 32 || *s > 126 || *s == '"' || *s == '\\')
            *s = ' ';
}

typedef struct {
    char *out;
    size_t n, used; /* n: the room for entries, less what the closing needs */
    int full;
} mpi_objects_t;

/* one object's real path as a JSON string, cleaned (json_clean: such a path names no
 * file, so the tuner then refuses, the safe side) */
static int add_mpi_object(struct dl_phdr_info *info, size_t size, void *data)
{
    mpi_objects_t *o = data;
    char real[PATH_MAX];
    (void)size;
    if (!info->dlpi_name || !info->dlpi_name[0] || !mpi_library_name(info->dlpi_name))
        return 0;
    if (!realpath(info->dlpi_name, real))
        snprintf(real, sizeof real, "%s", info->dlpi_name);
    json_clean(real);
    if (o->used + strlen(real) + 4 < o->n)
        o->used += (size_t)snprintf(o->out + o->used, o->n - o->used, "%s\"%s\"",
                                    o->used > 1 ? "," : "", real);
    else
        o->full = 1;
    return 0;
}

/* a JSON array of the MPI libraries this process loaded, into `out` (n >= 16); where they
 * do not fit, a last entry "?" that names no file, so the tuner refuses rather than passes */
static void mpi_objects(char *out, size_t n)
{
    mpi_objects_t o = {out, n - 8, 1, 0};
    out[0] = '[';
    out[1] = '\0';
    dl_iterate_phdr(add_mpi_object, &o);
    snprintf(out + o.used, n - o.used, "%s]", !o.full ? "" : o.used > 1 ? ",\"?\"" : "\"?\"");
}

#endif
