// The floor under a restore's window memory on this machine: maps BYTES of anonymous memory as
// HostBuffer does (MADV_HUGEPAGE), writes a byte every 4 KiB on THREADS threads, and prints the
// wall and the process's CPU time. Run beside restores (bench/DECISIONS.md, #35): memory the
// machine has not touched lately can cost far more than memory just freed. With FILE, the memory
// is filled by read()s of FILE instead (THREADS must be 1): a window read from local disk into
// the memory it lives in, which a restore is compared with (`cat > /dev/null` fills only the page
// cache).
//
//   cc -O2 -pthread bench/flink/first_touch.c -o first_touch && ./first_touch 1107296256 1 [FILE]
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static char* base;
static size_t bytes;
static long threads;

static void* touch(void* arg) {
  const size_t k = (size_t)arg;
  const size_t piece = bytes / (size_t)threads & ~(size_t)4095;
  const size_t from = k * piece;
  const size_t to = k + 1 == (size_t)threads ? bytes : from + piece;
  for (size_t at = from; at < to; at += 4096) base[at] = 1;
  return NULL;
}

static double seconds(struct timeval t) {
  return t.tv_sec + t.tv_usec / 1e6;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: first_touch BYTES THREADS [FILE]\n");
    return 2;
  }
  bytes = strtoull(argv[1], NULL, 10);
  threads = strtol(argv[2], NULL, 10);
  const char* file = argc == 4 ? argv[3] : NULL;
  if (bytes == 0 || threads < 1 || threads > 256 || (file != NULL && threads != 1)) {
    fprintf(stderr,
            "first_touch: BYTES must be positive and THREADS 1 to 256 (1 with FILE), got %s %s\n",
            argv[1], argv[2]);
    return 2;
  }
  const int fd = file == NULL ? -1 : open(file, O_RDONLY);
  if (file != NULL && fd < 0) {
    perror(file);
    return 1;
  }
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    perror("first_touch: mmap");
    return 1;
  }
  madvise(base, bytes, MADV_HUGEPAGE);
  size_t filled = 0;
  if (fd >= 0) {
    const size_t chunk = (size_t)8 << 20;
    for (ssize_t got = 1; filled < bytes && got > 0; filled += (size_t)got) {
      got = read(fd, base + filled, bytes - filled < chunk ? bytes - filled : chunk);
      if (got < 0) {
        perror(file);
        return 1;
      }
    }
  } else {
    pthread_t t[256];
    for (long k = 0; k < threads; ++k) pthread_create(&t[k], NULL, touch, (void*)k);
    for (long k = 0; k < threads; ++k) pthread_join(t[k], NULL);
    filled = bytes;
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  struct rusage use;
  getrusage(RUSAGE_SELF, &use);
  printf("first_touch bytes=%zu threads=%ld read_bytes=%zu wall_s=%.3f cpu_s=%.3f\n", bytes,
         threads, fd >= 0 ? filled : 0,
         (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9,
         seconds(use.ru_utime) + seconds(use.ru_stime));
  return 0;
}
