/*
 * numalab next-touch: migrate-on-next-touch for Linux processes, in user space.
 * Library: libnumalab_nexttouch.so (crate numalab-nexttouch). See docs/nexttouch.md.
 *
 * A marked range is protected PROT_NONE; the first access to a page moves that page
 * (NUMALAB_NT_PAGE) or the whole area (NUMALAB_NT_AREA) to the NUMA node of the touching CPU,
 * restores the protection and lets the access continue. The library installs a SIGSEGV handler
 * and passes faults outside its areas to the handler installed before it.
 *
 * Every function returns 0 on success or a negative errno:
 *   -EINVAL  unaligned address, zero length, unknown granularity, NULL stats pointer
 *   -ENOMEM  the range is not fully mapped (or the kernel ran out of VMAs / memory)
 *   -EACCES  part of the range is not mapped read-write
 *   -EEXIST  the range overlaps a marked area
 *   -ENOSPC  too many marked areas
 *   -ENOENT  (unmark) no marked area contains the address
 * On error nothing was changed.
 */
#ifndef NUMALAB_NEXTTOUCH_H
#define NUMALAB_NEXTTOUCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Granularity: what one touch moves. */
#define NUMALAB_NT_PAGE 0 /* the touched base page */
#define NUMALAB_NT_AREA 1 /* the whole marked area, at its first touch */

/* Process-wide counters; same layout as the Rust `numalab_nexttouch::Stats`. */
struct numalab_nt_stats {
    uint64_t touches;           /* SIGSEGVs handled inside marked areas */
    uint64_t pages_moved;       /* pages on the toucher's node after move_pages */
    uint64_t pages_not_present; /* pages never touched before marking (placed by first touch) */
    uint64_t move_failures;     /* pages move_pages could not move */
    uint64_t protect_failures;  /* protection restores that fell back to the whole area */
    uint64_t chained_signals;   /* SIGSEGVs passed to the previously installed handler */
    uint64_t live_areas;        /* areas marked now */
    uint64_t phases;            /* phase boundaries processed */
};

/* Mark len bytes from addr (page-aligned; len is rounded up to whole pages). */
int numalab_nt_mark(void *addr, size_t len, int granularity);

/* Unmark the area containing addr; its untouched pages get their protection back, unmoved. */
int numalab_nt_unmark(void *addr);

/* A phase boundary: mark every private anonymous writable mapping (heap, anonymous mmaps; not
 * stacks) next-touch with NUMALAB_NEXT_TOUCH_GRANULARITY (page|area, default page), after
 * unmarking the previous phase's areas. Under LD_PRELOAD with NUMALAB_NEXT_TOUCH=1 the library's
 * helper thread does the work and this returns at once (as does sending the phase signal,
 * SIGUSR2 by default); otherwise it marks in the calling thread before returning. */
int numalab_nt_phase(void);

/* Copy the counters into *out. */
int numalab_nt_get_stats(struct numalab_nt_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* NUMALAB_NEXTTOUCH_H */
