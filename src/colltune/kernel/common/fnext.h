/* The library's own definition of a Fortran entry a preloaded library wraps (collprof's
 * and collonline's Fortran wrappers): found once with dlsym(RTLD_NEXT), cached by the
 * caller. Include after defining _GNU_SOURCE (RTLD_NEXT). */
#ifndef COLLTUNE_FNEXT_H
#define COLLTUNE_FNEXT_H

#include <dlfcn.h>
#include <string.h>

typedef void (*fvoid_t)(void);

/* the library's own definition of `name` (NULL: it has none) */
static inline fvoid_t next_of(fvoid_t *cache, const char *name)
{
    if (!*cache) {
        void *p = dlsym(RTLD_NEXT, name);
        memcpy(cache, &p, sizeof *cache); /* object to function pointer, portably */
    }
    return *cache;
}

#endif
