// ICMP echo sockets for Node.js as a Node-API addon (ABI-stable: one build loads in any Node
// version with Node-API 8). Node has no raw or ping sockets, and shelling out to ping is ruled
// out; this file does only what JavaScript cannot: open the socket, send a datagram, and deliver
// each received datagram to a JavaScript callback from the event loop. Packet building and
// matching live in src/net/icmp.ts.
//
//   open(family: 4 | 6, dgram: boolean, onMessage: (data: Buffer) => void): handle
//     dgram=false: SOCK_RAW, needs CAP_NET_RAW; IPv4 data starts with the IP header. The kernel
//                  filter passes echo replies only.
//     dgram=true:  unprivileged ping socket (gid within net.ipv4.ping_group_range); data starts
//                  with the ICMP header and the kernel delivers only this socket's replies.
//   send(handle, address: string, packet: Buffer): void
//   close(handle): void        (idempotent; a collected handle is closed too)
// Errors are thrown as Error objects whose `code` is the errno name (EPERM, EACCES, …).
// Built at `npm ci` by node-gyp (install script of native/icmp/package.json): needs cc, make,
// python3 and Node headers (npm's nodedir; any Node version's headers do, the ABI is stable).
#define _GNU_SOURCE
#include <errno.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
// After netinet/in.h, whose definitions the kernel header then leaves alone.
#include <linux/icmp.h>

#include <node_api.h>
#include <uv.h>

typedef struct {
  uv_poll_t poll;
  int fd;
  int family;
  napi_env env;
  napi_ref on_message;
  napi_async_context context;
  bool dispatching;  // inside on_message: closing waits until the callback has returned
} Socket;

// What the JavaScript handle points to: outlives the socket, so a closed handle is detectable.
typedef struct {
  Socket *socket;
} Handle;

#define CHECK(env, call)                                              \
  do {                                                                \
    if ((call) != napi_ok) {                                          \
      napi_throw_error((env), NULL, "icmp addon: " #call " failed"); \
      return NULL;                                                    \
    }                                                                 \
  } while (0)

static napi_value throw_errno(napi_env env, const char *syscall, int err) {
  char message[160];
  snprintf(message, sizeof message, "%s: %s", syscall, strerror(err));
  napi_value code, text, error;
  napi_create_string_utf8(env, uv_err_name(-err), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &text);
  napi_create_error(env, code, text, &error);
  napi_throw(env, error);
  return NULL;
}

// Raw sockets see every ICMP packet the host receives; let only echo replies wake us.
static int pass_only_echo_replies(int fd, int family) {
  if (family == 6) {
    struct icmp6_filter filter;
    ICMP6_FILTER_SETBLOCKALL(&filter);
    ICMP6_FILTER_SETPASS(ICMP6_ECHO_REPLY, &filter);
    return setsockopt(fd, IPPROTO_ICMPV6, ICMP6_FILTER, &filter, sizeof filter);
  }
  struct icmp_filter filter = {.data = ~(1U << ICMP_ECHOREPLY)};
  return setsockopt(fd, SOL_RAW, ICMP_FILTER, &filter, sizeof filter);
}

static void free_socket(uv_handle_t *poll) { free(poll->data); }

static void release(Socket *socket) {
  napi_delete_reference(socket->env, socket->on_message);
  napi_async_destroy(socket->env, socket->context);
  uv_close((uv_handle_t *)&socket->poll, free_socket);
}

static void close_socket(Handle *handle) {
  Socket *socket = handle->socket;
  if (!socket) return;
  handle->socket = NULL;
  uv_poll_stop(&socket->poll);
  close(socket->fd);
  socket->fd = -1;
  if (!socket->dispatching) release(socket);
}

static void on_readable(uv_poll_t *poll, int status, int events) {
  (void)events;
  Socket *socket = poll->data;
  if (status < 0) return;
  napi_env env = socket->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  socket->dispatching = true;
  // Bounded per wakeup; the poll is level-triggered, so anything left wakes us again.
  for (int i = 0; i < 64 && socket->fd >= 0; i++) {
    static unsigned char data[65536];
    ssize_t length = recv(socket->fd, data, sizeof data, 0);
    if (length < 0) break;
    napi_value argv[1], callback, receiver;
    if (napi_create_buffer_copy(env, (size_t)length, data, NULL, &argv[0]) != napi_ok ||
        napi_get_reference_value(env, socket->on_message, &callback) != napi_ok ||
        napi_get_global(env, &receiver) != napi_ok)
      break;
    // make_callback (not call_function) so promises resolved by the callback settle now.
    if (napi_make_callback(env, socket->context, receiver, callback, 1, argv, NULL) == napi_pending_exception) {
      napi_value exception;
      napi_get_and_clear_last_exception(env, &exception);
      napi_fatal_exception(env, exception);
      break;
    }
  }
  socket->dispatching = false;
  if (socket->fd < 0) release(socket);  // closed by the callback
  napi_close_handle_scope(env, scope);
}

static void finalize_handle(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  close_socket(data);
  free(data);
}

static Handle *unwrap(napi_env env, napi_value value) {
  Handle *handle = NULL;
  if (napi_get_value_external(env, value, (void **)&handle) != napi_ok)
    napi_throw_type_error(env, NULL, "icmp addon: not a socket handle");
  return handle;
}

static napi_value Open(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t family;
  bool dgram;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(env, napi_get_value_int32(env, argv[0], &family));
  CHECK(env, napi_get_value_bool(env, argv[1], &dgram));
  int fd = socket(family == 6 ? AF_INET6 : AF_INET, (dgram ? SOCK_DGRAM : SOCK_RAW) | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  family == 6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
  if (fd < 0) return throw_errno(env, "socket", errno);
  if (!dgram && pass_only_echo_replies(fd, family) < 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, "setsockopt", err);
  }

  uv_loop_t *loop;
  Socket *socket = calloc(1, sizeof *socket);
  Handle *handle = malloc(sizeof *handle);
  napi_value name, result;
  int failed = !socket || !handle ? ENOMEM
               : napi_get_uv_event_loop(env, &loop) != napi_ok ? EINVAL
                                                               : -uv_poll_init(loop, &socket->poll, fd);
  if (failed) {
    free(socket);
    free(handle);
    close(fd);
    return throw_errno(env, "open", failed);
  }
  socket->poll.data = socket;
  socket->fd = fd;
  socket->family = family;
  socket->env = env;
  handle->socket = socket;
  // From here on close_socket() releases everything, so a failing step below cannot leak.
  if (napi_create_reference(env, argv[2], 1, &socket->on_message) != napi_ok ||
      napi_create_string_utf8(env, "IcmpSocket", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_async_init(env, argv[2], name, &socket->context) != napi_ok ||
      napi_create_external(env, handle, finalize_handle, NULL, &result) != napi_ok) {
    close_socket(handle);
    free(handle);
    napi_throw_error(env, NULL, "icmp addon: cannot create socket handle");
    return NULL;
  }
  uv_poll_start(&socket->poll, UV_READABLE, on_readable);
  // Pending probes hold their own timers; an idle socket must not keep the process alive.
  uv_unref((uv_handle_t *)&socket->poll);
  return result;
}

static napi_value Send(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Handle *handle = unwrap(env, argv[0]);
  if (!handle) return NULL;
  if (!handle->socket) return throw_errno(env, "send", EBADF);
  char address[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
  void *packet;
  size_t length;
  CHECK(env, napi_get_value_string_utf8(env, argv[1], address, sizeof address, NULL));
  CHECK(env, napi_get_buffer_info(env, argv[2], &packet, &length));
  // Numeric only: parses the address (and an IPv6 %zone) without any name lookup.
  struct addrinfo hints = {.ai_family = handle->socket->family == 6 ? AF_INET6 : AF_INET,
                           .ai_flags = AI_NUMERICHOST};
  struct addrinfo *target;
  if (getaddrinfo(address, NULL, &hints, &target) != 0) return throw_errno(env, "getaddrinfo", EINVAL);
  ssize_t sent = sendto(handle->socket->fd, packet, length, 0, target->ai_addr, target->ai_addrlen);
  int err = errno;
  freeaddrinfo(target);
  if (sent < 0) return throw_errno(env, "sendto", err);
  return NULL;
}

static napi_value Close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Handle *handle = unwrap(env, argv[0]);
  if (handle) close_socket(handle);
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor functions[] = {
      {"open", NULL, Open, NULL, NULL, NULL, napi_enumerable, NULL},
      {"send", NULL, Send, NULL, NULL, NULL, napi_enumerable, NULL},
      {"close", NULL, Close, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  CHECK(env, napi_define_properties(env, exports, sizeof functions / sizeof functions[0], functions));
  return exports;
}
