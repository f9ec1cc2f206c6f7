{
  "targets": [
    {
      "target_name": "sockets",
      "sources": ["sockets.c"],
      "cflags": ["-Wall", "-Wextra", "-Werror", "-pthread"],
      "ldflags": ["-pthread"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
