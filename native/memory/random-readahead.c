// Loaded with LD_PRELOAD before the runtime's own code runs: turns off the disk's readahead for every mapped segment
// of the program and its libraries, so that a page fault reads about the page it needs, not the disk's readahead
// around it (read_ahead_kb: 8 MiB on some disks). Those pages are charged to the pod's memory cgroup: read a MiB at a
// time, a 64Mi limit keeps reclaiming the runtime's own code, and every fault reads another MiB (an agent read 12 GB
// from disk while 1,000 Services came in, and stalled past its liveness probe).
// - MADV_RANDOM on every segment: kernel 6.18 honours it for read-only data (half of node's binary),
// - but after a fault in an executable mapping it still reads ahead to the end of the mapping, up to read_ahead_kb
//   (measured: 1 MiB per fault in node's 41 MiB of code). So the executable segments are cut into mappings of
//   EXEC_CHUNK: every other chunk is marked MADV_DONTDUMP (which changes nothing else: core dumps leave file pages
//   out anyway), and the kernel keeps mappings with different flags apart. A fault then reads at most one chunk.
// Costs nothing once pages are cached, and a kernel object per chunk (about 1,300 for node: ~0.3 MiB).
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/** The most a fault in executable code reads: 32 KiB, eight pages of code around the one needed. */
#define EXEC_CHUNK ((uintptr_t)32 * 1024)

static void split_executable(uintptr_t start, uintptr_t end) {
  for (uintptr_t chunk = start; chunk < end; chunk += 2 * EXEC_CHUNK) {
    uintptr_t length = end - chunk < EXEC_CHUNK ? end - chunk : EXEC_CHUNK;
    madvise((void *)chunk, length, MADV_DONTDUMP);  // advice only: a refusal leaves the readahead as it was
  }
}

static int advise_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const uintptr_t page = (uintptr_t)(*(long *)data);
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
    if (segment->p_type != PT_LOAD) continue;
    uintptr_t start = (info->dlpi_addr + segment->p_vaddr) & ~(page - 1);
    uintptr_t end = info->dlpi_addr + segment->p_vaddr + segment->p_memsz;
    madvise((void *)start, end - start, MADV_RANDOM);  // advice only: a refusal changes nothing
    if (segment->p_flags & PF_X) split_executable(start, (end + page - 1) & ~(page - 1));
  }
  return 0;
}

__attribute__((constructor)) static void advise_random_readahead(void) {
  long page = sysconf(_SC_PAGESIZE);
  dl_iterate_phdr(advise_object, &page);
}
