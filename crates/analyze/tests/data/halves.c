/* Two threads write disjoint halves of each 2 MiB region of a THP-advised buffer
 * (the huge-page false-sharing pattern), pinned to CPUs 0 and 1. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define REGION (2UL << 20)
#define REGIONS 2
static char *buf;

static void *worker(void *arg) {
    long t = (long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t, &set);
    sched_setaffinity(0, sizeof set, &set);
    for (int r = 0; r < REGIONS; r++)
        memset(buf + r * REGION + t * (REGION / 2), 1, REGION / 2);
    return 0;
}

int main(void) {
    buf = mmap(0, REGIONS * REGION + REGION, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    buf = (char *)(((unsigned long)buf + REGION - 1) & ~(REGION - 1));
    madvise(buf, REGIONS * REGION, MADV_HUGEPAGE);
    char *heap = malloc(64 << 10);
    memset(heap, 2, 64 << 10);
    pthread_t th[2];
    for (long t = 0; t < 2; t++) pthread_create(&th[t], 0, worker, (void *)t);
    for (int t = 0; t < 2; t++) pthread_join(th[t], 0);
    free(heap);
    return 0;
}
