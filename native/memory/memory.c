// releaseFilePages(): once the agent has started, hands back to the kernel the pages of the runtime's binary and
// libraries that only start-up used (madvise MADV_PAGEOUT, Linux 5.4+). They are file pages, mapped by this
// process alone in a pod: the kernel drops them from the page cache and the pod's memory cgroup, and the few that
// the steady state touches fault back in one page at a time (MADV_RANDOM first, as random-readahead.c sets it at
// start: mappings made since, such as V8's remap of its builtins, lack it). Pages that other processes map too
// are left alone by the kernel. Returns the bytes of mappings advised.
#define _GNU_SOURCE
#include <errno.h>
#include <node_api.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

static napi_value ReleaseFilePages(napi_env env, napi_callback_info info) {
  (void)info;
  FILE *maps = fopen("/proc/self/maps", "re");
  if (!maps) {
    napi_throw_error(env, strerrorname_np(errno), "releaseFilePages: cannot read /proc/self/maps");
    return NULL;
  }
  double advised = 0;
  int refused = 0;
  char line[4096];
  while (fgets(line, sizeof line, maps)) {
    unsigned long start, end;
    char path[4096] = "";
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &start, &end, path) < 2 || path[0] != '/') continue;
    madvise((void *)start, end - start, MADV_RANDOM);  // advice only: a refusal changes nothing
    if (madvise((void *)start, end - start, MADV_PAGEOUT) == 0) {
      advised += (double)(end - start);
    } else if (errno == EINVAL && advised == 0) {
      refused = EINVAL;  // at the first mapping: a kernel before 5.4, without this advice
      break;
    }
  }
  fclose(maps);
  if (refused) {
    napi_throw_error(env, "EINVAL", "releaseFilePages: madvise(MADV_PAGEOUT) EINVAL: the kernel lacks it (before 5.4)");
    return NULL;
  }
  napi_value result;
  napi_create_double(env, advised, &result);
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
