{
  "targets": [
    {
      "target_name": "memory",
      "sources": ["memory.c"],
      "cflags": ["-Wall", "-Wextra", "-Werror"],
      "defines": ["NAPI_VERSION=8"]
    },
    {
      "target_name": "random_readahead",
      "type": "shared_library",
      "sources": ["random-readahead.c"],
      "cflags": ["-Wall", "-Wextra", "-Werror"]
    }
  ]
}
