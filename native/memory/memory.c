// releaseFilePages(): once the agent has started, unmaps the pages of the runtime's binary and libraries that
// start-up touched (madvise MADV_DONTNEED). Node 24 maps ~40 MiB of its 120 MB binary while it starts and uses
// a fraction of that at rest; unmapped, the rest leaves the process's RSS, and the page cache keeps it only
// until the kernel needs the memory (clean and unmapped: the cheapest pages to reclaim). Pages touched again
// fault back in one at a time (MADV_RANDOM, as random-readahead.c sets it at start: mappings made since, such as
// V8's remap of its builtins, lack it).
// Only read-only file mappings holding no private copy of a page (smaps' Anonymous: 0) are touched: for those,
// dropping a page and faulting it back gives the same bytes. MADV_PAGEOUT would free the page cache too, but the
// kernel grants it only to a process that may write the file, and the agent's binary is root's.
// Returns the bytes of mappings unmapped.
#define _GNU_SOURCE
#include <errno.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

typedef struct {
  unsigned long start, end;
  bool candidate;  // read-only and file-backed; cleared when smaps shows a private copy
} Mapping;

static double release(Mapping *m) {
  if (!m->candidate) return 0;
  void *start = (void *)m->start;
  size_t length = m->end - m->start;
  madvise(start, length, MADV_RANDOM);  // advice only: a refusal changes nothing
  return madvise(start, length, MADV_DONTNEED) == 0 ? (double)length : 0;
}

static napi_value ReleaseFilePages(napi_env env, napi_callback_info info) {
  (void)info;
  FILE *smaps = fopen("/proc/self/smaps", "re");
  if (!smaps) {
    napi_throw_error(env, strerrorname_np(errno), "releaseFilePages: cannot read /proc/self/smaps");
    return NULL;
  }
  double released = 0;
  Mapping current = {0, 0, false};
  char line[4096];
  while (fgets(line, sizeof line, smaps)) {
    unsigned long start, end, anonymous;
    char perms[8], path[4096] = "";
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %4095s", &start, &end, perms, path) >= 3) {
      released += release(&current);  // the previous mapping's fields are all read by now
      current = (Mapping){start, end, path[0] == '/' && perms[1] != 'w'};
    } else if (sscanf(line, "Anonymous: %lu kB", &anonymous) == 1 && anonymous > 0) {
      current.candidate = false;
    }
  }
  released += release(&current);
  fclose(smaps);
  napi_value result;
  napi_create_double(env, released, &result);
  return result;
}

NAPI_MODULE_INIT() {
  napi_value function;
  if (napi_create_function(env, "releaseFilePages", NAPI_AUTO_LENGTH, ReleaseFilePages, NULL, &function) != napi_ok ||
      napi_set_named_property(env, exports, "releaseFilePages", function) != napi_ok) {
    napi_throw_error(env, NULL, "memory addon: cannot export releaseFilePages");
    return NULL;
  }
  return exports;
}
