/* collonline's files: each rank writes only into a private directory of its user, each
 * file created anew and renamed into place once whole (docs/security.md). */
#define _GNU_SOURCE /* O_NOFOLLOW under -std=c99 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
