/* A program that knows nothing of numalab: run under LD_PRELOAD=libnumalab_nexttouch.so with
 * NUMALAB_NEXT_TOUCH=1, it announces a phase boundary with a signal (argv[1], default SIGUSR2),
 * waits for the library's helper thread to finish the phase (reading the counters through
 * dlsym), reads its buffer back and prints the counters. Exit 0 = data intact. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct stats { uint64_t touches, pages_moved, not_present, move_failures, protect_failures, chained, live, phases; };
typedef int (*get_stats_fn)(struct stats *);

int main(int argc, char **argv) {
    int sig = argc > 1 ? atoi(argv[1]) : SIGUSR2;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = 256, words = pages * page / 8;
    get_stats_fn get = (get_stats_fn)dlsym(RTLD_DEFAULT, "numalab_nt_get_stats");
    if (!get) {
        fprintf(stderr, "numalab_nt_get_stats not found: run under LD_PRELOAD\n");
        return 2;
    }
    uint64_t *buf = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 3;
    for (size_t i = 0; i < words; i++) buf[i] = i * 31 + 7;
    struct stats s;
    kill(getpid(), sig);
    for (int tries = 0;; tries++) {
        get(&s);
        if (s.phases >= 1) break;
        if (tries > 3000) {
            fprintf(stderr, "no phase after the signal\n");
            return 4;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    uint64_t bad = 0;
    for (size_t i = 0; i < words; i++) bad += buf[i] != i * 31 + 7;
    get(&s);
    printf("pages=%zu touches=%llu pages_moved=%llu phases=%llu live_areas=%llu bad=%llu\n", pages,
           (unsigned long long)s.touches, (unsigned long long)s.pages_moved, (unsigned long long)s.phases,
           (unsigned long long)s.live, (unsigned long long)bad);
    return bad == 0 ? 0 : 1;
}
