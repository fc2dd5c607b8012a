/* Uses libnumalab_nexttouch.so through its header: marks buffers, touches them from several
 * threads, checks data and counters, and checks that bad input returns -errno. Exit 0 = pass. */
#include "numalab_nexttouch.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "nt_test.c:%d: check failed: %s\n", __LINE__, #cond); \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

enum { PAGES = 64, THREADS = 4 };
static size_t page;
static uint64_t *buf;

static uint64_t pattern(size_t i) { return (i * 0x9E3779B97F4A7C15ull) ^ 0x5555; }

static void *reader(void *arg) {
    uint64_t sum = 0, want = 0;
    size_t words = PAGES * page / 8;
    for (size_t k = 0; k < words; k++) {
        size_t i = (k + (size_t)arg * 997) % words;
        sum += buf[i];
        want += pattern(i);
    }
    return (void *)(uintptr_t)(sum == want);
}

static uint64_t *map_pages(size_t n) {
    void *p = mmap(NULL, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    return p;
}

int main(void) {
    page = (size_t)sysconf(_SC_PAGESIZE);
    struct numalab_nt_stats s0, s1, s2;
    CHECK(numalab_nt_get_stats(&s0) == 0);

    /* Page granularity, touched by four threads at once: every page moves exactly once. */
    buf = map_pages(PAGES);
    for (size_t i = 0; i < PAGES * page / 8; i++) buf[i] = pattern(i);
    CHECK(numalab_nt_mark(buf, PAGES * page, NUMALAB_NT_PAGE) == 0);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, reader, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++) {
        void *ok;
        pthread_join(t[i], &ok);
        CHECK(ok == (void *)1);
    }
    CHECK(numalab_nt_get_stats(&s1) == 0);
    CHECK(s1.pages_moved - s0.pages_moved == PAGES);
    CHECK(s1.touches - s0.touches >= PAGES);
    CHECK(s1.move_failures == s0.move_failures);
    CHECK(numalab_nt_unmark(buf) == 0);
    CHECK(numalab_nt_unmark(buf) == -ENOENT);

    /* Area granularity: one touch moves all 16 pages. */
    uint64_t *area = map_pages(16);
    for (size_t i = 0; i < 16 * page / 8; i++) area[i] = i;
    CHECK(numalab_nt_mark(area, 16 * page, NUMALAB_NT_AREA) == 0);
    CHECK(area[5 * page / 8] == 5 * page / 8);
    CHECK(numalab_nt_get_stats(&s2) == 0);
    CHECK(s2.touches - s1.touches == 1);
    CHECK(s2.pages_moved - s1.pages_moved == 16);
    for (size_t i = 0; i < 16 * page / 8; i++) CHECK(area[i] == i);
    CHECK(numalab_nt_unmark((char *)area + page) == 0);

    /* Bad input: -errno, nothing marked. */
    CHECK(numalab_nt_mark((char *)area + 1, page, NUMALAB_NT_PAGE) == -EINVAL);
    CHECK(numalab_nt_mark(area, 0, NUMALAB_NT_PAGE) == -EINVAL);
    CHECK(numalab_nt_mark(area, page, 7) == -EINVAL);
    CHECK(numalab_nt_get_stats(NULL) == -EINVAL);
    munmap((char *)area + 8 * page, 8 * page);
    CHECK(numalab_nt_mark(area, 16 * page, NUMALAB_NT_PAGE) == -ENOMEM);
    CHECK(numalab_nt_unmark(area) == -ENOENT);
    CHECK(area[1] == 1);
    CHECK(numalab_nt_get_stats(&s0) == 0);
    CHECK(s0.live_areas == 0);
    printf("nt_test ok: touches=%llu pages_moved=%llu\n", (unsigned long long)s0.touches,
           (unsigned long long)s0.pages_moved);
    return 0;
}
