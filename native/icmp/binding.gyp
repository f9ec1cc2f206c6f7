{
  "targets": [
    {
      "target_name": "icmp",
      "sources": ["icmp.c"],
      "cflags": ["-Wall", "-Wextra", "-Werror"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
