/* What a preloaded library of colltune's (the profiler, tune online's layer) does before
 * the application runs: it takes its settings out of the environment and itself out of
 * LD_PRELOAD, so a process a rank starts (system(), fork and exec of a helper) neither
 * loads it nor sees its settings; only the job's own ranks profile or explore. Include
 * after defining _GNU_SOURCE (dladdr). */
#ifndef COLLTUNE_PRELOAD_H
#define COLLTUNE_PRELOAD_H

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* LD_PRELOAD without the file that defines `self` (a function of the calling library) */
static void drop_from_preload(void *self)
{
    Dl_info info;
    const char *pre = getenv("LD_PRELOAD");
    char kept[8192] = "";
    size_t used = 0;
    if (!pre || !dladdr(self, &info) || !info.dli_fname)
        return;
    char *copy = strdup(pre), *save = NULL;
    if (!copy)
        return;
    for (char *tok = strtok_r(copy, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
        size_t n = strlen(tok);
        if (strcmp(tok, info.dli_fname) == 0 || used + n + 2 > sizeof kept)
            continue;
        if (used)
            kept[used++] = ':';
        memcpy(kept + used, tok, n + 1);
        used += n;
    }
    free(copy);
    if (used)
        setenv("LD_PRELOAD", kept, 1);
    else
        unsetenv("LD_PRELOAD");
}

/* the variable `name`, copied into `out` (n bytes; "" where unset or too long), then
 * removed from the environment */
static void take_env(const char *name, char *out, size_t n)
{
    const char *v = getenv(name);
    out[0] = '\0';
    if (v && strlen(v) < n)
        strcpy(out, v);
    unsetenv(name);
}

#endif
