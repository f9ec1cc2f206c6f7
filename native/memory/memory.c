// releaseFilePages(dropFromPageCache): unmaps the pages of the runtime's binary and libraries that the process
// touched (madvise MADV_DONTNEED over its read-only file mappings) and, when asked, then drops those files' pages
// that no process maps any more from the page cache (posix_fadvise POSIX_FADV_DONTNEED). Node 24 maps ~40 MiB of
// its 120 MB binary while it starts and uses a fraction of that at rest: the agent releases once, with the cache
// drop, when it has started (a cold start's pages are charged to its pod), and again without it after later work
// (trimMalloc beside it), so that what it touches again is a minor fault from the page cache, not a disk read.
// Pages touched again fault back in, one at a time in read-only data (MADV_RANDOM, as random-readahead.c sets it
// at start: mappings made since, such as V8's remap of its builtins, lack it); on kernel 6.18 a fault in an
// executable mapping still reads read_ahead_kb after the page when it is not cached, whatever the advice.
// Only read-only file mappings holding no private copy of a page (smaps' Anonymous: 0) are touched: for those,
// dropping a page and faulting it back gives the same bytes. MADV_PAGEOUT would do both steps in one, but the
// kernel grants it only to a process that may write the file, and the agent's binary is root's.
// Returns the bytes of mappings unmapped.
// trimMalloc(): glibc's malloc_trim(0): gives back the free memory of every malloc arena, the free pages inside
// the [heap] segment included (madvise), which free() alone keeps. Returns whether any memory was given back.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <node_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
  unsigned long start, end;
  char path[4096];
  bool candidate;  // read-only and file-backed; cleared when smaps shows a private copy
} Mapping;

// The files whose pages were unmapped, to drop from the page cache once all are unmapped.
static char released_files[16][4096];
static int released_count;

static void remember_file(const char *path) {
  for (int i = 0; i < released_count; i++)
    if (strcmp(released_files[i], path) == 0) return;
  if (released_count < 16) snprintf(released_files[released_count++], sizeof released_files[0], "%s", path);
}

static double release(Mapping *m) {
  if (!m->candidate) return 0;
  void *start = (void *)m->start;
  size_t length = m->end - m->start;
  madvise(start, length, MADV_RANDOM);  // advice only: a refusal changes nothing
  if (madvise(start, length, MADV_DONTNEED) != 0) return 0;
  remember_file(m->path);
  return (double)length;
}

// Pages still mapped (here or by another process) stay cached; the kernel drops only the others.
static void drop_cached_pages(void) {
  for (int i = 0; i < released_count; i++) {
    int fd = open(released_files[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // advice only: a file we cannot open keeps its cache
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

static napi_value ReleaseFilePages(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool drop_from_page_cache = true;  // without an argument: as at start-up
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc >= 1 && napi_get_value_bool(env, argv[0], &drop_from_page_cache) != napi_ok) {
    napi_throw_type_error(env, NULL, "releaseFilePages: dropFromPageCache must be a boolean");
    return NULL;
  }
  FILE *smaps = fopen("/proc/self/smaps", "re");
  if (!smaps) {
    napi_throw_error(env, strerrorname_np(errno), "releaseFilePages: cannot read /proc/self/smaps");
    return NULL;
  }
  double released = 0;
  static Mapping current;  // static: its path buffer is large
  current.candidate = false;
  char line[4096];
  while (fgets(line, sizeof line, smaps)) {
    unsigned long start, end, anonymous;
    char perms[8], path[4096] = "";
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %4095s", &start, &end, perms, path) >= 3) {
      released += release(&current);  // the previous mapping's fields are all read by now
      current.start = start;
      current.end = end;
      snprintf(current.path, sizeof current.path, "%s", path);
      current.candidate = path[0] == '/' && perms[1] != 'w';
    } else if (sscanf(line, "Anonymous: %lu kB", &anonymous) == 1 && anonymous > 0) {
      current.candidate = false;
    }
  }
  released += release(&current);
  fclose(smaps);
  if (drop_from_page_cache) drop_cached_pages();
  released_count = 0;
  napi_value result;
  napi_create_double(env, released, &result);
  return result;
}

static napi_value TrimMalloc(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_get_boolean(env, malloc_trim(0) == 1, &result);
  return result;
}

static bool export_function(napi_env env, napi_value exports, const char *name, napi_callback callback) {
  napi_value function;
  return napi_create_function(env, name, NAPI_AUTO_LENGTH, callback, NULL, &function) == napi_ok &&
         napi_set_named_property(env, exports, name, function) == napi_ok;
}

NAPI_MODULE_INIT() {
  if (!export_function(env, exports, "releaseFilePages", ReleaseFilePages) ||
      !export_function(env, exports, "trimMalloc", TrimMalloc)) {
    napi_throw_error(env, NULL, "memory addon: cannot export its functions");
    return NULL;
  }
  return exports;
}
